"""The report's figures (PNG): accuracy against epoch and time, the per-iteration time split
into compute and exposed communication, speedup against workers, time per iteration against
latency. Each function returns the file it wrote, or None when the runs cannot show it (a
single world size has no speedup-against-workers curve)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pandas as pd

Curve = tuple[str, pd.Series] | None


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _label(setting: str, method: str, several: bool) -> str:
    return f"{method} [{setting}]" if several else method


def accuracy(runs: pd.DataFrame, curve_of: Callable[[pd.DataFrame, str], Curve], path: Path, title: str) -> Path | None:
    """Mean test accuracy over seeds against epoch (left) and against training time (right)."""
    plt = _pyplot()
    several = runs["setting"].nunique() > 1
    figure, (by_epoch, by_time) = plt.subplots(1, 2, figsize=(14, 4.2))
    drawn = False
    for (setting, method), frame in runs.groupby(["setting", "method"], sort=True):
        label = _label(setting, method, several)
        for axis, kind in ((by_epoch, "epoch"), (by_time, "time")):
            curve = curve_of(frame, kind)
            if curve is not None and len(curve[1]) > 0:
                axis.plot(curve[1].index, 100 * curve[1].values, marker="o", ms=3, label=label)
                axis.set_xlabel(curve[0])
                drawn = True
    if not drawn:
        plt.close(figure)
        return None
    by_epoch.set(ylabel="test accuracy % (mean over workers and seeds)", title="against epochs")
    by_time.set(title="against training time")
    for axis in (by_epoch, by_time):
        axis.grid(alpha=0.3)
    legend_from = by_time if len(by_time.lines) >= len(by_epoch.lines) else by_epoch
    legend_from.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def time_breakdown(table: pd.DataFrame, path: Path, title: str) -> Path:
    """Stacked bars: compute and exposed communication per iteration, per method (simulated
    times where the runs have them, else wall)."""
    plt = _pyplot()
    simulated = table["sim_ms_per_iter"].notna().all()
    prefix = "sim" if simulated else "wall"
    several = table["setting"].nunique() > 1
    labels = [_label(s, m, several) for s, m in zip(table["setting"], table["method"])]
    figure, axis = plt.subplots(figsize=(max(6.5, 0.9 * len(labels) + 3.5), 4.6))
    positions = range(len(labels))
    compute, comm = table[f"{prefix}_compute_ms"], table[f"{prefix}_comm_exposed_ms"]
    axis.bar(positions, compute, label="compute")
    axis.bar(positions, comm, bottom=compute, label="exposed communication")
    axis.set_xticks(list(positions), labels, rotation=30, ha="right", fontsize=7)
    axis.set(ylabel=f"{'simulated' if simulated else 'wall'} ms per iteration", title=title)
    axis.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    axis.grid(axis="y", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def against(table: pd.DataFrame, runs: pd.DataFrame, x_key: str, x_label: str, y: str, y_label: str,
            path: Path, title: str) -> Path | None:
    """``y`` of every method against the setting parameter ``x_key`` (one line per method)."""
    x_of = runs.drop_duplicates("setting").set_index("setting")[x_key].astype(float)
    if x_of.nunique() < 2 or table[y].isna().all():
        return None
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(6, 4.2))
    for method, frame in table.groupby("method", sort=True):
        points = pd.Series(frame[y].values, index=frame["setting"].map(x_of).values).sort_index()
        axis.plot(points.index, points.values, marker="o", label=method)
    axis.set(xlabel=x_label, ylabel=y_label, title=title)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
