"""Algorithms' statistics: what an algorithm observed, collected per rank, aggregated over ranks.

After every iteration the loop takes the algorithm's new observations
(:meth:`dlcomm.algorithms.base.Algorithm.take_metrics`, a ``{name: Mean | Count}``) into the
rank's :class:`StatLog`, stamped with the iteration. At each epoch end the ranks' logs are
gathered to rank 0, which logs, for ``n`` workers:

* a :class:`Mean` statistic (observations ``v_k`` at steps ``t_k``): ``epoch/<name>`` =
  ``(1/N) sum_k v_k`` over all ``N`` observations of all ranks in the epoch, and the series
  ``iter/<name>`` at step ``t`` = the mean of the ranks' observations at ``t``;
* a :class:`Count` statistic (``c_i`` events on worker ``i``): ``epoch/<name>`` =
  ``(1/n) sum_i c_i``, events per worker in the epoch;

and at the end of the run ``final/<name>``: the same over the whole run (a mean over all
observations; events per worker over the run). Names: ``dlcomm.metrics.names``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, cast

from dlcomm.metrics import names


@dataclass
class Mean:
    """Observations whose value is their mean (e.g. the dropped fraction of each iteration);
    ``steps[k]`` is the iteration of ``values[k]`` (filled by :meth:`StatLog.add`)."""

    values: list[float] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)


@dataclass
class Count:
    """Events counted on one rank (e.g. pulls made); the value is the count per worker."""

    count: float = 0.0


Stat = Mean | Count


@dataclass
class StatLog:
    """A rank's statistics since the last epoch end (or, merged, all ranks' over a span)."""

    stats: dict[str, Stat] = field(default_factory=dict)

    def add(self, step: int, taken: dict[str, Stat]) -> None:
        """Append the observations ``taken`` after iteration ``step``."""
        for name, stat in taken.items():
            if isinstance(stat, Mean):
                own = cast(Mean, self.stats.setdefault(name, Mean()))  # a name keeps its kind of stat
                own.values.extend(stat.values)
                own.steps.extend(stat.steps or [step] * len(stat.values))
            else:
                counted = cast(Count, self.stats.setdefault(name, Count()))  # a name keeps its kind of stat
                counted.count += stat.count

    def merge(self, other: StatLog) -> None:
        """Add ``other``'s observations (keeping their steps)."""
        for name, stat in other.stats.items():
            if isinstance(stat, Mean):
                self.add(0, {name: Mean(list(stat.values), list(stat.steps))})
            else:
                self.add(0, {name: Count(stat.count)})


def merged(logs: list[StatLog]) -> StatLog:
    """One log holding every observation of ``logs``."""
    total = StatLog()
    for log in logs:
        total.merge(log)
    return total


def values(log: StatLog, workers: int, metric: Callable[[str], str]) -> dict[str, float]:
    """``metric(name)`` -> the statistic's value over ``log``: mean of the observations, or
    events per worker (``workers`` = n)."""
    out = {}
    for name, stat in log.stats.items():
        if isinstance(stat, Mean):
            if stat.values:
                out[metric(name)] = sum(stat.values) / len(stat.values)
        else:
            out[metric(name)] = stat.count / max(1, workers)
    return out


def epoch_values(logs: list[StatLog]) -> dict[str, float]:
    """``epoch/<name>`` of the ranks' epoch ``logs`` (one per worker)."""
    return values(merged(logs), len(logs), names.epoch_stat)


def final_values(run: StatLog, workers: int) -> dict[str, float]:
    """``final/<name>`` of all ranks' observations over the run."""
    return values(run, workers, names.final_stat)


def step_series(logs: list[StatLog]) -> dict[str, dict[int, float]]:
    """``iter/<name>`` -> {step: mean of the ranks' observations at that step} of every Mean."""
    sums: dict[str, dict[int, list[float]]] = {}
    for log in logs:
        for name, stat in log.stats.items():
            if isinstance(stat, Mean):
                at = sums.setdefault(names.iter_stat(name), {})
                for step, value in zip(stat.steps, stat.values):
                    at.setdefault(step, []).append(value)
    return {name: {step: sum(v) / len(v) for step, v in sorted(at.items())} for name, at in sums.items()}
