"""dlcomm: an experiment runner for the communication side of distributed deep learning."""

__version__ = "0.1.0"
