"""Where a report reads its runs from: an MLflow store, or the run data kept beside a report.

A report needs, per run, its parameters, tags and last metric values (one row of
:func:`dlcomm.report.runs.load_runs`), and a few metric histories: the accuracy and clock curves
its figures and the MA-acceleration read (:data:`HISTORY_KEYS`). Both sources answer the same
three questions (:class:`RunData`):

* :class:`StoreRunData`: an MLflow tracking URI (``sqlite:///results/mlflow.db``);
* :class:`FolderRunData`: a report's folder, ``results/<experiment>/``, holding

  - ``runs.json``: ``{"experiment": name, "runs": [{"run_id", "status", "start_time",
    "end_time" (ms since the epoch), "params", "metrics", "tags"}, ...]}``, one run per line;
  - ``histories.csv`` (``histories.csv.gz`` when it would exceed :data:`GZIP_ABOVE` bytes):
    long format ``run_id,key,step,value``, the :data:`HISTORY_KEYS` of every run, the last
    value logged at each step.

Every report writes its run data beside its table (:func:`save_run_data`), so a committed
``results/<experiment>/`` can be redrawn without the store (``dlcomm report --from``).
Absolute paths in parameters and tags (a compute profile under a temporary home) are cut to
their part from ``results/`` on (:func:`portable`): the files name no machine's folders.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import re
from functools import lru_cache
from pathlib import Path
from typing import Protocol

import pandas as pd

from dlcomm.errors import UserError, first_line
from dlcomm.metrics import names

RUNS_FILE = "runs.json"
HISTORIES_FILE = "histories.csv"
GZIP_ABOVE = 256 * 1024  # bytes of histories.csv; above it, histories.csv.gz
# the metric histories dlcomm.report.build.Histories reads (a folder answers only these)
HISTORY_KEYS = (
    names.EPOCH_TEST_ACC_MEAN,
    names.CLOCK_TEST_ACC_MEAN,
    names.CLOCK_TIME,
    names.EPOCH_SIM_TIME,
    names.EPOCH_TRAIN_TIME,
)
# run columns of mlflow.search_runs that are no run's data (where its artifacts lay on one machine)
_DROPPED = ("artifact_uri", "experiment_id")
_TIMES = ("start_time", "end_time")
_PREFIXES = ("params.", "metrics.", "tags.")
# an absolute path up to (the last) "results/" in it: /tmp/home/results/x/profile.json -> results/x/profile.json
_UP_TO_RESULTS = re.compile(r"(?<![\w.~/-])/(?:[\w.+-]+/)*results/")
# what is left of an absolute path under a temporary or per-user folder: its file name only
_LOCAL_PATH = re.compile(r"(?<![\w.~/-])/(?:tmp|work|home|root|var|scratch)/(?:[\w.+-]+/)*")


class RunData(Protocol):
    """The runs and metric histories a report reads."""

    def runs(self, experiment: str) -> pd.DataFrame:
        """One row per finished, non-parent run (the columns of :func:`dlcomm.report.runs.load_runs`)."""

    def history(self, run_id: str, key: str) -> pd.Series:
        """``key``'s values of the run by step (the last value logged at each step)."""


class StoreRunData:
    """Runs read from the MLflow store at ``uri``."""

    def __init__(self, uri: str) -> None:
        self.uri = uri

    def runs(self, experiment: str) -> pd.DataFrame:
        from dlcomm.report.runs import load_runs

        return load_runs(self.uri, experiment)

    def history(self, run_id: str, key: str) -> pd.Series:
        from dlcomm.report.runs import metric_history

        return metric_history(self.uri, run_id, key)


