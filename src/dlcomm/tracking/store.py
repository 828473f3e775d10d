"""Whether a tracking store can be used, answered within a bounded time and before anything is
recorded, by opening it the way MLflow will: each refusal is one :class:`~dlcomm.errors.UserError`
naming ``tracking.uri``, the reason and the fix. And the creation of a new SQLite store, which is
atomic (:func:`create_sqlite_store`).

* ``sqlite:///<path>``: a writer needs the file's folder to exist or be creatable and to accept a
  new file (the SQLite journal and MLflow's lock file live beside the database); a reader needs
  the file. An existing file must be a SQLite database holding MLflow's schema at the revision
  this MLflow writes (read without writing: its ``alembic_version`` and ``experiments`` tables);
  a file that is not a database, a database of something else, a store left half-created by an
  older dlcomm interrupted while creating it, or one of another MLflow version is refused with
  its fix (move it aside, or ``mlflow db upgrade``). An empty file or an empty database counts as
  no store yet.
* a SQLite or server URI with a query or fragment (``?x=1``, ``#...``) is refused: MLflow's client
  cannot use it. Before either is opened, every path dlcomm keeps for the runs (the results folder,
  the lock file beside the store, the runs' folders, ...: :func:`dlcomm.paths.own_paths`) must be
  of its kind or absent: a file where a folder goes (or a folder where a file goes) is refused.
* ``http(s)://<host>:<port>``: a server must answer MLflow's experiments search
  (``POST /api/2.0/mlflow/experiments/search``) with HTTP 200 and JSON within ``timeout_s``,
  tried once a second while nothing listens. MLflow's own client would retry a dead address with
  exponential backoff for minutes before saying anything; a server that is not MLflow (any other
  answer) is refused at once.
* file stores (``file:``, a bare path such as ``mlruns``): MLflow 3 keeps them in maintenance mode
  and refuses them; refused here with the sqlite fix.
* the other schemes MLflow knows (``databricks``, ``postgresql``, ``mysql``, ...) are opened by
  MLflow's client with one search of the experiments, within ``timeout_s``: a missing driver,
  missing credentials or no answer is one line.
* any other scheme is refused.

Creating a SQLite store: MLflow builds a new database's schema by dozens of migrations, committed
one by one; a process killed among them (Ctrl-C, SIGTERM from a scheduler) leaves a file every
later open fails on ("table ... already exists"). :func:`create_sqlite_store` builds the schema in
a temporary file beside the store and renames it into place (atomic on one filesystem): the store
is either absent or complete. The migrations take seconds (3 s here) for a schema that is the same
for every new store of one MLflow: the first store built is kept as a template in dlcomm's cache
(:func:`dlcomm.paths.cache_dir`, one file per MLflow version, written
atomically, best effort), and later stores are copies of it whose default experiment is given
their own folder and time: what MLflow's migrations would have written.
"""

from __future__ import annotations

import functools
import json
import os
import sqlite3
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import cast
from urllib.parse import quote, urlsplit

from dlcomm.errors import UserError
from dlcomm.paths import check_own_paths, sqlite_path, write_probe

DEFAULT_TIMEOUT_S = 5.0
_TRY_EVERY_S = 1.0
_CLIENT_SCHEMES = ("databricks", "databricks-uc", "uc", "postgresql", "mysql", "mssql")
_DRIVERS = {
    "postgresql": "psycopg2-binary (or psycopg)",
    "mysql": "pymysql (or mysqlclient)",
    "mssql": "pyodbc",
    "databricks": "databricks-sdk",
}
_FIX = "pass tracking.uri=sqlite:///<a writable folder>/mlflow.db, or leave it empty for results/mlflow.db"
_CREATING = ".creating-"


