"""Which runs are compared with which: groups of runs that share everything but the method and
the seed.

A run's configuration splits three ways:

* the **method**: ``algo.name`` and the ``algo.*`` knobs that vary among the experiment's runs
  of that algorithm (``gossip_pull overlap=scheduled scheduler=managed``), joined by the
  compressor and its varying ``compress.*`` knobs where one is used (``allreduce+powersgd
  rank=2``: not a word of ``allreduce``, so the uncompressed run stays the baseline);
* the **seed**, over which a method's runs are averaged;
* the config groups the experiment names in ``report.method_groups`` (``optim`` where DeMo trains
  with SGD and MuLoCo with Muon beside AdamW-trained methods) belong to the method too: a run whose
  choice is not the one most runs make says so (``demo optim=sgd``), with that choice's knobs that
  vary among the algorithm's runs of it;
* everything else, the **setting** (model, dataset, world size, network, optimizer, ...). Runs
  are only ever compared or averaged within one setting: a table never mixes datasets, models
  or world sizes. Keys that say how a run was recorded, launched or measured (``tracking.*``,
  ``launcher.*``, ``debug.*``, ``report.*``, evaluation cadence, data paths, threads) are not
  part of the setting.

When one (setting, method, seed) was run more than once, the latest run counts; runs on another
clock or compute profile are kept apart (:mod:`dlcomm.report.clocks`), never taken for reruns.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from dlcomm.report.clocks import CLOCK, PROFILE, with_comparison

PARAM = "params."
# Prefixes and keys that do not change what a run computes.
NOT_SETTING_PREFIXES = ("tracking.", "launcher.", "debug.", "report.", "sweep.", "algo.", "compress.")
NOT_SETTING_KEYS = frozenset(
    {
        "seed",
        "train.eval_every",
        "train.eval_every_s",
        "train.eval_batch_size",
        "train.save_model",
        "train.target_acc",
        "train.threads_per_rank",
        "dataset.root",
        "dataset.train_dir",
        "dataset.val_dir",
        "dataset.loader_workers",
        "train.device",
    }
)


def _setting_keys(runs: pd.DataFrame, method_groups: tuple[str, ...] = ()) -> list[str]:
    keys = [column[len(PARAM) :] for column in runs.columns if column.startswith(PARAM)]
    left_out = NOT_SETTING_PREFIXES + tuple(f"{group}." for group in method_groups)
    return sorted(k for k in keys if k not in NOT_SETTING_KEYS and not k.startswith(left_out))


def _applies(value: object) -> bool:
    """Whether a run's parameter value is one (not a knob its choice lacks: absent, or None)."""
    return not (value is None or (isinstance(value, float) and pd.isna(value)) or str(value) in ("", "None"))


def _varying(frame: pd.DataFrame, keys: list[str]) -> list[str]:
    return [k for k in keys if frame[PARAM + k].fillna("").nunique() > 1]


def _knob_words(frame: pd.DataFrame, row: pd.Series, section: str) -> list[str]:
    """``key=value`` of each ``<section>.*`` knob (but its name) that varies among ``frame``'s runs
    and applies to ``row``."""
    knobs = sorted(
        c[len(PARAM) :] for c in frame.columns if c.startswith(f"{PARAM}{section}.") and c != f"{PARAM}{section}.name"
    )
    return [f"{k[len(section) + 1 :]}={row[PARAM + k]}" for k in _varying(frame, knobs) if _applies(row[PARAM + k])]


def method_labels(runs: pd.DataFrame, method_groups: tuple[str, ...] = ()) -> pd.Series:
    """``algo.name`` plus ``key=value`` for each ``algo.*`` knob that varies among that
    algorithm's runs; with a compressor, ``<algo>+<compressor>`` and its varying knobs; then, for
    each of ``method_groups``, ``<group>=<choice>`` where the run's choice is not the most common
    one, and that choice's knobs that vary among the algorithm's runs of it."""
    labels = pd.Series("", index=runs.index, dtype=object)
    compress = PARAM + "compress.name"
    usual = {g: runs[PARAM + f"{g}.name"].mode().iloc[0] for g in method_groups if PARAM + f"{g}.name" in runs.columns}
    for name, frame in runs.groupby(PARAM + "algo.name"):
        for index, row in frame.iterrows():
            words = [str(name)] + _knob_words(frame, row, "algo")
            codec = row[compress] if compress in frame.columns else None
            if _applies(codec) and str(codec) != "none":
                same = frame[frame[compress] == codec]
                words = [f"{words[0]}+{codec}", *words[1:], *_knob_words(same, row, "compress")]
            for group, most in usual.items():
                choice = row[PARAM + f"{group}.name"]
                if choice != most:
                    words.append(f"{group}={choice}")
                words += _knob_words(frame[frame[PARAM + f"{group}.name"] == choice], row, group)
            labels[index] = " ".join(words)
    return labels


def assign(runs: pd.DataFrame, method_groups: tuple[str, ...] = ()) -> tuple[pd.DataFrame, list[str]]:
    """``runs`` with columns ``setting`` (a label of the keys that differ between settings, each
    run's label leaving out the knobs its choices lack (None); "all" when there is one), ``method``,
    ``seed`` and the run's comparison (``clock``, ``profile``: :mod:`dlcomm.report.clocks`), one run
    per (comparison, setting, method, seed), wall-clock runs first, then the settings in the order
    of their values (numbers by size);
    and the setting keys that vary (the axes a plot may use: ``nodes``, ``network.inter.latency_ms``).
    ``method_groups``: ``report.method_groups`` (the module docstring)."""
    runs = runs.copy()
    keys = _setting_keys(runs, method_groups)
    varying = _varying(runs, keys)
    runs["setting"] = runs.apply(
        lambda row: " ".join(f"{k}={row[PARAM + k]}" for k in varying if _applies(row[PARAM + k])) or "all", axis=1
    )
    runs["method"] = method_labels(runs, method_groups)
    runs["seed"] = runs[PARAM + "seed"].astype(int)
    runs = with_comparison(runs)  # a run on another clock or compute profile is no rerun of the same
    runs = runs.sort_values("start_time").groupby([CLOCK, PROFILE, "setting", "method", "seed"], as_index=False).tail(1)
    runs["order"] = runs.apply(lambda row: tuple(_in_order(row[PARAM + k]) for k in varying), axis=1)
    runs["wall_first"] = runs[CLOCK] != "wall"
    runs = runs.sort_values(["wall_first", PROFILE, "order", "method", "seed"]).drop(columns=["order", "wall_first"])
    return runs.reset_index(drop=True), varying


def _in_order(value: Any) -> tuple[int, float, str]:
    """A sort key of a setting value: numbers by size before words (4 nodes before 16 and 64,
    where the labels as text would put 16 first)."""
    try:
        return (0, float(value), "")
    except (TypeError, ValueError):
        return (1, 0.0, str(value))


def matches(method: str, baseline: str) -> bool:
    """Whether ``method`` is the baseline: every word of ``baseline`` is a word of its label."""
    return set(baseline.split()) <= set(method.split())
