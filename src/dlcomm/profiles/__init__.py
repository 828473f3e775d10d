"""The compute profiles shipped with dlcomm: measured on real devices, chosen with one override,
``network.compute_profile=<device>/<workload>`` (e.g. ``h200/resnet50_b32_amp``).

A shipped profile is a file ``src/dlcomm/profiles/<device>/<workload>.json`` (this package's
folder) in the format
``dlcomm profile --out`` writes (docs/network.md, "Profiles measured on real devices"), where
``<device>`` is a short lower-case name of the device (``h200``, ``v100``, ``epyc-1core``) and
``<workload>`` is ``<model>_b<per-worker batch>[_x<micro-batches>]_<fp32|amp>``. Each states in its
own fields where, when and how it was measured (device, host, torch, date, clock, spread; ``note``
for the driver and anything else). Nothing here is estimated: a device no one measured has no file.
Imports nothing of dlcomm's and nothing heavy: the configuration's checks and ``dlcomm config
--explain network`` read the library.
"""

from __future__ import annotations

import json
from pathlib import Path

LIBRARY = Path(__file__).resolve().parent


def library_names() -> list[str]:
    """Every shipped profile's name, ``<device>/<workload>``, sorted."""
    return sorted(f"{path.parent.name}/{path.stem}" for path in LIBRARY.glob("*/*.json"))


def library_path(name: str) -> Path | None:
    """The file of the shipped profile ``name`` (with or without ``.json``), or None."""
    stem = name.removesuffix(".json")
    if stem.count("/") != 1 or ".." in stem:
        return None
    path = LIBRARY / f"{stem}.json"
    return path if path.is_file() else None


def library_lines() -> list[str]:
    """One line per shipped profile: its name, step, spread and provenance (for ``--explain``)."""
    lines = []
    for name in library_names():
        raw = json.loads((LIBRARY / f"{name}.json").read_text())
        step_ms = 1e3 * (raw["lead_s"] + raw["backward_s"] + raw["optimizer_s"])
        spread = raw.get("spread", -1)
        where = ", ".join(str(raw[key]) for key in ("device", "measured_at", "host") if raw.get(key))
        lines.append(
            f"  {name}: {step_ms:.2f} ms per step"
            + (f" ±{spread:.1%}" if spread >= 0 else "")
            + f" ({where}; torch {raw.get('torch_version', '?')})"
        )
    return lines
