"""The papers' table: per setting and method, accuracy over seeds, time per iteration, speedup
and MA-acceleration.

For the runs of one method (one per seed), with ``m`` the mean and ``s`` the sample standard
deviation over seeds (undefined for one seed: empty in ``table.csv``, ``n/a`` in ``table.md``
and ``table.tex``, never ``0``):

* ``final_acc`` / ``best_acc``: ``final/test_acc_mean`` and ``final/best_test_acc_mean``, in %;
* wall time per iteration ``t`` (``final/time_per_iter_s``) split as compute ``t (1 - c - w)``,
  waiting for peers ``t w`` (``wall_peer_wait_ms``, with ``w = final/peer_wait_share``: runs whose
  ranks were threads, which tell it apart; ``w = 0`` and the column absent otherwise) and exposed
  communication ``t c`` with ``c = final/comm_share``, in ms; the same on the modelled
  cluster from ``final/sim_time_per_iter_s`` and ``final/sim_comm_share``, and the cost model's
  communication per iteration ``final/comm_modelled_per_iter_s`` (computed, not measured);
* ``sent_mb``: MB one worker sent over the run, ``final/bytes_sent_per_iter`` x ``final/steps`` / 1e6;
  ``peak_mb``: the most MB one worker sent in one iteration, ``final/peak_bytes_sent_per_iter`` / 1e6
  (the burst a link must carry at once). Both only with ``report.traffic`` or when compressors
  are compared; ``peak_mb`` absent for runs older than the metric;
* ``layers_dropped_pct``: the parameter server's ``final/ps_dropped_fraction`` in % (the
  fraction of gradient entries in the layers the workers dropped, the layer-dropping paper's
  knob beside its communication cut); empty for other algorithms, absent when no run has it;
* ``wall_ms_per_iter_std`` and ``sim_ms_per_iter_std``: the sample standard deviation of ``t``
  over seeds;
* ``speedup = t_baseline / t_method``, both on one clock and compute profile: rows are made per
  (comparison, setting, method), the comparison being the runs' clock and, on the simulated clock,
  the compute profile they charged (:mod:`dlcomm.report.clocks`; column ``comparison``, its
  heading, '' when the table has one comparison and no profile to name), so a wall-clock baseline
  never divides a simulated time, nor one profile's time another's. ``speedup_clock`` is the
  comparison's clock (simulated times where its runs have them, else wall); ``speedup_std`` is
  the sample standard deviation over seeds of the per-seed ratios ``t_baseline(s) / t_method(s)`` (seeds
  that both have; undefined below two, and for the baseline itself);
* ``comm_cut_pct = 100 (1 - e_method / e_baseline)``, with ``e`` the exposed communication per
  iteration on the speedup's clock: the communication a method saves (the layer-dropping
  paper's "communication -95%"); its total cut is ``100 (1 - 1 / speedup)``;
* ``ma_acceleration`` (the node-based paper's Table III): with ``A`` the best accuracy of the
  baseline's seed-mean accuracy curve, reached at ``x_b``, and ``x_m`` the first point at which
  the method's curve reaches ``A``: ``x_b / x_m`` (> 1: the method gets there sooner; empty
  when it never does). ``x`` is the epoch, or the training clock for runs evaluated on the
  clock (``train.eval_every_s``).

* ``ranks_per_core``: the most ranks per core among the method's runs on their machine
  (``tags.host_ranks / tags.host_cores``, recorded by the launchers that run every rank on the
  driver's machine); above 1 the ranks took turns on the cores, so the wall clock is no
  cluster's: the table's wall-clock headers then say "ranks shared cores". Absent when no run
  recorded it.

* ``network``: the network presets the method's runs modelled (``tags.network``; ``off``: none).

* ``sim_clock``: how the simulated clock was charged for compute: ``profile`` (every run of the
  method under ``network.compute=profile``), ``measured`` (the ranks' own measured time), empty
  when not simulated.

Columns of a clock are listed in :data:`MEASURED`: the wall clock's (:data:`WALL`) change from one
repetition to the next; the simulated clock's (:data:`SIMULATED`, and :data:`ON_SPEEDUP_CLOCK` when
``speedup_clock`` is ``simulated``) repeat exactly where ``sim_clock`` is ``profile`` (and the
algorithm is synchronous: gossip_pull's results follow the ranks' real progress). Every other column
repeats exactly for the same configuration and seed.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import pandas as pd

from dlcomm.metrics import names
from dlcomm.report.clocks import CLOCK, PROFILE, recorded, title, with_comparison
from dlcomm.report.groups import matches

METRIC = "metrics."
WALL = ("wall_ms_per_iter", "wall_compute_ms", "wall_peer_wait_ms", "wall_comm_exposed_ms", "wall_ms_per_iter_std")
SIMULATED = ("sim_ms_per_iter", "sim_compute_ms", "sim_comm_exposed_ms", "sim_ms_per_iter_std")
ON_SPEEDUP_CLOCK = ("speedup", "speedup_std", "comm_cut_pct")  # on the simulated clock where speedup_clock says so
MEASURED = WALL + SIMULATED + ON_SPEEDUP_CLOCK
OPTIONAL = (
    "layers_dropped_pct",
    "ranks_per_core",
    "sent_mb",
    "peak_mb",
    "wall_peer_wait_ms",
)  # present only when some run of the table has it
Curves = Callable[[pd.DataFrame], tuple[str, pd.Series] | None]


def _metric(frame: pd.DataFrame, key: str) -> pd.Series:
    column = METRIC + key
    return frame[column].astype(float) if column in frame.columns else pd.Series(np.nan, index=frame.index)


def _mean_std(values: pd.Series) -> tuple[float, float]:
    """Mean and sample standard deviation; the deviation is nan below two values (one seed
    says nothing about the spread)."""
    values = values.dropna()
    if values.empty:
        return math.nan, math.nan
    return float(values.mean()), float(values.std(ddof=1)) if len(values) > 1 else math.nan


def method_row(frame: pd.DataFrame) -> dict:
    """The numbers of one method in one setting (``frame``: its runs, one per seed)."""
    row: dict = {"seeds": len(frame)}
    for name, key in (("final_acc", names.FINAL_TEST_ACC), ("best_acc", names.FINAL_BEST_TEST_ACC)):
        mean, std = _mean_std(100 * _metric(frame, key))
        row[f"{name}_mean"], row[f"{name}_std"] = mean, std
    wall, share = _metric(frame, names.FINAL_TIME_PER_ITER), _metric(frame, names.FINAL_COMM_SHARE)
    row["wall_ms_per_iter"], row["wall_ms_per_iter_std"] = (1e3 * v for v in _mean_std(wall))
    waiting = _metric(frame, names.FINAL_PEER_WAIT_SHARE)
    row["wall_compute_ms"] = 1e3 * (wall * (1 - share - waiting.fillna(0.0))).mean()
    row["wall_peer_wait_ms"] = 1e3 * (wall * waiting).mean() if waiting.notna().any() else math.nan
    row["wall_comm_exposed_ms"] = 1e3 * (wall * share).mean()
    sim, sim_share = _metric(frame, names.FINAL_SIM_TIME_PER_ITER), _metric(frame, names.FINAL_SIM_COMM_SHARE)
    row["sim_ms_per_iter"], row["sim_ms_per_iter_std"] = (1e3 * v for v in _mean_std(sim))
    row["sim_compute_ms"] = 1e3 * (sim * (1 - sim_share)).mean()
    row["sim_comm_exposed_ms"] = 1e3 * (sim * sim_share).mean()
    row["sim_clock"] = sim_clock(frame)
    networks = frame["tags.network"].dropna() if "tags.network" in frame else pd.Series(dtype=str)
    row["network"] = ",".join(sorted(set(networks))) or "off"
    row["comm_modelled_ms"] = 1e3 * _metric(frame, names.FINAL_COMM_MODELLED_PER_ITER).mean()
    row["layers_dropped_pct"] = 100 * _metric(frame, names.FINAL_PS_DROPPED_FRACTION).mean()
    row["sent_mb"] = (_metric(frame, names.FINAL_BYTES_PER_ITER) * _metric(frame, names.FINAL_STEPS)).mean() / 1e6
    row["peak_mb"] = _metric(frame, names.FINAL_PEAK_BYTES_PER_ITER).mean() / 1e6
    row["ranks_per_core"] = ranks_per_core(frame)
    row["steps"] = _metric(frame, names.FINAL_STEPS).mean()
    row["runs"] = " ".join(frame["run_id"])
    row["commits"] = " ".join(sorted({code_of(run) for _, run in frame.iterrows()}))
    return row


def code_of(run: pd.Series) -> str:
    """Which code made a run: its dlcomm checkout's commit (10 characters), else the installed
    package's version (``dlcomm 0.3.0``), else ``unknown``."""
    commit, version = run.get("tags.git_commit"), run.get("tags.dlcomm_version")
    if isinstance(commit, str) and commit and commit != "unknown":
        return commit[:10]
    return f"dlcomm {version}" if isinstance(version, str) and version else "unknown"


