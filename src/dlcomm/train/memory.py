"""Peak memory of a rank, two ways.

* RSS (``ru_maxrss``, kept by the kernel): every resident page mapped by the process,
  including the read-only pages of torch's shared libraries that all ranks on a machine share.
* PSS (proportional set size, ``/proc/self/smaps_rollup``): each shared page counted as
  ``1 / (processes sharing it)``, so the PSS of all ranks adds up to the memory they really use.
  The kernel keeps no PSS peak, so a daemon thread samples it.

Reading ``smaps_rollup`` walks every mapping of the process: 5-20 ms of kernel time for a rank
with torch loaded (~1,000 mappings), which, every half second, was 1-4% of a core taken beside a
training loop whose step is a millisecond (scripts/bench_step_overhead.py). So the thread reads
the resident size (``/proc/self/statm``, ~15 us) every ``interval_s`` and PSS only when the
resident size grew by more than :data:`GROWTH` (1%) since the last PSS reading, or
``full_every_s`` passed: pages that enter PSS enter the resident set first, so a PSS peak comes
with resident growth, and the peak reported is at most ~1% of the resident size short (the
periodic reading covers what does not come with growth: a page another process stopped sharing).
A loop's own slow growth (its timing rows) no longer sets off a reading every half second.

A monitor's stop follows the same rule: the last monitor of the process to stop reads PSS, an earlier
one (ranks that are threads stop one after another) only when the resident size grew since the last
reading, and a second stop reads nothing. Every read stalls the process's other threads on its memory
map besides: under ``launcher=threads`` two reads a rank at its end took half of a short job's time.
"""

from __future__ import annotations

import math
import os
import resource
import threading
import time
from pathlib import Path

_ROLLUP = Path("/proc/self/smaps_rollup")
_STATM = Path("/proc/self/statm")
_PAGE_MIB = os.sysconf("SC_PAGE_SIZE") / (1 << 20) if hasattr(os, "sysconf") else 4096 / (1 << 20)
FULL_EVERY_S = 10.0  # PSS read at least this often, resident growth or not
GROWTH = 0.01  # the resident size's growth (a share) since the last PSS reading that makes the next


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_pss_mib() -> float:
    """Proportional set size now, in MiB; NaN where the kernel does not report it."""
    try:
        for line in _ROLLUP.read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def current_rss_mib() -> float:
    """Resident set size now, in MiB (cheap: ``/proc/self/statm``); NaN where unknown."""
    try:
        return int(_STATM.read_text().split()[1]) * _PAGE_MIB
    except (OSError, IndexError, ValueError):
        return float("nan")


class PssMonitor:
    """The peak PSS of this process while the monitor runs. One sampling thread serves every
    monitor of the process (ranks that are threads share it), from the first start to the last
    stop: every ``interval_s`` it reads the resident size, and PSS when that grew or
    ``full_every_s`` passed (module docstring)."""

    _lock = threading.Lock()
    _users = 0
    _peak_mib = float("nan")
    _read_resident = float("nan")  # the resident size at the last PSS reading
    _read_at = 0.0
    _stop = threading.Event()
    _thread: threading.Thread | None = None

    def __init__(self, interval_s: float = 0.5, full_every_s: float = FULL_EVERY_S) -> None:
        cls = type(self)
        with cls._lock:
            if cls._users == 0:
                cls._peak_mib = float("nan")
                cls._read()
                cls._stop = threading.Event()
                cls._thread = threading.Thread(
                    target=cls._sample, args=(cls._stop, interval_s, full_every_s), daemon=True, name="pss-monitor"
                )
                cls._thread.start()
            cls._users += 1
        self._running = True

    @classmethod
    def _read(cls) -> None:
        """Read PSS into the peak, noting the resident size and the time of the reading."""
        cls._read_resident, cls._read_at = current_rss_mib(), time.monotonic()
        cls._peak_mib = _larger(cls._peak_mib, current_pss_mib())

    @classmethod
    def _grown(cls) -> bool:
        """Whether the resident size grew past :data:`GROWTH` since the last PSS reading (or is unknown)."""
        return not current_rss_mib() <= cls._read_resident * (1 + GROWTH)

    @classmethod
    def _sample(cls, stop: threading.Event, interval_s: float, full_every_s: float) -> None:
        while not stop.wait(interval_s):
            if cls._grown() or time.monotonic() - cls._read_at >= full_every_s:
                with cls._lock:  # a stop may read at the same moment: neither reading's peak is lost
                    cls._read()

    @property
    def peak_mib(self) -> float:
        return type(self)._peak_mib

    def stop(self) -> float:
        """The peak so far. The last monitor to stop reads PSS once more and ends the sampling; an
        earlier one reads it only if the resident size grew since the last reading; a second stop of
        the same monitor reads nothing (module docstring)."""
        cls = type(self)
        with cls._lock:
            if self._running:
                self._running = False
                cls._users -= 1
                if cls._users == 0 or cls._grown():
                    cls._read()
                if cls._users == 0:
                    cls._stop.set()
            return cls._peak_mib


def _larger(peak: float, sample: float) -> float:
    """The new peak (a NaN peak, from a kernel that did not report, gives way to any sample)."""
    return sample if math.isnan(peak) else max(peak, sample)
