"""Whether a tracking store can be used, answered within a bounded time and before anything is
recorded: each refusal is one :class:`~dlcomm.errors.UserError` naming ``tracking.uri``, the
reason and the fix.

* ``sqlite:///<path>``: a writer needs the file's folder to exist or be creatable and to accept a
  new file (the SQLite journal and MLflow's lock file live beside the database); a reader needs
  the file. Without this check a folder that cannot be written makes the file lock MLflow's
  schema creation waits on spin for ever.
* ``http(s)://<host>:<port>``: a server must answer ``GET /health`` (any HTTP status counts as an
  answer) within ``timeout_s``, tried once a second. MLflow's own client would retry a dead
  address with exponential backoff for minutes before saying anything.
* the other schemes MLflow knows (``file:``, ``databricks``, ``postgresql``, ...) are left to it;
  any other is refused.
"""

from __future__ import annotations

import os
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

from dlcomm.errors import UserError
from dlcomm.paths import sqlite_path

DEFAULT_TIMEOUT_S = 5.0
_TRY_EVERY_S = 1.0
_OTHER_SCHEMES = ("file", "databricks", "databricks-uc", "uc", "postgresql", "mysql", "mssql")
_FIX = "pass tracking.uri=sqlite:///<a writable folder>/mlflow.db, or leave it empty for results/mlflow.db"


def probe(uri: str, timeout_s: float = DEFAULT_TIMEOUT_S, writer: bool = True) -> None:
    """Return when ``uri`` can be used (``writer``: runs will be created in it); else raise a
    one-line :class:`UserError`, within about ``timeout_s`` seconds for a server."""
    database = sqlite_path(uri)
    if database is not None:
        _probe_sqlite(uri, database, writer)
    elif uri.startswith(("http://", "https://")):
        _probe_server(uri, timeout_s)
    elif "://" in uri and urlsplit(uri).scheme.split("+")[0] not in _OTHER_SCHEMES:
        raise UserError(
            f"tracking.uri={uri} cannot be used (unknown scheme {urlsplit(uri).scheme!r}): pass a "
            "sqlite:///path/to/file.db URI or the http:// address of an mlflow server"
        )


def _probe_sqlite(uri: str, database: Path, writer: bool) -> None:
    if not database.name:
        raise UserError(f"tracking.uri={uri} names no file; {_FIX}")
    if database.is_dir():
        raise UserError(f"tracking.uri={uri} is a folder, not a database file; {_FIX}")
    if not writer:
        if not database.is_file():
            raise UserError(
                f"no MLflow store at {uri}: train first (dlcomm train tracking.experiment=<name>) or pass "
                "tracking.uri=<the store your runs went to>"
            )
        return
    folder = database.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".dlcomm-probe-"):
            pass
    except OSError as error:
        raise UserError(f"tracking.uri={uri} cannot be written: folder {folder}: {error.strerror or error}; {_FIX}") from None
    if database.exists() and not os.access(database, os.R_OK | os.W_OK):
        raise UserError(f"tracking.uri={uri} cannot be written: {database} is not readable and writable by you; {_FIX}")


def _probe_server(uri: str, timeout_s: float) -> None:
    parts = urlsplit(uri)
    if not parts.hostname:
        raise UserError(f"tracking.uri={uri} names no host; pass http://<host>:<port> of an mlflow server")
    health = f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}/health"
    deadline = time.monotonic() + timeout_s
    tries, last = 0, ""
    while True:
        tries += 1
        try:
            with urllib.request.urlopen(health, timeout=max(0.5, min(5.0, deadline - time.monotonic()))):
                return
        except urllib.error.HTTPError:  # a status code is an answer: some server is there
            return
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            last = getattr(reason, "strerror", None) or str(reason)
        if time.monotonic() + _TRY_EVERY_S >= deadline:
            break
        time.sleep(_TRY_EVERY_S)
    where = f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"
    raise UserError(
        f"tracking.uri={uri}: no server answered at {where} within {timeout_s:g} s ({tries} tries, last: {last}); "
        f"start one (mlflow server --host {parts.hostname} --port {parts.port or 5000}), raise "
        "tracking.connect_timeout_s, or pass tracking.uri=sqlite:///<file>.db"
    )