def ranks_per_core(frame: pd.DataFrame) -> float:
    """The most ranks per core of the machine among ``frame``'s runs (nan when none recorded it)."""
    if "tags.host_ranks" not in frame or "tags.host_cores" not in frame:
        return math.nan
    ratio = pd.to_numeric(frame["tags.host_ranks"], errors="coerce") / pd.to_numeric(
        frame["tags.host_cores"], errors="coerce"
    )
    return float(ratio.max()) if ratio.notna().any() else math.nan


def sim_clock(frame: pd.DataFrame) -> str:
    """``profile`` when every run of ``frame`` charged its simulated compute from a profile (its
    simulated figures repeat exactly), ``measured`` when some charged measured time (runs from
    before the profile have no ``network.compute``), empty when none was simulated."""
    if _metric(frame, names.FINAL_SIM_TIME_PER_ITER).isna().all():
        return ""
    compute = frame.get("params.network.compute", pd.Series("measured", index=frame.index)).fillna("measured")
    return "profile" if (compute == "profile").all() else "measured"


def per_seed_speedup_std(base: pd.DataFrame, method: pd.DataFrame, time_key: str) -> float:
    """Sample standard deviation over seeds of ``t_baseline(s) / t_method(s)``, pairing the two
    methods' runs by seed (``time_key``: the final per-iteration metric both are timed by)."""
    base_t = _metric(base, time_key).set_axis(base["seed"].to_numpy())
    method_t = _metric(method, time_key).set_axis(method["seed"].to_numpy())
    return _mean_std((base_t / method_t).dropna())[1]


