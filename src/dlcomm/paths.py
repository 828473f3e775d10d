"""Where results go: ``./results`` under the working directory (``DLCOMM_HOME`` overrides the
base folder); a run's own files go beside its tracking store."""

from __future__ import annotations

import os
from pathlib import Path


def project_root() -> Path:
    """``DLCOMM_HOME``, else the working directory: results go where the user works (the
    Makefile's targets run in the checkout, so theirs land in ``<checkout>/results``)."""
    if os.environ.get("DLCOMM_HOME"):
        return Path(os.environ["DLCOMM_HOME"]).resolve()
    return Path.cwd().resolve()


def results_dir() -> Path:
    return project_root() / "results"


def profiles_dir() -> Path:
    """Where compute profiles are cached (``network.compute=profile``), keyed by what they depend on:
    ``DLCOMM_PROFILES`` when set (one cache for several homes), else ``results/profiles``."""
    shared = os.environ.get("DLCOMM_PROFILES", "")
    return Path(shared) if shared else results_dir() / "profiles"


def cache_dir() -> Path | None:
    """dlcomm's cache across results folders (the empty MLflow store new stores are copied from):
    ``DLCOMM_CACHE`` when set (``off``: no cache), else ``$XDG_CACHE_HOME/dlcomm``, else
    ``~/.cache/dlcomm``; None when off or no home folder is known."""
    chosen = os.environ.get("DLCOMM_CACHE", "")
    if chosen == "off":
        return None
    if chosen:
        return Path(chosen)
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "dlcomm"
    try:
        return Path.home() / ".cache" / "dlcomm"
    except RuntimeError:  # no home folder known
        return None


def sqlite_path(tracking_uri: str) -> Path | None:
    """The database file a ``sqlite:///<path>`` URI names; None for any other store."""
    return Path(tracking_uri[len("sqlite:///") :]) if tracking_uri.startswith("sqlite:///") else None


def runs_dir(tracking_uri: str) -> Path:
    """Where runs' files (config.yaml, timings.csv, checkpoints) go: beside their SQLite store,
    so that a store and its runs' files move together; under :func:`results_dir` for a server."""
    database = sqlite_path(tracking_uri)
    return database.resolve().parent / "runs" if database is not None else results_dir() / "runs"


def home_setting() -> str:
    """What decides :func:`results_dir`, for messages: ``DLCOMM_HOME=<value>`` or the working directory."""
    home = os.environ.get("DLCOMM_HOME")
    return f"DLCOMM_HOME={home}" if home else f"the working directory {Path.cwd()}"


def write_probe(folder: Path) -> None:
    """Create ``folder`` if needed and write (then remove) a scratch file in it; ``OSError`` when
    that fails: the test every "can results go there?" check makes before any work."""
    import tempfile

    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=folder, prefix=".dlcomm-probe-"):
        pass


def check_writable(folder: Path, setting: str, fix: str) -> None:
    """:func:`write_probe` before any work whose results go to ``folder``; else one line:
    ``<setting> cannot be written: <folder>: <reason>; <fix>`` (``<folder> is a FIFO, not a
    folder`` for something there that is no folder)."""
    from dlcomm.errors import UserError

    kind = _kind(folder)
    if kind not in (None, "a folder"):
        raise UserError(f"{setting} cannot be written: {folder} is {kind}, not a folder; {fix}")
    try:
        write_probe(folder)
    except OSError as error:
        raise UserError(f"{setting} cannot be written: {folder}: {error.strerror or error}; {fix}") from None


def check_output_file(path: Path, setting: str, fix: str) -> Path:
    """The one check of every option that names a file dlcomm writes (``calibrate --out``,
    ``profile --out``), before any work: ``path`` must be a regular file (replaced; through a link,
    the file it leads to, the link kept) or a new name in a folder that can be written (made if
    missing). A folder, a FIFO (a write would wait for a reader), a device (an atomic rename would
    replace the node) or a socket is one line: ``<setting> cannot be written: <path> is a FIFO, not
    a regular file; <fix>``. Returns the path to write: ``path`` with its links resolved."""
    from dlcomm.errors import UserError

    target = path.resolve()
    kind = _kind(target)
    if kind not in (None, "a regular file"):
        raise UserError(f"{setting} cannot be written: {path} is {kind}, not a regular file; {fix}")
    check_writable(target.parent, setting, fix)
    return target


