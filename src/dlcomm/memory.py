"""This machine's memory as the kernel reports it (torch-free: commands that do not train use it)."""

from __future__ import annotations

import math
from pathlib import Path

MIB = 1 << 20


def available_mib() -> float:
    """Memory the kernel can give without swapping (``MemAvailable``), in MiB; inf if unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return math.inf