class FolderRunData:
    """Runs read from a report's folder (``runs.json`` and ``histories.csv[.gz]``, see the module
    docstring); no MLflow store."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        if not (self.folder / RUNS_FILE).is_file():
            raise UserError(
                f"{self.folder} holds no run data ({RUNS_FILE}): pass a folder written by "
                "`dlcomm report` (results/<experiment>/), or report from the store (experiment=<name>)"
            )
        path = self.folder / RUNS_FILE
        try:
            document = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, ValueError) as error:
            raise UserError(f"{path} cannot be read as run data ({first_line(error)[:200]}); {_REWRITE}") from None
        if not (
            isinstance(document, dict)
            and isinstance(document.get("experiment"), str)
            and isinstance(document.get("runs"), list)
            and all(isinstance(record, dict) for record in document["runs"])
        ):
            raise UserError(
                f'{path} is not run data dlcomm wrote (it needs an "experiment" name and a list of "runs"); {_REWRITE}'
            )
        self.experiment: str = document["experiment"]
        self._records: list[dict] = document["runs"]
        self._histories = lru_cache(maxsize=1)(self._read_histories)

    def runs(self, experiment: str = "") -> pd.DataFrame:
        if experiment and experiment != self.experiment:
            raise UserError(f"{self.folder} holds the runs of {self.experiment!r}, not {experiment!r}")
        return frame_of(self._records)

    def history(self, run_id: str, key: str) -> pd.Series:
        if key not in HISTORY_KEYS:
            raise KeyError(f"{key} is not kept in {HISTORIES_FILE} (kept: {', '.join(HISTORY_KEYS)})")
        return self._histories().get((run_id, key), pd.Series(dtype=float))

    def check_histories(self) -> None:
        """Read the histories file now: a damaged one is one line before any file is written."""
        self._histories()

    def _read_histories(self) -> dict[tuple[str, str], pd.Series]:
        path = history_path(self.folder)
        if path is None:
            return {}
        # values as text, then to float: exactly the float that was written (its shortest repr)
        try:
            long = pd.read_csv(path, dtype={"run_id": str, "key": str, "step": "int64", "value": str})
            long["value"] = long["value"].astype(float)
            long[["run_id", "key", "step", "value"]]  # noqa: B018 - every column there
        except (OSError, ValueError, KeyError, TypeError, EOFError) as error:  # pandas' ParserError is a ValueError
            raise UserError(f"{path} cannot be read as run histories ({first_line(error)[:200]}); {_REWRITE}") from None
        out = {}
        for (run_id, key), points in long.groupby(["run_id", "key"], sort=False):
            out[(run_id, key)] = pd.Series(
                points["value"].to_numpy(), index=points["step"].to_numpy(), dtype=float
            ).sort_index()
        return out


_REWRITE = "write the folder again from the store (dlcomm report experiment=<name>) or restore it from where it came"


def history_path(folder: Path) -> Path | None:
    """The folder's histories file (plain or gzipped), or None."""
    for name in (HISTORIES_FILE, HISTORIES_FILE + ".gz"):
        if (Path(folder) / name).is_file():
            return Path(folder) / name
    return None


def has_run_data(folder: Path) -> bool:
    return (Path(folder) / RUNS_FILE).is_file()


def portable(value: object) -> object:
    """``value`` with absolute paths cut to their part from ``results/`` on, and other paths
    under temporary or per-user folders to their file name (strings only)."""
    if not isinstance(value, str) or "/" not in value:
        return value
    return _LOCAL_PATH.sub("", _UP_TO_RESULTS.sub("results/", value))