def _kind(path: Path) -> str | None:
    """What is at ``path`` (links followed), in words (``a FIFO``, ``a character device``); None for
    nothing there (or nothing that can be looked at: the write that follows says why)."""
    import stat

    try:
        mode = path.stat().st_mode
    except (OSError, ValueError):
        return None
    for test, words in (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return words
    return "something else"


NAME_MAX = 255  # bytes of one entry of a folder (Linux's NAME_MAX, and most file systems')


def entry_name(name: str) -> str:
    """``name`` as one entry of a folder, never a way out of it: a separator (``/``, ``\\``) or a
    control character becomes ``_``, and a name that is empty or starts with ``.`` (``..``, a
    hidden file) gets a leading ``_``; one longer than a folder entry may be (:data:`NAME_MAX` bytes:
    an experiment's name from a store may have 500 characters) is cut, with a digest of the whole name
    after the cut (names that differ after it stay apart). A name that is already safe comes back as it is."""
    safe = "".join(
        "_" if character in "/\\" or ord(character) < 32 or character == "\x7f" else character for character in name
    )
    safe = f"_{safe}" if not safe or safe.startswith(".") else safe
    if len(safe.encode(errors="surrogatepass")) > NAME_MAX:
        import hashlib

        digest = hashlib.sha256(name.encode(errors="surrogatepass")).hexdigest()[:12]
        cut = safe.encode(errors="surrogatepass")[: NAME_MAX - len(digest) - 1].decode(errors="ignore")
        safe = f"{cut}-{digest}"
    return safe


def inside(folder: Path, path: Path, setting: str) -> Path:
    """``path`` when it resolves (links followed) under ``folder``; else one line naming
    ``setting``: every folder dlcomm writes a user-named thing into is checked with this."""
    from dlcomm.errors import UserError

    if not path.resolve().is_relative_to(folder.resolve()):
        raise UserError(
            f"{setting} would write to {path.resolve()}, outside {folder.resolve()}; pick a name without "
            "'/', '\\' or '..' (or remove the link that leads out of the folder)"
        )
    return path


#: What dlcomm keeps in a results folder beside the experiments' report folders (``results/<experiment>/``):
#: the default store and the files SQLite and dlcomm's lock keep beside it, the runs' files, the
#: artifacts (``0``: the default experiment's, where MLflow puts them), compute profiles, sweeps'
#: summaries and ``dlcomm topology``'s tables. An experiment may not take one of these names.
OWN_NAMES = (
    "mlflow.db",
    "mlflow.db.lock",
    "mlflow.db-journal",
    "mlflow.db-wal",
    "mlflow.db-shm",
    "runs",
    "mlartifacts",
    "0",
    "profiles",
    "sweeps",
    "topology",
)


def own_name(name: str) -> bool:
    """Whether the folder of an experiment named ``name`` (:func:`entry_name`) would be one of
    :data:`OWN_NAMES`, compared without case (a case-insensitive file system has one entry for both)."""
    return entry_name(name).casefold() in {own.casefold() for own in OWN_NAMES}


def own_paths(tracking_uri: str) -> list[tuple[Path, bool, str]]:
    """``(path, is a folder, what it holds)`` for every path dlcomm creates or uses for a run
    recorded in ``tracking_uri``: the results folder and its own folders, and beside a SQLite
    store its lock file, SQLite's journals, the runs' files and the artifacts. (The database file
    itself is the store's probe's: :func:`dlcomm.tracking.store.probe`.)"""
    results = results_dir()
    found = [
        (results, True, "the results"),
        (results / "sweeps", True, "the sweeps' summaries"),
        (results / "topology", True, "dlcomm topology's tables"),
        (profiles_dir(), True, "the compute profiles"),
    ]
    database = sqlite_path(tracking_uri)
    if database is not None:
        found += [
            (database.parent, True, "the MLflow store"),
            (Path(f"{database}.lock"), False, "the MLflow store's lock file"),
            *((Path(f"{database}{suffix}"), False, "SQLite's journal") for suffix in ("-journal", "-wal", "-shm")),
            (database.parent / "mlartifacts", True, "the runs' artifacts"),
        ]
    found.append((runs_dir(tracking_uri), True, "the runs' files"))
    return found


def check_shape(path: Path, folder: bool, holds: str, fix: str = "") -> None:
    """One line when ``path`` exists as something else than a folder (``folder``) or a regular
    file: dlcomm would fail on it midway (a file where the runs' folders go, a folder where the
    lock file goes), after the run was recorded. ``fix``: what to do instead of moving it aside."""
    from dlcomm.errors import UserError

    kind = _kind(path) or ("a link to nothing" if path.is_symlink() else None)
    wanted = "a folder" if folder else "a regular file"
    if kind is not None and kind != wanted:
        raise UserError(
            f"{path} is {kind}, where dlcomm keeps {holds} ({wanted}); "
            f"{fix or 'move it aside'} (mv {path} {path}.moved) and run again"
        )


def check_own_paths(tracking_uri: str) -> None:
    """:func:`check_shape` for each of :func:`own_paths`, before anything is recorded."""
    for path, folder, holds in own_paths(tracking_uri):
        check_shape(path, folder, holds)
