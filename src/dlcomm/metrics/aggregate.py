"""The timing rows (:class:`~dlcomm.metrics.rows.IterationRow`) aggregated into the epoch's and
the run's metrics and the per-iteration series.

Over rows ``r = 1..N`` (every rank's iterations of the span), with ``mean(x) = (1/N) sum_r x_r``:

* time, compute and exposed communication per iteration: ``mean(time_s)``, ``mean(compute_s)``,
  ``mean(comm_exposed_s)``; communication share ``c = mean(comm_exposed_s) / mean(time_s)``
  (0 when the time is 0); where the rows tell waiting for peers apart (threads), its mean and
  share ``w = mean(peer_wait_s) / mean(time_s)`` the same way, so that compute is ``1 - c - w``;
* samples per second: ``N * batch / train_wall_s`` (every row is one batch of one rank; the
  wall time is the one rank's clock that measured it, rank 0's in the loop);
* under a network model the same on the modelled cluster's clock (``sim_*``), the cost model's
  ``mean(comm_modelled_s)``, and the simulated training time ``max_rank sum_t sim_time_s``
  (the last rank to finish).

Timing warm-up: the means and the throughput leave out the run's first ``warmup`` iterations
(``train.timing_warmup``, default 1: the first iteration holds the ranks' start-up skew and
lazy initialisation). Their rows are still logged (``iter/*``, timings.csv) and count in the
loss mean and in the totals (simulated training time, time to target). A span with nothing but
warm-up iterations is aggregated whole.
"""

from __future__ import annotations

import math
from typing import Sequence

from dlcomm.metrics import names
from dlcomm.metrics.rows import MODELLED_SERIES, SERIES, IterationRow


def _share(part: float, whole: float) -> float:
    return part / whole if whole > 0 else 0.0


def timed_rows(rows: Sequence[IterationRow], warmup: int) -> list[IterationRow]:
    """The rows the timing means count: steps from ``warmup`` on (all of them when none is)."""
    kept = [row for row in rows if row.step >= warmup]
    return kept or list(rows)


def _warmup_wall(rows: Sequence[IterationRow], kept: Sequence[IterationRow]) -> float:
    """Wall time of the left-out iterations: per step, the slowest rank's batch and iteration."""
    steps = {row.step for row in kept}
    per_step: dict[int, float] = {}
    for row in rows:
        if row.step not in steps:
            per_step[row.step] = max(per_step.get(row.step, 0.0), row.time_s + row.data_s)
    return sum(per_step.values())


def epoch_metrics(
    rows: Sequence[IterationRow],
    batch_size: int,
    train_wall_s: float,
    warmup: int = 0,
    warmup_wall_s: float | None = None,
) -> dict[str, float]:
    """Means over ranks and iterations of the timing rows (from step ``warmup`` on), the loss
    mean over all of them, and the throughput: every row is one batch of one rank, trained
    within ``train_wall_s`` less the left-out iterations' wall time ``warmup_wall_s``, both on
    the clock of one rank (the loop passes rank 0's). Without ``warmup_wall_s`` it is estimated
    from the rows (per step, the slowest rank), which overstates it when the ranks started
    apart: a rank that waited for a late peer in the first collective counts the wait.
    The simulated means appear when the rows carry them (a network model was on)."""
    kept = timed_rows(rows, warmup)
    count = max(1, len(kept))

    def mean(name: str) -> float:
        return sum(getattr(row, name) for row in kept) / count

    time_per_iter = mean("time_s")
    if len(kept) == len(rows):  # no warm-up iteration in the span, or nothing but them: counted whole
        warmup_wall_s = 0.0
    wall = train_wall_s - (_warmup_wall(rows, kept) if warmup_wall_s is None else warmup_wall_s)
    metrics = {
        names.EPOCH_TRAIN_LOSS: sum(row.loss for row in rows) / max(1, len(rows)),
        names.EPOCH_TIME_PER_ITER: time_per_iter,
        names.EPOCH_COMPUTE_PER_ITER: mean("compute_s"),
        names.EPOCH_COMM_EXPOSED_PER_ITER: mean("comm_exposed_s"),
        names.EPOCH_COMM_SHARE: _share(mean("comm_exposed_s"), time_per_iter),
        names.EPOCH_SAMPLES_PER_S: len(kept) * batch_size / wall if wall > 0 else 0.0,
    }
    peer_wait = mean("peer_wait_s")
    if not math.isnan(peer_wait):
        metrics[names.EPOCH_PEER_WAIT_PER_ITER] = peer_wait
        metrics[names.EPOCH_PEER_WAIT_SHARE] = _share(peer_wait, time_per_iter)
    sim_time = mean("sim_time_s")
    if not math.isnan(sim_time):
        metrics[names.EPOCH_SIM_TIME_PER_ITER] = sim_time
        metrics[names.EPOCH_SIM_COMM_EXPOSED_PER_ITER] = mean("sim_comm_exposed_s")
        metrics[names.EPOCH_SIM_COMM_SHARE] = _share(mean("sim_comm_exposed_s"), sim_time)
        metrics[names.EPOCH_COMM_MODELLED_PER_ITER] = mean("comm_modelled_s")
    return metrics