def probe(uri: str, timeout_s: float = DEFAULT_TIMEOUT_S, writer: bool = True) -> None:
    """Return when ``uri`` can be used (``writer``: runs will be created in it); else raise a
    one-line :class:`UserError`, within about ``timeout_s`` seconds for a server."""
    database = sqlite_path(uri)
    scheme = urlsplit(uri).scheme.split("+")[0] if "://" in uri else ""
    if database is not None or scheme in ("http", "https"):
        _refuse_query(uri)
    check_own_paths(uri)  # a file where the runs' folders go, a folder where the lock goes: refused here
    if database is not None:
        _probe_sqlite(uri, database, writer, timeout_s)
    elif scheme in ("http", "https"):
        _probe_server(uri, timeout_s)
    elif scheme == "file" or (not scheme and uri not in _CLIENT_SCHEMES):
        raise UserError(
            f"tracking.uri={uri} is a file store (an mlruns folder), which MLflow 3 no longer accepts for new runs; {_FIX}"
        )
    elif scheme in _CLIENT_SCHEMES or uri in _CLIENT_SCHEMES:
        _probe_client(uri, scheme or uri, timeout_s)
    else:
        raise UserError(
            f"tracking.uri={uri} cannot be used (unknown scheme {scheme!r}): pass a "
            "sqlite:///path/to/file.db URI or the http:// address of an mlflow server"
        )


def _refuse_query(uri: str) -> None:
    """A query or fragment in a SQLite or server URI: MLflow's client appends its API paths to a
    server's URI (``http://host/?x=1/api/2.0/...``) and SQLAlchemy reads a SQLite URI's query as
    driver options, so either fails on the first call, after the run is recorded."""
    head, hash_mark, _ = uri.partition("#")
    if "?" in head or hash_mark:
        part = "query (?...)" if "?" in head else "fragment (#...)"
        base = head.partition("?")[0]
        server = not uri.startswith("sqlite:")
        why = "it appends its API paths to the address" if server else "SQLAlchemy reads it as driver options"
        credentials = (
            ", credentials in MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN)"
            if server
            else ""
        )
        raise UserError(
            f"tracking.uri={uri} has a {part}, which MLflow cannot use ({why}): pass tracking.uri={base}{credentials}"
        )


# -- SQLite ---------------------------------------------------------------------------------------------------------
def _probe_sqlite(uri: str, database: Path, writer: bool, timeout_s: float) -> None:
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
        if not _check_sqlite_store(uri, database, timeout_s):
            raise UserError(
                f"no MLflow store at {uri} (an empty database): train first or pass "
                "tracking.uri=<the store your runs went to>"
            )
        return
    folder = database.parent
    try:
        write_probe(folder)
    except OSError as error:
        raise UserError(
            f"tracking.uri={uri} cannot be written: folder {folder}: {error.strerror or error}; {_FIX}"
        ) from None
    if database.exists() and not os.access(database, os.R_OK | os.W_OK):
        raise UserError(f"tracking.uri={uri} cannot be written: {database} is not readable and writable by you; {_FIX}")
    if database.exists():
        _check_sqlite_store(uri, database, timeout_s)


def _aside(database: Path) -> str:
    return f"move it aside (mv {database} {database}.broken) and the next run starts a new store, or {_FIX}"


def _check_sqlite_store(uri: str, database: Path, timeout_s: float) -> bool:
    """Whether ``database`` holds a store (False: an empty file or database, a store to create);
    a one-line UserError when MLflow could not use it. Reads only."""
    if database.stat().st_size == 0:
        return False
    try:
        connection = sqlite3.connect(f"file:{quote(str(database.resolve()))}?mode=ro", uri=True, timeout=timeout_s)
    except sqlite3.Error as error:
        raise UserError(f"tracking.uri={uri} cannot be opened ({error}); {_FIX}") from None
    try:
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            return False
        if "experiments" not in tables:
            raise UserError(
                f"tracking.uri={uri}: {database} is a SQLite database but not an MLflow store (no experiments table); "
                f"{_aside(database)}"
            )
        revision = None
        if "alembic_version" in tables:
            rows = connection.execute("SELECT version_num FROM alembic_version").fetchall()
            revision = rows[0][0] if rows else None
        runs = connection.execute("SELECT count(*) FROM runs").fetchone()[0] if "runs" in tables else 0
        connection.execute("SELECT experiment_id, name FROM experiments LIMIT 1").fetchall()
    except sqlite3.OperationalError as error:
        if "locked" in str(error):  # another process writes it: a store in use
            return True
        raise UserError(
            f"tracking.uri={uri}: {database} cannot be read as an MLflow store ({error}); {_aside(database)}"
        ) from None
    except sqlite3.DatabaseError as error:  # "file is not a database", "database disk image is malformed"
        raise UserError(
            f"tracking.uri={uri}: {database} is not a SQLite database ({error}); {_aside(database)}"
        ) from None
    finally:
        connection.close()
    if revision == _head_revision():
        return True
    head, known = _schema_revisions()
    if not runs:
        raise UserError(
            f"tracking.uri={uri}: {database} is a half-created MLflow store (schema revision {revision or 'none'}, "
            f"not {head}; no runs: left by a run interrupted while creating it); {_aside(database)}"
        )
    if revision in known:
        raise UserError(
            f"tracking.uri={uri}: {database} holds {runs} runs at MLflow schema revision {revision}, older than {head} "
            f"of this MLflow: back it up and run `mlflow db upgrade {uri}`, or {_aside(database)}"
        )
    raise UserError(
        f"tracking.uri={uri}: {database} holds {runs} runs at MLflow schema revision {revision}, unknown to this MLflow "
        f"(written by a newer one?): upgrade mlflow, or {_aside(database)}"
    )


