"""Gradient compression split as GRACE splits it: a compressor (``compress=<name>``, one module a
compressor, registered in :mod:`dlcomm.compress.registry`; the interface in
:mod:`dlcomm.compress.base`), a memory (error feedback: what was not sent is kept and added to
the next tensor) and the communication that carries the payload, apart from who talks to whom
(the algorithm: ``allreduce``'s buckets, the parameter server's layers). docs/compression.md."""

from dlcomm.compress.layerdrop import KeepAll, LayerDrop, drop_threshold, layer_scores
from dlcomm.compress.memory import ResidualMemory

__all__ = ["KeepAll", "LayerDrop", "ResidualMemory", "drop_threshold", "layer_scores"]
