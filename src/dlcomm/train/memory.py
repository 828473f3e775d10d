"""Peak memory of a rank, two ways.

* RSS (``ru_maxrss``, kept by the kernel): every resident page mapped by the process,
  including the read-only pages of torch's shared libraries that all ranks on a machine share.
* PSS (proportional set size, ``/proc/self/smaps_rollup``): each shared page counted as
  ``1 / (processes sharing it)``, so the PSS of all ranks adds up to the memory they really use.
  The kernel keeps no PSS peak, so a daemon thread samples it every ``interval_s``.
"""

from __future__ import annotations

import resource
import threading
from pathlib import Path

_ROLLUP = Path("/proc/self/smaps_rollup")


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


class PssMonitor:
    """Samples PSS in the background; ``peak_mib`` is the largest sample so far."""

    def __init__(self, interval_s: float = 0.5) -> None:
        self.peak_mib = current_pss_mib()
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True, name="pss-monitor")
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.peak_mib = max(self.peak_mib, current_pss_mib())

    def stop(self) -> float:
        self._stop.set()
        self._thread.join(timeout=2 * self._interval_s)
        self.peak_mib = max(self.peak_mib, current_pss_mib())
        return self.peak_mib
