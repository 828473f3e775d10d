"""Gradient compression split as GRACE splits it: a :class:`Memory` (what was not sent is kept and
added to the next gradient) and a compressor (which layers are sent), apart from who talks to
whom (the parameter server's communicator, :mod:`dlcomm.algorithms.ps`)."""

from dlcomm.compress.layerdrop import KeepAll, LayerDrop, drop_threshold, layer_scores
from dlcomm.compress.memory import ResidualMemory

__all__ = ["KeepAll", "LayerDrop", "ResidualMemory", "drop_threshold", "layer_scores"]
