"""The scheduling rules of overlapped pull-gossip (the wide-area paper, section 4), free of
communication so that they can be tested alone.

* :func:`update_time` is Algorithm 2's UPDATE_TIME: the estimate ``c`` of a pair's transfer
  time follows a new measurement ``m``: ``m < (1 - theta) c -> m``; ``m < (1 + theta) c ->
  (c + m) / 2``; else ``m``. A measurement near the estimate is averaged in, a far one
  replaces it.
* :func:`scheduled_start`: the latest start that still ends by the window's end,
  ``max(now, end - c)`` (``c = inf``, never measured: start now).
* :class:`PullManager`: the communication manager's state. ``queue`` holds the free workers in
  the order they became free; a request of ``i`` pops the first free ``j != i`` and answers
  ``(j, scheduled_start(end_i, c_ij, now_i))``; when none is free the request waits (FIFO)
  until a release. A worker is out of the queue from its assignment to its release, so it is
  never handed to two pullers at once.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field


def update_time(estimate: float, measured: float, theta: float) -> float:
    """UPDATE_TIME(c, comm) with threshold ``theta`` (``c = inf``: take the measurement)."""
    if measured < (1 - theta) * estimate:
        return measured
    if measured < (1 + theta) * estimate:
        return (estimate + measured) / 2
    return measured


def scheduled_start(end: float, estimate: float, now: float) -> float:
    """``max(now, end - c)``: as late as possible while still done by ``end``."""
    return now if math.isinf(estimate) else max(now, end - estimate)


@dataclass
class Assignment:
    puller: int
    peer: int
    start: float


@dataclass
class PullManager:
    workers: int
    theta: float
    queue: deque[int] = field(default_factory=deque)
    waiting: deque[tuple[int, float, float]] = field(default_factory=deque)  # (puller, end, now)
    estimates: dict[tuple[int, int], float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.queue.extend(range(self.workers))

    def estimate(self, i: int, j: int) -> float:
        return self.estimates.get((i, j), math.inf)

    def request(self, puller: int, end: float, now: float) -> list[Assignment]:
        """GET_START_TIME: the assignment for ``puller`` now, or none while no peer is free."""
        self.waiting.append((puller, end, now))
        return self._assign()

    def release(self, puller: int, peer: int, measured: float) -> list[Assignment]:
        """UPDATE_INFORMATION: ``peer`` is free again and ``c_ij = c_ji`` follow the measured
        time (``nan``: the transfer did not happen, the estimates stay); waiting requests that
        can now be served are answered."""
        if peer in self.queue:
            raise ValueError(f"worker {peer} released by {puller} but it was not handed out")
        self.queue.append(peer)
        if not math.isnan(measured):
            for pair in ((puller, peer), (peer, puller)):
                self.estimates[pair] = update_time(self.estimate(*pair), measured, self.theta)
        return self._assign()

    def cancel(self, puller: int) -> bool:
        """Withdraw ``puller``'s waiting request; false when it was already answered."""
        before = len(self.waiting)
        self.waiting = deque(entry for entry in self.waiting if entry[0] != puller)
        return len(self.waiting) < before

    def _assign(self) -> list[Assignment]:
        """Serve the waiting requests in arrival order, each with the first free peer other
        than itself (a request that only its own puller could take waits; later ones may pass)."""
        answers: list[Assignment] = []
        still_waiting: deque[tuple[int, float, float]] = deque()
        for puller, end, now in self.waiting:
            peer = next((j for j in self.queue if j != puller), None)
            if peer is None:
                still_waiting.append((puller, end, now))
                continue
            self.queue.remove(peer)
            answers.append(Assignment(puller, peer, scheduled_start(end, self.estimate(puller, peer), now)))
        self.waiting = still_waiting
        return answers