def portable_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` with :func:`portable` parameters and tags, without the columns that name where a
    run's files lay (``artifact_uri``)."""
    runs = runs.drop(columns=[c for c in _DROPPED if c in runs.columns])
    text = [c for c in runs.columns if c.startswith(("params.", "tags."))]
    return runs.assign(**{c: runs[c].map(portable) for c in text}) if text else runs


def _ms(value: object) -> int | None:
    if value is None or (isinstance(value, float) and math.isnan(value)) or pd.isna(value):
        return None
    return int(pd.Timestamp(value).value // 1_000_000)


def _present(value: object) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def records_of(runs: pd.DataFrame) -> list[dict]:
    """One dict per run of ``runs`` (:func:`portable_runs` first): its id, status, times and the
    params, metrics and tags it has."""
    runs = portable_runs(runs)
    out = []
    for _, row in runs.iterrows():
        record: dict = {"run_id": row["run_id"], "status": row.get("status", "FINISHED")}
        record.update({key: _ms(row.get(key)) for key in _TIMES})
        for prefix in _PREFIXES:
            values = {c[len(prefix) :]: row[c] for c in runs.columns if c.startswith(prefix) and _present(row[c])}
            if prefix == "metrics.":
                values = {k: float(v) for k, v in values.items()}
            else:
                values = {k: str(v) for k, v in values.items()}
            record[prefix.rstrip(".")] = dict(sorted(values.items()))
        out.append(record)
    return out


def frame_of(records: list[dict]) -> pd.DataFrame:
    """The runs frame of :func:`records_of`'s dicts, as :func:`dlcomm.report.runs.load_runs` gives
    it (missing params and tags None, missing metrics nan)."""
    rows = []
    for record in records:
        row = {"run_id": record["run_id"], "status": record.get("status", "FINISHED")}
        for key in _TIMES:
            row[key] = pd.to_datetime(record[key], unit="ms", utc=True) if record.get(key) is not None else pd.NaT
        for prefix in _PREFIXES:
            row.update({prefix + k: v for k, v in record.get(prefix.rstrip("."), {}).items()})
        rows.append(row)
    frame = pd.DataFrame(rows)
    for column in frame.columns:
        if column.startswith("metrics."):
            frame[column] = frame[column].astype(float)
        elif column.startswith(("params.", "tags.")):
            frame[column] = frame[column].astype(object).where(frame[column].notna(), None)
    return frame


def histories_of(runs: pd.DataFrame, data: RunData) -> pd.DataFrame:
    """Long format ``run_id, key, step, value`` of the :data:`HISTORY_KEYS` of ``runs``."""
    parts = []
    for run_id in runs["run_id"]:
        for key in HISTORY_KEYS:
            series = data.history(run_id, key)
            if not series.empty:
                parts.append(
                    pd.DataFrame(
                        {
                            "run_id": run_id,
                            "key": key,
                            "step": series.index.astype("int64"),
                            "value": series.to_numpy(dtype=float),
                        }
                    )
                )
    if not parts:
        return pd.DataFrame(columns=["run_id", "key", "step", "value"])
    return pd.concat(parts, ignore_index=True)


def save_run_data(folder: Path, experiment: str, runs: pd.DataFrame, data: RunData) -> list[Path]:
    """Write ``runs`` (all of them, before any grouping) and their histories read from ``data``
    into ``folder`` (see the module docstring); the files written. The text is a function of the
    runs alone: saving the same runs again writes the same bytes."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    records = records_of(runs)
    lines = ",\n".join(json.dumps(record, sort_keys=True, ensure_ascii=False) for record in records)
    runs_path = folder / RUNS_FILE
    runs_path.write_text(f'{{"experiment": {json.dumps(experiment)},\n "runs": [\n{lines}\n]}}\n')
    buffer = io.StringIO()
    histories_of(runs, data).to_csv(buffer, index=False, lineterminator="\n")
    text = buffer.getvalue()
    plain, zipped = folder / HISTORIES_FILE, folder / (HISTORIES_FILE + ".gz")
    if len(text.encode()) > GZIP_ABOVE:
        zipped.write_bytes(gzip.compress(text.encode(), mtime=0))  # mtime 0: the same bytes every time
        plain.unlink(missing_ok=True)
        return [runs_path, zipped]
    plain.write_text(text)
    zipped.unlink(missing_ok=True)
    return [runs_path, plain]


def export_run_data(uri: str, experiment: str, folder: Path) -> list[Path]:
    """The run data of ``experiment``'s finished runs in the MLflow store ``uri``, written into
    ``folder`` (usually ``results/<experiment>/``) without redrawing its report; the files written."""
    store = StoreRunData(uri)
    return save_run_data(folder, experiment, store.runs(experiment), store)
