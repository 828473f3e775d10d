"""What ``launcher.compute=auto`` takes from measurement: whether ``batched`` beats the mode it
would pick otherwise, for this model on this device (issue 60, item 4).

The figures are ``compute_modes.json`` beside this module, written by
``scripts/bench_compute_modes.py --json`` and committed as measured (its ``measured`` entry says
where and when): one row per device, model, rank count and batch, the median ms per iteration of
serial, parallel, batched and one batch of N x B. A run's row is the one of its device and model
nearest its rank count (then its per-worker batch), on a log scale; a device or model no one
measured has no row, and ``auto`` then keeps its rule (:func:`dlcomm.launch.threads.resolve_compute`).
Nothing here is estimated. Imports nothing heavy.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path
from typing import Any

MEASURED = Path(__file__).resolve().with_name("compute_modes.json")


@lru_cache(maxsize=4)
def _rows(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return list(json.loads(path.read_text()).get("rows", []))


def measured_row(device: str, model: str, ranks: int, batch: int, path: Path | None = None) -> dict[str, Any] | None:
    """The measurement nearest ``ranks`` (then ``batch``) of ``model`` on ``device`` in ``path``
    (:data:`MEASURED` by default), or None."""
    rows = [row for row in _rows(path or MEASURED) if row["device"] == device and row["model"] == model]
    if not rows:
        return None
    return min(
        rows, key=lambda row: (abs(math.log(row["ranks"] / max(1, ranks))), abs(math.log(row["batch"] / max(1, batch))))
    )


def batched_if_faster(
    device: str, model: str, ranks: int, batch: int, otherwise: str, path: Path | None = None
) -> str | None:
    """``auto``'s reason to take ``batched`` over ``otherwise`` (its pick without measurement), when
    the measurement nearest the run says batched is faster; None when it is not or none exists."""
    path = path or MEASURED
    row = measured_row(device, model, ranks, batch, path)
    if row is None or row["batched"] >= row[otherwise]:
        return None
    return (
        f"auto: batched measured faster than {otherwise} for model={model} on {device} "
        f"({row['batched']:.1f} against {row[otherwise]:.1f} ms/iter at {row['ranks']} ranks of batch {row['batch']}; "
        f"launch/{path.name})"
    )
