"""dlcomm: an experiment runner for the communication side of distributed deep learning."""

import os as _os

# MLflow 3 sends usage telemetry (and writes an installation id under ~/.config/mlflow/) unless
# told not to; it reads this when mlflow is first imported, which in every dlcomm process (the
# driver, its ranks, SLURM's tasks) comes after this package's import. MLFLOW_DISABLE_TELEMETRY=false
# in the environment turns it back on.
_os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

__version__ = "0.1.0"
