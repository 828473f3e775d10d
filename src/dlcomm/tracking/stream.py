"""Per-iteration metrics that reach MLflow while an epoch runs, so that a run that dies mid-epoch
keeps what it did.

The loop only appends to a deque (no I/O, no lock: ``deque.append`` and ``popleft`` are atomic
in CPython, so the loop never waits for the sender); a daemon thread hands what accumulated to
MLflow in one batch every ``every_s`` seconds, and :meth:`MetricStream.close` sends the rest. A
run killed between two batches loses at most ``every_s`` seconds of points.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Callable, Iterable


class MetricStream:
    """``add(name, value, step)`` from the training loop; ``send(points)`` (MLflow's batch
    write) from a background thread every ``every_s`` seconds. ``every_s <= 0``: off."""

    def __init__(self, send: Callable[[Iterable[tuple[str, float, int]]], None], every_s: float) -> None:
        self._send = send
        self._points: deque[tuple[str, float, int]] = deque()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None  # a failed send: raised by close(), in the loop's thread
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
        if points:
            self._send(points)

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