def simulated_elapsed(rows: Sequence[IterationRow]) -> float:
    """Training time on the modelled cluster: the last rank to finish, i.e. the maximum over
    ranks of the sum of its iterations' ``sim_time_s``."""
    per_rank: dict[int, float] = {}
    for row in rows:
        per_rank[row.rank] = per_rank.get(row.rank, 0.0) + row.sim_time_s
    return max(per_rank.values(), default=0.0)


def run_metrics(
    rows: Sequence[IterationRow], batch_size: int, wall_s: float, modelled: bool, warmup: int = 0
) -> dict[str, float]:
    """The ``final/*`` metrics the rows of the whole run give: time per iteration and
    communication share, the bytes a rank sent per iteration (mean) and in its busiest iteration
    (peak: the bandwidth a link must carry at once, which Streaming DiLoCo's fragments cut), and
    with a network model (``modelled``) their simulated counterparts,
    the cost model's communication per iteration, the simulated training time and the emulation
    overruns (summed over ranks)."""
    overall = epoch_metrics(rows, batch_size, wall_s, warmup)
    metrics = {
        names.FINAL_TIME_PER_ITER: overall[names.EPOCH_TIME_PER_ITER],
        names.FINAL_COMM_SHARE: overall[names.EPOCH_COMM_SHARE],
        names.FINAL_BYTES_PER_ITER: sum(row.bytes_sent for row in rows) / max(1, len(rows)),
        names.FINAL_PEAK_BYTES_PER_ITER: float(max((row.bytes_sent for row in rows), default=0)),
    }
    if names.EPOCH_PEER_WAIT_SHARE in overall:
        metrics[names.FINAL_PEER_WAIT_SHARE] = overall[names.EPOCH_PEER_WAIT_SHARE]
    if modelled:
        metrics[names.FINAL_SIM_TIME_PER_ITER] = overall[names.EPOCH_SIM_TIME_PER_ITER]
        metrics[names.FINAL_SIM_COMM_SHARE] = overall[names.EPOCH_SIM_COMM_SHARE]
        metrics[names.FINAL_COMM_MODELLED_PER_ITER] = overall[names.EPOCH_COMM_MODELLED_PER_ITER]
        metrics[names.FINAL_SIM_TIME] = simulated_elapsed(rows)
        metrics[names.FINAL_OVERRUNS] = float(sum(row.overruns for row in rows))
    return metrics