@functools.cache
def _schema_revisions() -> tuple[str, frozenset[str]]:
    """The schema revision this MLflow writes (the head of its migrations) and every revision it knows."""
    from alembic.script import ScriptDirectory
    from mlflow.store.db.utils import _get_alembic_config

    script = ScriptDirectory.from_config(_get_alembic_config(db_url=""))
    head = cast(str, script.get_current_head())  # None only for a migrations folder without any: MLflow's has them
    return head, frozenset(revision.revision for revision in script.walk_revisions())


def _head_revision() -> str:
    """The schema revision this MLflow writes: the cached template's (a read of one row), else
    from MLflow's migration scripts (most of a second to walk)."""
    template = _template_path()
    if template is not None and template.is_file() and _empty_store(template):
        try:
            connection = sqlite3.connect(f"file:{quote(str(template))}?mode=ro", uri=True)
            try:
                return connection.execute("SELECT version_num FROM alembic_version").fetchone()[0]
            finally:
                connection.close()
        except (sqlite3.Error, TypeError):
            pass
    return _schema_revisions()[0]


def create_sqlite_store(uri: str, database: Path) -> None:
    """Give ``database`` (absent, an empty file or an empty database) MLflow's schema, atomically:
    built in a temporary file beside it and renamed into place. The caller holds the store's
    file lock, so any temporary file left beside is a killed creator's and is removed."""
    for stale in database.parent.glob(f".{database.name}{_CREATING}*"):
        stale.unlink(missing_ok=True)
    building = database.parent / f".{database.name}{_CREATING}{os.getpid()}"
    try:
        _build_schema(building)
        with open(building, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(building, database)
    except Exception as error:  # noqa: BLE001 - sqlalchemy, sqlite and OS errors: each one line
        text = (str(getattr(error, "orig", None) or error).strip().splitlines() or [type(error).__name__])[0]
        raise UserError(
            f"tracking.uri={uri}: the new store could not be created in {database.parent} ({text}); "
            f"free space there or {_FIX}"
        ) from None
    finally:
        for leftover in (building, building.with_name(building.name + "-journal")):
            leftover.unlink(missing_ok=True)


def _build_schema(path: Path) -> None:
    """MLflow's schema in the new file ``path``: a copy of the cached template when there is one,
    else by MLflow's migrations (then kept as the template)."""
    import shutil

    template = _template_path()
    if template is not None and template.is_file():
        if _empty_store(template, _schema_revisions()[0]):
            shutil.copyfile(template, path)
            _own_default_experiment(path)
            return
        template.unlink(missing_ok=True)  # damaged, of another schema, or holding runs: rebuilt below
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    uri = f"sqlite:///{path}"
    store = SqlAlchemyStore(uri, path.parent.resolve().as_uri())
    store.engine.dispose()
    getattr(SqlAlchemyStore, "_engine_map", {}).pop(uri, None)  # the engine of a file about to be renamed
    if template is not None:
        _keep_template(path, template)


def _empty_store(template: Path, head: str | None = None) -> bool:
    """Whether the cached ``template`` is what it stands for: an intact SQLite file (``quick_check``)
    of MLflow's schema at ``head`` (when given), holding the default experiment alone and no run.
    A template that is not is never copied: a damaged one would break every new store, one
    holding a run would copy that run into each."""
    try:
        connection = sqlite3.connect(f"file:{quote(str(template))}?mode=ro", uri=True)
        try:
            ok = connection.execute("PRAGMA quick_check").fetchone()[0] == "ok"
            version = connection.execute("SELECT version_num FROM alembic_version").fetchone()[0]
            runs = connection.execute("SELECT count(*) FROM runs").fetchone()[0]
            experiments = [row[0] for row in connection.execute("SELECT experiment_id FROM experiments")]
        finally:
            connection.close()
    except (sqlite3.Error, TypeError):
        return False
    return ok and (head is None or version == head) and runs == 0 and experiments == [0]


def _template_path() -> Path | None:
    """Where this MLflow's empty store is cached; None when there is no cache to use."""
    from dlcomm.paths import cache_dir

    folder = cache_dir()
    if folder is None:
        return None
    from importlib.metadata import version

    return folder / f"mlflow-{version('mlflow')}-store.db"  # a version's migrations are fixed


def _keep_template(built: Path, template: Path) -> None:
    """Copy a freshly built store to ``template`` (atomically: a temporary file renamed); a cache
    that cannot be written is no error, the next store is built again."""
    import shutil

    try:
        template.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=template.parent, prefix=f".{template.name}.", delete=False) as handle:
            partial = Path(handle.name)
        try:
            shutil.copyfile(built, partial)
            os.replace(partial, template)
        finally:
            partial.unlink(missing_ok=True)
    except OSError:
        pass


