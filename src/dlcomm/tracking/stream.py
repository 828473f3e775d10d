"""Per-iteration metrics that reach MLflow while an epoch runs, so that a run that dies mid-epoch
keeps what it did.

The loop only appends to a deque (no I/O, no lock: ``deque.append`` and ``popleft`` are atomic
in CPython, so the loop never waits for the sender); a daemon thread hands what accumulated to
MLflow in one batch every ``every_s`` seconds, and :meth:`MetricStream.close` sends the rest. A
run killed between two batches loses at most ``every_s`` seconds of points.

Sending costs MLflow's store ~80 us of Python per point, in this process and under its GIL: a
5,000-step launcher=threads run of a small model on the CPU (two points a step) spent 0.79 s of
CPU on them in 14 s, taken from the loop itself (scripts/bench_step_overhead.py; a loop of 1,000
steps a second would lose ~16% of a core). So the stream is
thinned to at most :data:`STEPS_PER_S` steps a second (at least :data:`MIN_STEPS` a batch): of a
batch of more steps, every k-th step's points are sent (the steps divisible by k, so both series
keep the same steps). A step of 50 ms or more is never thinned; every step's values are in the
run's ``timings.csv`` and its ``iter/*`` series when its epoch ends.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from typing import Callable, Iterable

STEPS_PER_S = 20  # the most steps a second whose points are streamed
MIN_STEPS = 100  # a batch of this many steps or fewer is sent whole


class MetricStream:
    """``add(name, value, step)`` from the training loop; ``send(points)`` (MLflow's batch
    write) from a background thread every ``every_s`` seconds. ``every_s <= 0``: off."""

    def __init__(self, send: Callable[[Iterable[tuple[str, float, int]]], None], every_s: float) -> None:
        self._send = send
        self._points: deque[tuple[str, float, int]] = deque()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None  # a failed send: raised by close(), in the loop's thread
        self._since = time.monotonic()  # the last batch's time: this batch's share of STEPS_PER_S
        self.enabled = every_s > 0
        if self.enabled:
            self._thread = threading.Thread(target=self._run, args=(every_s,), daemon=True, name="dlcomm-metric-stream")
            self._thread.start()

    def add(self, name: str, value: float, step: int) -> None:
        if self.enabled:
            self._points.append((name, value, step))

    def _run(self, every_s: float) -> None:
        while not self._stop.wait(every_s):
            try:
                self.flush()
            except Exception as error:  # noqa: BLE001 - reported by close(); the epoch's own writes will fail too
                self._error = error
                return

    def flush(self) -> None:
        queue = self._points
        points = [queue.popleft() for _ in range(len(queue))]  # what is there now; later points wait
        now = time.monotonic()
        allowed = max(MIN_STEPS, int((now - self._since) * STEPS_PER_S))
        self._since = now
        if points:
            self._send(thinned(points, allowed))

    def close(self) -> None:
        """Stop the thread and send what is left (again and again: a no-op); a send that failed in
        the thread is raised here."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        self.flush()


def thinned(points: list[tuple[str, float, int]], allowed: int) -> list[tuple[str, float, int]]:
    """``points`` of at most about ``allowed`` steps: all of them, or those of every k-th step
    (the steps divisible by k, the smallest k that keeps ``allowed`` or fewer of the batch's steps'
    range)."""
    if not points:
        return points
    first, last = min(step for _, _, step in points), max(step for _, _, step in points)
    every = math.ceil((last - first + 1) / allowed)
    return points if every <= 1 else [point for point in points if point[2] % every == 0]
