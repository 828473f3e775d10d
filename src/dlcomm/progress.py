"""What ``dlcomm train`` is doing before the first iteration, said at least every ``every_s``.

Between the command and the first iteration lie seconds of work in which nothing else is printed:
composing and checking the configuration, opening the MLflow store, starting the ranks (each
imports torch, loads the data set, builds the model and joins the job). :class:`Status` prints the
stage as it begins and, while it lasts, repeats it with its elapsed seconds from a daemon thread
(on a terminal by rewriting its line, in a log as new lines), so the user is never left waiting in
silence. The ranks' stages reach the driver's line through a small file that rank 0 rewrites
(:func:`mark_stage`); rank 0 marks :data:`TRAINING` before its progress bar starts, and the line
stops there. Imports nothing heavy: it runs before torch is imported.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import IO

STAGE_FILE = ".stage"  # in the run's folder: rank 0's current stage, one line
TRAINING = "training"  # rank 0's stage while training: its bar takes over
# rank 0's last stage: the run's result (final metrics, timings, description) is in the store, the
# done line follows; a stop signal the driver gets from now on ends no training (see :func:`recorded`)
RECORDED = "result recorded"


class Status:
    """One status line that names the current stage and repeats it every ``every_s`` seconds."""

    def __init__(self, stream: IO[str] | None = None, every_s: float = 1.0, prefix: str = "dlcomm: ") -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.every_s = every_s
        self.prefix = prefix
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._lock = threading.Lock()
        self._text = ""
        self._since = 0.0
        self._follow: Path | None = None
        self._followed = ""
        self._partial = False  # a terminal line waiting to be rewritten
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def stage(self, text: str) -> None:
        """Begin a stage: print it now; the thread repeats it while it lasts."""
        with self._lock:
            self._text, self._since, self._follow, self._followed = text, time.monotonic(), None, ""
            self._write(f"{self.prefix}{text} ...", final=False)
        self._start()

    def follow(self, text: str, stage_file: Path) -> None:
        """Begin a stage whose details rank 0 writes to ``stage_file`` (:func:`mark_stage`); the
        line ends when rank 0 marks :data:`TRAINING`."""
        self.stage(text)
        with self._lock:
            self._follow = stage_file

    def say(self, line: str) -> None:
        """Print ``line`` as it is (the current stage goes on being repeated below it)."""
        with self._lock:
            self._end_partial()
            self._write(line, final=True)

    def stop(self) -> None:
        """End the line (no further repeats)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2 * self.every_s)
        with self._lock:
            self._end_partial()

    def __enter__(self) -> "Status":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._repeat, name="dlcomm-status", daemon=True)
            self._thread.start()

    def _repeat(self) -> None:
        while not self._stop.wait(self.every_s):
            with self._lock:
                if self._stop.is_set():
                    return
                text = self._text
                if time.monotonic() - self._since < self.every_s / 2:  # the stage was printed a moment ago
                    continue
                if self._follow is not None:
                    ranks = read_stage(self._follow)
                    if ranks in (TRAINING, RECORDED):  # training began (or a short run is already over)
                        self._end_partial()
                        self._stop.set()
                        return
                    if ranks and ranks != self._followed:
                        self._followed = ranks
                    if self._followed:
                        text = f"{self._text}: rank 0 {self._followed}"
                self._write(f"{self.prefix}{text} ... {time.monotonic() - self._since:.0f} s", final=False)

    def _write(self, line: str, final: bool) -> None:
        try:
            if self.tty:
                self.stream.write(f"\r\x1b[2K{line}" + ("\n" if final else ""))
                self._partial = not final
            else:
                self.stream.write(line + "\n")
            self.stream.flush()
        except (ValueError, OSError):  # the stream closed under us (the process is ending)
            self._stop.set()

    def _end_partial(self) -> None:
        if self._partial:
            try:
                self.stream.write("\n")
                self.stream.flush()
            except (ValueError, OSError):
                pass
            self._partial = False


def mark_stage(run_dir: str | os.PathLike[str], text: str) -> None:
    """Rank 0 tells the driver's :class:`Status` what it is doing (atomically: a rename)."""
    folder = Path(run_dir)
    if not folder.is_dir():
        return
    temporary = folder / f"{STAGE_FILE}.{os.getpid()}.{threading.get_ident()}"
    try:
        temporary.write_text(text)
        temporary.replace(folder / STAGE_FILE)
    except OSError:  # a progress line is not worth failing a run for
        pass


def recorded(run_dir: str | os.PathLike[str]) -> bool:
    """Whether rank 0 has recorded the run's result (marked :data:`RECORDED`): the driver of a
    run then closes it FINISHED whatever signal comes while its ranks end."""
    return bool(run_dir) and read_stage(Path(run_dir) / STAGE_FILE) == RECORDED


def read_stage(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


_CURRENT: Status | None = None  # the command's line (dlcomm train), None elsewhere (tests, ranks)


def begin(every_s: float = 1.0) -> Status:
    """The status line of this command (``dlcomm train``); :func:`stage` and friends write to it."""
    global _CURRENT
    end()
    _CURRENT = Status(every_s=every_s)
    return _CURRENT


def stage(text: str) -> None:
    """:meth:`Status.stage` of the command's line, if it has one."""
    if _CURRENT is not None:
        _CURRENT.stage(text)


def follow(text: str, stage_file: Path) -> None:
    if _CURRENT is not None:
        _CURRENT.follow(text, stage_file)


def say(line: str) -> None:
    """Print ``line`` (below the status line when there is one)."""
    if _CURRENT is not None:
        _CURRENT.say(line)
    else:
        print(line, flush=True)


def end() -> None:
    """No more status lines (before an error, the job's own output, or the exit)."""
    global _CURRENT
    if _CURRENT is not None:
        _CURRENT.stop()
        _CURRENT = None
