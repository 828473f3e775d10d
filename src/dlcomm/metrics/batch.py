"""The samples one rank consumes per optimizer step, written once.

A step takes ``train.comm_interval`` micro-batches of ``train.batch_size`` samples. The plan and the
compute profile (:func:`dlcomm.train.plan.step_batch`, on the typed configuration), the rank's
throughput, and the report's global mini-batch and samples per second (on a recorded run's
parameters) all read it here, so the quantity a run trains on and the one its report divides by
cannot drift apart.
"""

from __future__ import annotations

from typing import Any


def step_batch(batch_size: Any, comm_interval: Any) -> Any:
    """``batch_size * comm_interval``: numbers, or a report's columns of them (pandas multiplies
    element-wise)."""
    return batch_size * comm_interval