def readable(final: dict[str, float], samples_per_iteration: int) -> dict[str, float]:
    """The ``final/*`` figures in the units the table prints, beside the raw ones: with ``t`` the
    time per iteration and ``c`` the communication share, ``ms_per_iter = 1000 t``, ``compute_ms
    = 1000 t (1 - c)``, ``comm_exposed_ms = 1000 t c``, ``samples_per_s = B / t`` (``B`` the
    samples of one iteration over all workers), ``test_acc_pct = 100 acc``; ``sim_*`` the same on
    the simulated clock. Where waiting for peers is told apart (share ``w``), ``peer_wait_ms =
    1000 t w`` and ``compute_ms = 1000 t (1 - c - w)``. Rounded as printed (ms to 3 decimals, % to 2)."""
    out: dict[str, float] = {}
    t, c = final.get(names.FINAL_TIME_PER_ITER, math.nan), final.get(names.FINAL_COMM_SHARE, math.nan)
    w = final.get(names.FINAL_PEER_WAIT_SHARE, math.nan)
    if not math.isnan(t):
        out[names.FINAL_MS_PER_ITER] = round(1e3 * t, 3)
        out[names.FINAL_COMPUTE_MS] = round(1e3 * t * (1 - c - (0.0 if math.isnan(w) else w)), 3)
        out[names.FINAL_COMM_EXPOSED_MS] = round(1e3 * t * c, 3)
        if not math.isnan(w):
            out[names.FINAL_PEER_WAIT_MS] = round(1e3 * t * w, 3)
        if t > 0:
            out[names.FINAL_SAMPLES_PER_S] = round(samples_per_iteration / t, 1)
    sim_t, sim_c = final.get(names.FINAL_SIM_TIME_PER_ITER, math.nan), final.get(names.FINAL_SIM_COMM_SHARE, math.nan)
    if not math.isnan(sim_t):
        out[names.FINAL_SIM_MS_PER_ITER] = round(1e3 * sim_t, 3)
        out[names.FINAL_SIM_COMM_EXPOSED_MS] = round(1e3 * sim_t * sim_c, 3)
    acc = final.get(names.FINAL_TEST_ACC, math.nan)
    if not math.isnan(acc):
        out[names.FINAL_TEST_ACC_PCT] = round(100 * acc, 2)
    return out


def iteration_series(rows: Sequence[IterationRow], modelled: bool, warmup: int = 0) -> dict[str, dict[int, float]]:
    """The ``iter/*`` series: MLflow name -> {step: mean over the ranks' rows of that step} for
    every row field that names a series (the modelled ones only when ``modelled``). The first
    ``warmup`` steps (``train.timing_warmup``: start-up skew, seconds where later steps take
    milliseconds) of the time series (:data:`TIMED`) are the ``warmup/*`` series instead, so a
    chart of ``iter/time_s`` keeps its scale."""
    fields = {**SERIES, **(MODELLED_SERIES if modelled else {})}
    by_step: dict[int, list[IterationRow]] = {}
    for row in rows:
        by_step.setdefault(row.step, []).append(row)
    series: dict[str, dict[int, float]] = {}
    for metric, column in fields.items():
        for step, at in sorted(by_step.items()):
            timed = metric in TIMED  # the loss, bytes and messages of a warm-up step are as any other's
            name = metric if step >= warmup or not timed else WARMUP_PREFIX + metric.removeprefix("iter/")
            value = sum(getattr(row, column) for row in at) / len(at)
            if not math.isnan(value):  # peer_wait_s under processes: not known, not logged
                series.setdefault(name, {})[step] = value
    return series


WARMUP_PREFIX = "warmup/"
TIMED = {
    names.ITER_TIME,
    names.ITER_COMPUTE,
    names.ITER_COMM_EXPOSED,
    names.ITER_COMM_BUSY,
    names.ITER_PEER_WAIT,
    names.ITER_BATCHED_SHARE,
    names.ITER_SIM_TIME,
    names.ITER_SIM_COMPUTE,
    names.ITER_SIM_COMM_EXPOSED,
    names.ITER_SIM_COMM_BUSY,
}  # what the warm-up skews
