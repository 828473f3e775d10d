"""Where the MLflow UI shows what dlcomm recorded, and what makes it open there.

MLflow 3's UI opens an experiment on its GenAI side unless told otherwise; a client can tell it
three things, all used here:

* the experiment tag ``mlflow.experimentKind = custom_model_development`` (the UI's "Model
  training" side: runs, not traces), set on every experiment dlcomm writes to;
* the URL query ``workflowType=machine_learning``, which picks that side for the page it opens;
* a shared view: an experiment tag ``mlflow.sharedViewState.<key>`` holding the runs list's state
  as JSON (its search filter, the columns ticked, the grouping), opened by the URL query
  ``viewStateShareKey=<key>``. This is what the UI's own "Share" button writes; the UI takes the
  search facets and the view state from it, but not which parent runs are expanded.

A run's or a sweep parent's description (tag ``mlflow.note.content``, markdown, shown on the run's
page) carries its result; images in it load from the server's ``get-artifact`` route.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import sys
import urllib.parse
from pathlib import Path
from typing import Any

KIND_TAG = "mlflow.experimentKind"
MODEL_TRAINING = "custom_model_development"
DESCRIPTION_TAG = "mlflow.note.content"
DESCRIPTION_LIMIT = 8000  # MLflow's longest tag value
SHARED_VIEW_PREFIX = "mlflow.sharedViewState."
TRAINING_SIDE = "workflowType=machine_learning"
# the UI without MLflow's telemetry and its job runner (GenAI jobs: 7 processes, ~1.1 GB):
# scripts/bench_mlflow_ui.py, docs/benchmarks.md
LIGHT_ENV = "MLFLOW_DISABLE_TELEMETRY=true MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false"
LOCAL_PORT = 5000  # MLflow's default, the README's `mlflow ui` command

SUMMARY_COLUMNS = (  # a sweep's children (dlcomm.report.sweep): the answer first, then the time and its split
    "summary/speedup",
    "summary/test_acc_pct",
    "summary/ms_per_iter",
    "summary/compute_ms",
    "summary/comm_exposed_ms",
)


def ui_address(tracking_uri: str) -> str:
    """The UI's address for a store: the server itself for ``http(s)://`` (its user and password
    left out), else where the README's ``mlflow ui`` command serves a local store."""
    parts = urllib.parse.urlsplit(tracking_uri)
    if parts.scheme in ("http", "https"):
        host = parts.hostname or ""
        netloc = f"[{host}]" if ":" in host else host
        if parts.port:
            netloc += f":{parts.port}"
        return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
    return f"http://127.0.0.1:{LOCAL_PORT}"


def ui_command(tracking_uri: str) -> str:
    """The command that serves ``tracking_uri`` at :func:`ui_address` ('' for a server: it is one)."""
    if urllib.parse.urlsplit(tracking_uri).scheme in ("http", "https"):
        return ""
    beside = Path(sys.executable).with_name("mlflow")  # the environment dlcomm runs in has MLflow
    mlflow = shlex.quote(str(beside)) if beside.exists() else "mlflow"
    return f"{LIGHT_ENV} {mlflow} ui --backend-store-uri {shlex.quote(tracking_uri)} --port {LOCAL_PORT} --workers 1"


def run_page(tracking_uri: str, experiment_id: str, run_id: str) -> str:
    """The run's page in the UI, on its model-training side."""
    return f"{ui_address(tracking_uri)}/#/experiments/{experiment_id}/runs/{run_id}?{TRAINING_SIDE}"


def ui_lines(page: str, tracking_uri: str) -> str:
    """Where to see a run (or sweep) in the MLflow UI, and, for a store on this machine, the
    command that serves it there."""
    command = ui_command(tracking_uri)
    return f"MLflow UI: {page}" + (f"\n  (serve the store first: {command})" if command else "")


def experiment_of(tracking_uri: str, run_id: str) -> str:
    """The experiment id of a run."""
    from dlcomm.tracking.mlflow_run import retrying, store_client

    return retrying(store_client(tracking_uri).get_run, run_id).info.experiment_id


def runs_view(experiment_id: str, key: str) -> str:
    """The experiment's runs list as the shared view ``key`` sets it (:func:`share_view`), as a
    link relative to the UI's address (a run's description links to it)."""
    return f"#/experiments/{experiment_id}/runs?{TRAINING_SIDE}&viewStateShareKey={key}"


def column(kind: str, name: str) -> str:
    """The UI's name of a runs-list column: ``metrics.`summary/speedup```, ``tags.`algo```."""
    return f"{kind}.`{name}`"


def sweep_view_state(parent_id: str) -> dict[str, Any]:
    """The runs list of one sweep: its children (``tags.mlflow.parentRunId``), grouped by the
    ``algo`` tag (the group row: the average over seeds, the table's cell), the ``summary/*``
    metrics and the clock they are on as columns, Dataset, Source and Models unticked."""
    columns = [column("metrics", name) for name in SUMMARY_COLUMNS] + [column("tags", "summary_clock")]
    return {
        "searchFilter": f"tags.`mlflow.parentRunId` = '{parent_id}'",
        "orderByKey": "attributes.start_time",
        "orderByAsc": True,
        "selectedColumns": columns,
        "columnOrder": columns,  # else alphabetical
        # narrow enough that the summary/* columns and the clock fit beside the fixed columns at 1600 px
        "columnWidths": {"attributes.`Run Name`": 220, **{name: 150 for name in columns}},
        "groupBy": {"aggregateFunction": "average", "groupByKeys": [{"mode": "tag", "groupByData": "algo"}]},
        "groupsExpanded": {},
    }


def share_key(state: dict[str, Any]) -> str:
    """A key derived from the state: the same view written twice is one tag."""
    return hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()[:16]


def share_view(client: Any, experiment_id: str, state: dict[str, Any]) -> str:
    """Store ``state`` as a shared view of the experiment's runs list; its key."""
    from dlcomm.tracking.mlflow_run import retrying

    key = share_key(state)
    retrying(client.set_experiment_tag, experiment_id, SHARED_VIEW_PREFIX + key, json.dumps(state))
    return key


def artifact_image(run_id: str, path: str, title: str) -> str:
    """Markdown of an image artifact of ``run_id``, as the run's description shows it (the
    server's ``get-artifact`` route, relative to the UI's address)."""
    query = urllib.parse.urlencode({"path": path, "run_uuid": run_id})
    return f"![{title}](get-artifact?{query})"


def fit_description(text: str) -> str:
    """``text`` cut at a line end to MLflow's tag length, saying so."""
    if len(text) <= DESCRIPTION_LIMIT:
        return text
    note = "\n\n(cut to MLflow's 8000 characters: the whole table is the artifact comparison/table.md)"
    kept = text[: DESCRIPTION_LIMIT - len(note)]
    return kept[: kept.rfind("\n") + 1 or len(kept)] + note