def _own_default_experiment(path: Path) -> None:
    """The copied store's default experiment (id 0, which MLflow's migrations create with the store)
    gets this store's folder as its artifact location and now as its times, as a new store would."""
    now_ms = int(time.time() * 1000)
    connection = sqlite3.connect(path)
    try:
        with connection:
            connection.execute(
                "UPDATE experiments SET artifact_location = ?, creation_time = ?, last_update_time = ? "
                "WHERE experiment_id = 0",
                (path.parent.resolve().as_uri() + "/0", now_ms, now_ms),
            )
    finally:
        connection.close()


def needs_schema(database: Path) -> bool:
    """Whether ``database`` is no store yet: absent, an empty file, or a database without tables."""
    if not database.exists() or database.stat().st_size == 0:
        return True
    try:
        connection = sqlite3.connect(f"file:{quote(str(database.resolve()))}?mode=ro", uri=True, timeout=20)
        try:
            return connection.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0] == 0
        finally:
            connection.close()
    except sqlite3.Error:
        return False  # not for this function to judge: MLflow's own open says what is wrong


# -- a server -------------------------------------------------------------------------------------------------------
def _probe_server(uri: str, timeout_s: float) -> None:
    parts = urlsplit(uri)
    try:
        port = parts.port
    except ValueError as error:
        raise UserError(
            f"tracking.uri={uri} cannot be used ({error}): pass http://<host>:<port> of an mlflow server, port 1-65535"
        ) from None
    if not parts.hostname:
        raise UserError(f"tracking.uri={uri} names no host; pass http://<host>:<port> of an mlflow server")
    # urllib reads no user:password@ in a URL (it would look up "user:password@host" as a host name):
    # the address goes without it, and the pair as basic authentication, as MLflow's client sends it
    address = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    search = f"{parts.scheme}://{address}{f':{port}' if port else ''}{parts.path.rstrip('/')}/api/2.0/mlflow/experiments/search"
    request = urllib.request.Request(
        search,
        data=b'{"max_results": 1}',
        method="POST",
        headers={"Content-Type": "application/json", **_credentials(parts.username, parts.password)},
    )
    deadline = time.monotonic() + timeout_s
    tries, last = 0, ""
    while True:
        tries += 1
        try:
            with urllib.request.urlopen(
                request, timeout=max(0.5, min(5.0, deadline - time.monotonic())), context=_tls()
            ) as response:
                _mlflow_answer(uri, response.status, response.read(1 << 20))
                return
        except urllib.error.HTTPError as error:  # a status code is an answer: some server is there
            _mlflow_answer(uri, error.code, b"")
        except (urllib.error.URLError, OSError, ValueError) as error:
            reason = getattr(error, "reason", error)
            last = getattr(reason, "strerror", None) or str(reason)
        if time.monotonic() + _TRY_EVERY_S >= deadline:
            break
        time.sleep(_TRY_EVERY_S)
    where = f"{parts.hostname}:{port or (443 if parts.scheme == 'https' else 80)}"
    raise UserError(
        f"tracking.uri={uri}: no server answered at {where} within {timeout_s:g} s ({tries} tries, last: {last}); "
        f"start one (mlflow server --host {parts.hostname} --port {port or 5000}), raise "
        "tracking.connect_timeout_s, or pass tracking.uri=sqlite:///<file>.db"
    )


