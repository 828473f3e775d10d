"""``launcher.compute``: whether the ranks on one machine compute at once or take turns.

Shared by the launchers that run several ranks on this machine (``local``: processes,
``threads``: threads of one process).

* ``serial``: one rank computes at a time with every core and hands the turn over whenever it
  waits for communication (and at every iteration's start). A rank's compute is then that of a
  rank alone on the machine, which is what ``network.mode=simulate`` charges to its clock: with
  ``parallel`` ranks, k ranks per core each measure a compute slowed by the others (caches,
  switches), and the simulated time grows with the ranks per core.
* ``parallel``: every rank runs when it can, the cores shared among them.
* ``auto``: ``serial`` under ``network.mode=simulate`` (and, for threads, where the ranks would
  otherwise share the process's random generator while training), else ``parallel``.

``network.mode=emulate`` is refused under ``serial``: its waits are wall-clock sleeps, which would
hold the turn.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from dlcomm.errors import UserError

COMPUTE_MODES = ("auto", "serial", "parallel")


def resolve_compute(cfg: Any, serial_reason: Callable[[Any], str] | None = None) -> tuple[str, str]:
    """``(serial or parallel, why)`` for ``launcher.compute``; ``serial_reason(cfg)``: a launcher's
    own reason for ``auto`` to choose serial (empty: none)."""
    if cfg.launcher.compute != "auto":
        return cfg.launcher.compute, f"launcher.compute={cfg.launcher.compute}"
    if cfg.network.mode == "simulate":
        return "serial", "auto: network.mode=simulate measures each rank's compute alone"
    reason = serial_reason(cfg) if serial_reason is not None else ""
    if reason:
        return "serial", f"auto: {reason}"
    return "parallel", "auto"


def check_compute(cfg: Any, launcher: str, serial_reason: Callable[[Any], str] | None = None) -> str:
    """The resolved mode, after refusing an unknown ``launcher.compute`` and emulation under
    serial turns (one line each)."""
    if cfg.launcher.compute not in COMPUTE_MODES:
        raise UserError(f"launcher.compute={cfg.launcher.compute} is invalid; use one of: {', '.join(COMPUTE_MODES)}")
    compute, why = resolve_compute(cfg, serial_reason)
    if compute == "serial" and cfg.network.mode == "emulate":
        raise UserError(
            f"network.mode=emulate is invalid with launcher={launcher} and serial compute ({why}): emulation "
            "sleeps in wall time while one rank holds the turn; use network.mode=simulate or "
            "launcher.compute=parallel"
        )
    return compute


def torch_threads(requested: int, compute: str, ranks: int) -> int:
    """torch's thread count per rank: ``train.threads_per_rank`` if set, else every core for the
    one rank computing at a time (serial), else the cores shared among the ``ranks``."""
    if requested > 0:
        return requested
    cores = os.cpu_count() or 1
    return cores if compute == "serial" else max(1, cores // ranks)