def first_reaching(curve: pd.Series, level: float) -> float:
    """The first ``x`` (index) at which ``curve`` reaches ``level``; nan if never."""
    reached = curve[curve >= level - 1e-12]
    return float(reached.index[0]) if not reached.empty else math.nan


def ma_acceleration(baseline: pd.Series, method: pd.Series) -> float:
    """``x_b / x_m``: when the baseline reaches its best, over when the method first reaches it."""
    if baseline.empty or method.empty:
        return math.nan
    best = baseline.max()
    x_base, x_method = first_reaching(baseline, best), first_reaching(method, best)
    return x_base / x_method if x_method > 0 else math.nan


def summarise(runs: pd.DataFrame, baseline: str, curves: Curves, traffic: bool = False) -> pd.DataFrame:
    """One row per (setting, method) from :func:`dlcomm.report.groups.assign`'s runs, settings
    in their order there (by value). ``curves(frame)`` gives a method's seed-mean accuracy curve and its axis name.
    The traffic columns (``sent_mb``, ``peak_mb``) are kept when ``traffic`` (``report.traffic``) or
    when compressors are compared, and dropped otherwise."""
    rows = []
    runs = with_comparison(runs)
    titles = {key: title(frame) for key, frame in runs.groupby([CLOCK, PROFILE], sort=False)}
    for (clock, profile, setting), in_setting in runs.groupby([CLOCK, PROFILE, "setting"], sort=False):
        methods = {method: frame for method, frame in in_setting.groupby("method", sort=True)}
        base = next((m for m in methods if matches(m, baseline)), None)
        simulated = clock == "simulated"  # every run of this (comparison, setting) is on it
        base_curve = curves(methods[base]) if base else None
        time_key = "sim_ms_per_iter" if simulated else "wall_ms_per_iter"
        time_metric = names.FINAL_SIM_TIME_PER_ITER if simulated else names.FINAL_TIME_PER_ITER
        comm_key = "sim_comm_exposed_ms" if simulated else "wall_comm_exposed_ms"
        base_row = method_row(methods[base]) if base else {}
        base_time, base_comm = base_row.get(time_key, math.nan), base_row.get(comm_key, math.nan)
        for method, frame in methods.items():
            row = {"comparison": titles[(clock, profile)], "setting": setting, "method": method, "baseline": base or ""}
            row.update(method_row(frame))
            if base:
                row["speedup"], row["speedup_clock"] = base_time / row[time_key], clock
                row["comm_cut_pct"] = 100 * (1 - row[comm_key] / base_comm) if base_comm > 0 else math.nan
                # the baseline against itself is 1 by definition: no spread to show
                row["speedup_std"] = (
                    math.nan if method == base else per_seed_speedup_std(methods[base], frame, time_metric)
                )
                curve = curves(frame)
                row["ma_acceleration"] = (
                    ma_acceleration(base_curve[1], curve[1])
                    if base_curve and curve and curve[0] == base_curve[0]
                    else math.nan
                )
                row["ma_axis"] = base_curve[0] if base_curve else ""
            else:
                row["speedup"], row["speedup_clock"], row["ma_acceleration"], row["ma_axis"] = (
                    math.nan,
                    "",
                    math.nan,
                    "",
                )
                row["speedup_std"], row["comm_cut_pct"] = math.nan, math.nan
            rows.append(row)
    table = pd.DataFrame(rows)
    optional = [c for c in OPTIONAL if c in table and table[c].isna().all()]
    if table["comparison"].nunique() == 1 and not recorded(runs):  # one comparison, no profile to name: no heading
        table["comparison"] = ""
    if not (
        traffic or table["method"].str.contains("+", regex=False).any()
    ):  # bytes asked for, or compressors compared
        optional += ["sent_mb", "peak_mb"]
    return table.drop(columns=optional)  # a column no run of the table has is absent, not empty


