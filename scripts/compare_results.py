#!/usr/bin/env python
"""Do two reports of the same experiments agree? Compares every ``table.csv`` under two folders
(``results/`` as committed and a regenerated copy), column by column, leaving out what is
measured by a clock (``dlcomm.report.table.MEASURED``) and the provenance (run ids, commits).

    python scripts/compare_results.py results/ /tmp/fresh/results/ [--experiments a,b]

Rows are paired by (setting, method), whatever their order. Prints one line per experiment
(identical, or the first differing cells) and exits 1 when any differs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from dlcomm.report.table import MEASURED

PROVENANCE = ("runs", "commits")
ROW = ["setting", "method"]  # what a row is about


def compare(old: Path, new: Path) -> list[str]:
    a, b = pd.read_csv(old), pd.read_csv(new)
    keep = [c for c in a.columns if c not in MEASURED and c not in PROVENANCE]
    only_one = set(a.columns) ^ set(b.columns)
    if only_one - set(MEASURED):  # a clock's column added since (e.g. a spread) is not a disagreement
        return [f"columns differ: {sorted(only_one)}"]
    if len(a) != len(b):
        return [f"{len(a)} rows against {len(b)}"]
    if set(ROW) <= set(a.columns) & set(b.columns):  # the same rows in another order are the same table
        a, b = (frame.sort_values(ROW, kind="stable").reset_index(drop=True) for frame in (a, b))
    problems = []
    for column in keep:
        left, right = a[column], b[column]
        same = (left == right) | (left.isna() & right.isna())
        if column.endswith("_std") and "seeds" in a.columns:  # one seed: 0 in tables written before it became empty (n/a)
            same |= (a["seeds"] == 1) & (left.fillna(0) == 0) & (right.fillna(0) == 0)
        for index in same[~same].index[:3]:
            problems.append(f"{a.loc[index, 'method']} {column}: {left[index]} against {right[index]}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--experiments", default="", help="comma-separated; default: every table in OLD")
    args = parser.parse_args()
    names = args.experiments.split(",") if args.experiments else sorted(p.parent.name for p in args.old.glob("*/table.csv"))
    failed = False
    for name in names:
        old, new = args.old / name / "table.csv", args.new / name / "table.csv"
        if not old.is_file() or not new.is_file():
            print(f"{name}: missing {old if not old.is_file() else new}")
            failed = True
            continue
        problems = compare(old, new)
        failed |= bool(problems)
        print(f"{name}: " + ("identical except measured columns and run ids" if not problems else "; ".join(problems)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
