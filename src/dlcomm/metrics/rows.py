"""The timing row: what the train loop measures in one iteration of one rank.

One :class:`IterationRow` per rank and iteration; its fields, in order, are the columns of the
artifact ``timings.csv`` (:data:`TIMING_COLUMNS`). A field whose metadata names a ``series``
is also logged to MLflow per iteration under that name (the mean over ranks at each step,
:func:`dlcomm.metrics.aggregate.iteration_series`); ``modelled`` marks the fields that exist only
under a network model (``nan`` under ``network=off``). Adding a per-iteration metric is one field
here (and its line in docs/metrics.md), set where the loop builds the row.

Invariants on every row: ``compute_s + peer_wait_s + comm_exposed_s = time_s`` (``peer_wait_s``
taken as 0 where it is nan: processes cannot tell waiting for peers from the transfer) and
``sim_compute_s + sim_comm_exposed_s = sim_time_s``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

from dlcomm.metrics import names


def _series(name: str, modelled: bool = False) -> dict[str, object]:
    """A timing field's metadata: the series it is logged as, and whether only a modelled clock has it."""
    return {"series": name, "modelled": modelled}


@dataclass
class IterationRow:
    rank: int
    node: int
    epoch: int  # counted from 0
    step: int  # the iteration, counted from 0 over the whole run
    time_s: float = field(metadata=_series(names.ITER_TIME))  # wall time from before_step to the end of after_step
    # time_s - peer_wait_s - comm_exposed_s: the rank's own work
    compute_s: float = field(metadata=_series(names.ITER_COMPUTE))
    comm_exposed_s: float = field(metadata=_series(names.ITER_COMM_EXPOSED))  # blocked on the Channel while data moved
    comm_busy_s: float = field(metadata=_series(names.ITER_COMM_BUSY))  # union of the operations' [start, end]
    data_s: float  # producing the batch (outside time_s)
    bytes_sent: int = field(metadata=_series(names.ITER_BYTES))
    messages: int = field(metadata=_series(names.ITER_MESSAGES))
    loss: float = field(metadata=_series(names.ITER_LOSS))  # training loss of the iteration's batch
    sim_time_s: float = field(metadata=_series(names.ITER_SIM_TIME, modelled=True))  # the modelled cluster's clock
    # sim_time_s - sim_comm_exposed_s
    sim_compute_s: float = field(metadata=_series(names.ITER_SIM_COMPUTE, modelled=True))
    sim_comm_exposed_s: float = field(metadata=_series(names.ITER_SIM_COMM_EXPOSED, modelled=True))
    sim_comm_busy_s: float = field(metadata=_series(names.ITER_SIM_COMM_BUSY, modelled=True))
    comm_modelled_s: float = field(metadata=_series(names.ITER_COMM_MODELLED, modelled=True))  # cost model's durations
    overruns: int  # operations whose real transfer outlasted the model (emulate)
    # blocked on the Channel before the peers reached the operation (or, on shared hardware, waiting
    # for a core or the turn back after it): dlcomm.comm.waits; nan where the transport cannot tell
    # (processes), and for rows of checkpoints written before it existed
    peer_wait_s: float = field(default=math.nan, metadata=_series(names.ITER_PEER_WAIT))
    # launcher.compute=batched: this rank's share (1/N) of the one call that ran every rank's forward
    # and backward (dlcomm.train.batched), counted in compute_s; nan under other compute modes
    batched_share_s: float = field(default=math.nan, metadata=_series(names.ITER_BATCHED_SHARE))

    @classmethod
    def restore(cls, saved: IterationRow | tuple) -> IterationRow:
        """A row as a checkpoint holds it (a row, or the positional tuple of checkpoints written
        before rows were typed, in :data:`TIMING_COLUMNS` order)."""
        return saved if isinstance(saved, IterationRow) else cls(*saved)


TIMING_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(IterationRow))

# MLflow series name -> row field, in field order; the modelled ones separately.
SERIES: dict[str, str] = {
    f.metadata["series"]: f.name for f in fields(IterationRow) if "series" in f.metadata and not f.metadata["modelled"]
}
MODELLED_SERIES: dict[str, str] = {
    f.metadata["series"]: f.name for f in fields(IterationRow) if f.metadata.get("modelled")
}