def _tls():
    """The TLS context MLflow's client would use, from its environment variables (None: the default)."""
    import ssl

    if os.environ.get("MLFLOW_TRACKING_INSECURE_TLS", "").lower() == "true":
        return ssl._create_unverified_context()  # noqa: S323 - what the user asked MLflow for
    if os.environ.get("MLFLOW_TRACKING_SERVER_CERT_PATH"):
        return ssl.create_default_context(cafile=os.environ["MLFLOW_TRACKING_SERVER_CERT_PATH"])
    return None


def _credentials(username: str | None = None, password: str | None = None) -> dict[str, str]:
    """The headers MLflow's client would send: for a URI's ``user:password@`` basic authentication
    (requests, which MLflow uses, takes it from the URL), else from its environment variables."""
    import base64
    from urllib.parse import unquote

    if username:
        pair = f"{unquote(username)}:{unquote(password or '')}"
        return {"Authorization": "Basic " + base64.b64encode(pair.encode()).decode()}
    if os.environ.get("MLFLOW_TRACKING_TOKEN"):
        return {"Authorization": f"Bearer {os.environ['MLFLOW_TRACKING_TOKEN']}"}
    if os.environ.get("MLFLOW_TRACKING_USERNAME"):
        pair = f"{os.environ['MLFLOW_TRACKING_USERNAME']}:{os.environ.get('MLFLOW_TRACKING_PASSWORD', '')}"
        return {"Authorization": "Basic " + base64.b64encode(pair.encode()).decode()}
    return {}


def _mlflow_answer(uri: str, status: int, body: bytes) -> None:
    """Return when (status, body) is MLflow's answer to the experiments search; else refuse."""
    if status in (401, 403):
        raise UserError(
            f"tracking.uri={uri}: the server refused MLflow's experiments search (HTTP {status}): set "
            "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN) for it"
        )
    if status == 200:
        try:
            if isinstance(json.loads(body or b"{}"), dict):
                return
        except ValueError:
            pass
        status_text = "HTTP 200 but not JSON"
    else:
        status_text = f"HTTP {status}"
    raise UserError(
        f"tracking.uri={uri} is not an MLflow tracking server (it answered MLflow's experiments search with {status_text}): "
        "pass the address of `mlflow server` (with its path prefix, if any), or tracking.uri=sqlite:///<file>.db"
    )


# -- stores MLflow's client opens -----------------------------------------------------------------------------------
def _probe_client(uri: str, scheme: str, timeout_s: float) -> None:
    from mlflow.tracking import MlflowClient  # imported before the clock starts: seconds of its own

    outcome: list[BaseException | None] = []

    def search() -> None:
        try:
            MlflowClient(tracking_uri=uri).search_experiments(max_results=1)
            outcome.append(None)
        except BaseException as error:  # noqa: BLE001 - reported below in one line
            outcome.append(error)

    import logging

    quiet = logging.getLogger("mlflow")  # its warnings would be lines beside the one that says what is wrong
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        worker = threading.Thread(target=search, daemon=True, name="dlcomm-store-probe")
        worker.start()
        worker.join(timeout_s)
    finally:
        quiet.setLevel(level)
    if not outcome:
        raise UserError(
            f"tracking.uri={uri}: no answer from the store within {timeout_s:g} s; raise "
            f"tracking.connect_timeout_s, or {_FIX}"
        )
    error = outcome[0]
    if error is None:
        return
    if isinstance(error, ImportError):
        driver = _DRIVERS.get(scheme.split("-")[0], "its driver")
        raise UserError(
            f"tracking.uri={uri} needs a Python package that is not installed ({error}): "
            f"pip install {driver}, or {_FIX}"
        )
    text = (str(error).strip().splitlines() or [type(error).__name__])[0].split(". ")[0][:300]
    if scheme.startswith(("databricks", "uc")):
        text += "; set DATABRICKS_HOST and DATABRICKS_TOKEN, or write ~/.databrickscfg"
    raise UserError(f"tracking.uri={uri} cannot be used ({text}); {_FIX}")
