"""One clock per comparison: which runs a speedup may compare.

A speedup ``t_baseline / t_method`` (and a "comm cut") is a ratio of two times on one clock; it
means something only when both times were charged alike. A run's **comparison** is

* its **clock**: ``simulated`` when it has a simulated time per iteration
  (``final/sim_time_per_iter_s``: ``network.mode=simulate``), else ``wall``;
* on the simulated clock, the **compute** its ranks were charged: ``measured`` (each rank's own
  time, ``network.compute=measured``, and runs from before the profile), or the compute profile
  it charged, named by the run's ``profile`` tag less its origin (what was measured, its ms per
  step and spread, when, on which host and device, torch, threads: two runs that read one
  measurement, one measuring it now and one from the cache, charge alike), or ``unrecorded`` for a
  run charged from a profile before dlcomm tagged runs with it.

The **network** is part of the run's setting already (every ``network.*`` parameter is a setting
key, :mod:`dlcomm.report.groups`): runs on two networks are never in one setting, so never compared.

Runs are averaged, deduplicated (the latest run of a configuration and seed) and compared only
within one (comparison, setting); the report writes one table per comparison, headed by its
:func:`title` (a wall-clock speedup and a simulated one never share a column, nor two profiles'),
and ``table.csv`` names each row's comparison in its ``comparison`` column. A table with a single
comparison and no recorded profile is written as before, with neither heading nor column.
"""

from __future__ import annotations

from collections import Counter

import pandas as pd

from dlcomm.metrics import names

CLOCK, PROFILE = "clock", "profile"  # the run columns :func:`with_comparison` adds
MEASURED, UNRECORDED = "measured", "unrecorded"
_SIM_TIME = "metrics." + names.FINAL_SIM_TIME_PER_ITER


def _text(value: object) -> str:
    return "" if value is None or (isinstance(value, float) and pd.isna(value)) else str(value).strip()


def profile_of(run: pd.Series) -> str:
    """The compute a simulated run was charged (see the module docstring): the ``profile`` tag
    less its ``; <origin>`` part, ``measured`` or ``unrecorded``."""
    tag, origin = _text(run.get("tags.profile")), _text(run.get("tags.profile_origin"))
    if tag:
        return tag[: -len(origin) - 2] if origin and tag.endswith(f"; {origin}") else tag
    compute = _text(run.get("params.network.compute")) or MEASURED  # no such param: before the profile
    return UNRECORDED if compute == "profile" else MEASURED


def with_comparison(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` with the columns ``clock`` and ``profile`` ('' on the wall clock) of each run's
    comparison; as it is when it has them."""
    if CLOCK in runs and PROFILE in runs:
        return runs
    simulated = runs[_SIM_TIME].notna() if _SIM_TIME in runs else pd.Series(False, index=runs.index)
    profiles = [profile_of(run) if sim else "" for (_, run), sim in zip(runs.iterrows(), simulated)]
    return runs.assign(**{CLOCK: simulated.map({True: "simulated", False: "wall"}), PROFILE: profiles})


def network_name(run: pd.Series) -> str:
    """The network preset a run was on: ``network.name``, else its ``network`` tag's first part."""
    return _text(run.get("params.network.name")) or _text(run.get("tags.network")).split(",")[0] or "off"


def title(runs: pd.DataFrame) -> str:
    """One line naming the comparison of ``runs`` (all of one clock and profile): ``wall clock``, or
    ``simulated clock: <networks>; compute ...`` with the profile's provenance and where the runs'
    copies of it came from (measured now, read from the cache, a file: ``profile_origin``)."""
    networks = sorted({network_name(run) for _, run in runs.iterrows()} - {"off"})
    if runs[CLOCK].iloc[0] == "wall":
        return "wall clock" + (f" ({', '.join(networks)} emulated)" if networks else "")
    profile = runs[PROFILE].iloc[0]
    where = (", ".join(networks) + (" (a setting each)" if len(networks) > 1 else "")) or "no network"
    if profile == MEASURED:
        return f"simulated clock: {where}; compute measured on the ranks as they ran"
    if profile == UNRECORDED:
        return f"simulated clock: {where}; compute profile unrecorded (runs from before dlcomm tagged it)"
    origins = Counter(_text(o) for o in runs.get("tags.profile_origin", pd.Series(dtype=str)) if _text(o))
    came = "; ".join(
        origin if len(origins) == 1 else f"{origin} ({count} run{'s' if count > 1 else ''})"
        for origin, count in sorted(origins.items(), key=lambda item: (-item[1], item[0]))
    )
    return f"simulated clock: {where}; compute profile {profile}" + (f"; {came}" if came else "")


def recorded(runs: pd.DataFrame) -> bool:
    """Whether some simulated run of ``runs`` names the profile it charged."""
    return bool((~runs[PROFILE].isin(["", MEASURED, UNRECORDED])).any())


def clock_words(simulated: bool, networks: set[str], shared: bool = False) -> str:
    """A figure's clock in words, for a time axis: ``simulated clock on <networks>`` (the
    network model its times come from; ``simulated clock`` when none is named), or ``wall clock``
    followed by the networks emulated (``; eth_1g emulated``) and, when the runs' ranks took turns
    on this machine's cores, ``; ranks shared cores``."""
    named = ", ".join(sorted(networks - {"", "off"}))
    if simulated:
        return "simulated clock" + (f" on {named}" if named else "")
    notes = ([f"{named} emulated"] if named else []) + (["ranks shared cores"] if shared else [])
    return "; ".join(["wall clock", *notes])


def runs_clock(runs: pd.DataFrame) -> str:
    """:func:`clock_words` for ``runs`` (MLflow's columns): simulated when every run modelled a
    network (``network.mode=simulate``), named by their presets; else the wall clock, noting
    runs whose ranks shared cores (``shared_hardware`` tag)."""
    if runs.empty:
        return "wall clock"
    modes = runs.get("params.network.mode", runs.get("tags.network_mode", pd.Series("", index=runs.index)))
    simulated = bool(modes.fillna("").astype(str).eq("simulate").all()) or (
        _SIM_TIME in runs and bool(runs[_SIM_TIME].notna().all())
    )
    shared = bool(runs.get("tags.shared_hardware", pd.Series("", index=runs.index)).map(_text).ne("").any())
    return clock_words(simulated, {network_name(run) for _, run in runs.iterrows()}, shared)


def table_clock(table: pd.DataFrame, simulated: bool, runs: pd.DataFrame) -> str:
    """:func:`clock_words` for a report's ``table`` of ``runs`` whose times are on the simulated
    clock (``simulated``) or the wall clock: the runs' network presets (:func:`network_name`), and
    the table's ``ranks_per_core``."""
    per_core = table.get("ranks_per_core", pd.Series(dtype=float))
    return clock_words(simulated, {network_name(run) for _, run in runs.iterrows()}, bool((per_core > 1).any()))
