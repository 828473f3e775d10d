#!/usr/bin/env python
"""Do two reports of the same experiments agree? Compares every ``table.csv`` under two folders
(``results/`` as committed and a regenerated copy), column by column, leaving out the wall
clock's columns (``dlcomm.report.table.WALL``) and the provenance (run ids, commits, ranks per core). The simulated
clock's columns (``SIMULATED``, and the speedup's where it is on the simulated clock) are compared
on the rows that both tables charged from a compute profile (``sim_clock`` = ``profile``: they
repeat bit for bit); on other rows they were measured and are left out too.

    python scripts/compare_results.py results/ /tmp/fresh/results/ [--experiments a,b]

Rows are paired by (setting, method), whatever their order. Prints one line per experiment
(identical, with how many rows' simulated columns were compared, or the first differing cells) and
exits 1 when any differs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from dlcomm.report.table import MEASURED, ON_SPEEDUP_CLOCK, SIMULATED, WALL

PROVENANCE = (
    "runs",
    "commits",
    "ranks_per_core",
    "network",
    "comparison",
)  # which runs, which code, on what machine, modelling which preset, charged from which profile (when and where measured)
ROW = ["setting", "method"]  # what a row is about
CLOCK = "sim_clock"  # how the simulated compute was charged: profile (repeatable) or measured


def _profiled(table: pd.DataFrame) -> pd.Series:
    return table[CLOCK].eq("profile") if CLOCK in table.columns else pd.Series(False, index=table.index)


def _speedup_simulated(table: pd.DataFrame) -> pd.Series:
    clock = table["speedup_clock"] if "speedup_clock" in table.columns else pd.Series("", index=table.index)
    return clock.eq("simulated")


def compare(old: Path, new: Path) -> tuple[list[str], int]:
    """The differing cells (at most 3 per column) and the number of rows whose simulated columns
    were compared."""
    a, b = pd.read_csv(old), pd.read_csv(new)
    keep = [c for c in a.columns if c not in WALL and c not in PROVENANCE and c != CLOCK]
    only_one = set(a.columns) ^ set(b.columns)
    if (
        only_one - set(MEASURED) - {CLOCK} - set(PROVENANCE)
    ):  # a clock's column added since (e.g. a spread) is not a disagreement
        return [f"columns differ: {sorted(only_one)}"], 0
    if len(a) != len(b):
        return [f"{len(a)} rows against {len(b)}"], 0
    if set(ROW) <= set(a.columns) & set(b.columns):  # the same rows in another order are the same table
        a, b = (frame.sort_values(ROW, kind="stable").reset_index(drop=True) for frame in (a, b))
    profiled = _profiled(a) & _profiled(b)
    on_sim = profiled & _speedup_simulated(a) & _speedup_simulated(b)
    problems = []
    for column in keep:
        if column not in b.columns:
            continue  # a clock's column the other table lacks
        left, right = a[column], b[column]
        same = (left == right) | (left.isna() & right.isna())
        if column in SIMULATED:
            same |= ~profiled
        elif column in ON_SPEEDUP_CLOCK:
            same |= ~on_sim
        if (
            column.endswith("_std") and "seeds" in a.columns
        ):  # one seed: 0 in tables written before it became empty (n/a)
            same |= (a["seeds"] == 1) & (left.fillna(0) == 0) & (right.fillna(0) == 0)
        for index in same[~same].index[:3]:
            problems.append(f"{a.loc[index, 'method']} {column}: {left[index]} against {right[index]}")
    return problems, int(profiled.sum())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--experiments", default="", help="comma-separated; default: every table in OLD")
    args = parser.parse_args()
    names = (
        args.experiments.split(",") if args.experiments else sorted(p.parent.name for p in args.old.glob("*/table.csv"))
    )
    failed = False
    for name in names:
        old, new = args.old / name / "table.csv", args.new / name / "table.csv"
        if not old.is_file() or not new.is_file():
            print(f"{name}: missing {old if not old.is_file() else new}")
            failed = True
            continue
        problems, simulated = compare(old, new)
        failed |= bool(problems)
        rows = len(pd.read_csv(old))
        clock = (
            f"simulated columns identical on {simulated} of {rows} rows"
            if simulated
            else "no simulated column compared"
        )
        print(
            f"{name}: "
            + (f"identical except wall-clock columns and run ids ({clock})" if not problems else "; ".join(problems))
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