def _pm(mean: float, std: float, digits: int = 2) -> str:
    """``mean ± std``; ``mean ± n/a`` when there is no spread to show (one seed)."""
    if math.isnan(mean):
        return ""
    return f"{mean:.{digits}f} ± " + ("n/a" if math.isnan(std) else f"{std:.{digits}f}")


def _num(value: float, digits: int = 1) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def simulated_clock_name(table: pd.DataFrame) -> str:
    """``simulated <network>`` when the table's runs all modelled one network preset, else ``simulated``."""
    networks = set(",".join(table.get("network", pd.Series(dtype=str)).fillna("")).split(",")) - {"", "off"}
    return f"simulated {networks.pop()}" if len(networks) == 1 else "simulated"


def comparisons(table: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """The table's comparisons in order (:mod:`dlcomm.report.clocks`), each as its heading and its
    rows: what the report shows as one table each, so that no column holds speedups of two clocks
    or profiles. The heading is '' for a table of one comparison with no profile to name."""
    if "comparison" not in table:
        return [("", table)]
    return [(str(heading), rows) for heading, rows in table.groupby("comparison", sort=False)]


def clock_lines(table: pd.DataFrame) -> list[str]:
    """What a command says of the table's comparisons: none for one with no profile to name, its
    heading for one, else how many and each heading (the tables are apart)."""
    headings = [heading for heading, _ in comparisons(table) if heading]
    if len(headings) < 2:
        return headings
    return [
        f"{len(headings)} comparisons, one table each (a speedup compares runs on one clock and compute profile):",
        *(f"  {number}. {heading}" for number, heading in enumerate(headings, 1)),
    ]


def presentable(table: pd.DataFrame) -> pd.DataFrame:
    """The table as people read it: mean ± std (``n/a`` for one seed), ms with one decimal, columns
    that say their unit. One comparison only (:func:`comparisons`): its speedup header names its clock."""
    shared = "ranks_per_core" in table and bool((table["ranks_per_core"] > 1).any())
    wall_note = "; ranks shared cores" if shared else ""  # ranks taking turns on cores: no cluster's wall clock
    waits = "wall_peer_wait_ms" in table and bool(table["wall_peer_wait_ms"].notna().any())
    out = pd.DataFrame(
        {
            "setting": table["setting"],
            "method": table["method"],
            "seeds": table["seeds"],
            "final acc %": [_pm(m, s) for m, s in zip(table["final_acc_mean"], table["final_acc_std"])],
            "best acc %": [_pm(m, s) for m, s in zip(table["best_acc_mean"], table["best_acc_std"])],
            "steps": [_num(v, 0) for v in table["steps"]],
            f"wall ms/iter (compute + {'waiting for peers + ' if waits else ''}comm{wall_note})": [
                f"{_pm(t, s, 1)} ({_num(c)} + {f'{_num(w) or chr(63)} + ' if waits else ''}{_num(e)})"
                for t, s, c, w, e in zip(
                    table["wall_ms_per_iter"],
                    table["wall_ms_per_iter_std"],
                    table["wall_compute_ms"],
                    table.get("wall_peer_wait_ms", pd.Series(math.nan, index=table.index)),
                    table["wall_comm_exposed_ms"],
                )
            ],
        }
    )
    if table["sim_ms_per_iter"].notna().any():
        clocks = set(table.get("sim_clock", pd.Series(dtype=str)).fillna("")) - {""}
        charged = f"{clocks.pop()} compute" if len(clocks) == 1 else "compute"  # profiled / measured, when all agree
        out[f"simulated ms/iter ({charged.replace('profile ', 'profiled ')} + comm)"] = [
            f"{_pm(t, s, 1)} ({_num(c)} + {_num(e)})" if not math.isnan(t) else ""
            for t, s, c, e in zip(
                table["sim_ms_per_iter"],
                table["sim_ms_per_iter_std"],
                table["sim_compute_ms"],
                table["sim_comm_exposed_ms"],
            )
        ]
        out["modelled comm ms/iter"] = [_num(v, 2) for v in table["comm_modelled_ms"]]
    if "sent_mb" in table:  # kept by summarise: traffic asked for, or compressors compared
        out["sent MB/worker"] = [_num(v, 2) for v in table["sent_mb"]]
    if "peak_mb" in table:
        out["peak MB/iter/worker"] = [_num(v, 3) for v in table["peak_mb"]]
    if "layers_dropped_pct" in table and table["layers_dropped_pct"].notna().any():
        out["layers dropped %"] = [_num(v) for v in table["layers_dropped_pct"]]
    clocks = set(table.get("speedup_clock", pd.Series(dtype=str)).fillna("")) - {""}
    if len(clocks) > 1 or ("comparison" in table and table["comparison"].nunique() > 1):
        raise ValueError("presentable shows one comparison: split the table with comparisons() first")
    # the clock a speedup was measured on, in its header: a wall clock of ranks that share cores is no cluster's
    on = f" ({f'wall clock{wall_note}' if clocks == {'wall'} else simulated_clock_name(table)})" if clocks else ""
    out[f"speedup{on}"] = [
        _num(m, 2) + ("" if math.isnan(s) else f" ± {s:.2f}") for m, s in zip(table["speedup"], table["speedup_std"])
    ]
    out[f"comm cut %{on}"] = [_num(v) for v in table["comm_cut_pct"]]
    out["MA-acceleration"] = [_num(v, 2) for v in table["ma_acceleration"]]
    if (out["setting"] == "all").all():
        out = out.drop(columns="setting")
    return out
