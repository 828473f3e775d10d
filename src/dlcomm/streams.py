"""Standard streams that cannot fail a run.

A driver's terminal can go away (the ssh session closes), its stdout can be a full disk
(``> /dev/full``) or closed (``>&-``): what dlcomm prints (progress, the done line) is for the
person watching, and the run and its record must go on without them. :func:`forgive_streams`
makes the process's standard streams so: a closed descriptor 0, 1 or 2 is opened on ``/dev/null``
(else the next file the process opens would take its number and receive the prints), and
``sys.stdout``/``sys.stderr`` are wrapped so that a write or flush that fails drops that and every
later write of the stream instead of raising, and so that credentials are masked (:mod:`dlcomm.secrets`). Called by the ``dlcomm`` command and by every rank
process it starts (they inherit its descriptors).
"""

from __future__ import annotations

import io
import os
import sys
from typing import Any

from dlcomm.secrets import mask


class ForgivingStream:
    """A text stream whose failing writes are dropped (see the module docstring)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    @property
    def broken(self) -> bool:
        """Whether a write failed and the stream writes nowhere since."""
        return self._stream is None

    def write(self, text: str) -> int:
        if self._stream is not None:
            try:
                self._stream.write(mask(text))  # no credentials of a tracking URI on a terminal or in a log
                return len(text)
            except (OSError, ValueError):  # ENOSPC, EPIPE, EIO; ValueError: closed
                self._stream = None
        return len(text)

    def flush(self) -> None:
        if self._stream is not None:
            try:
                self._stream.flush()
            except (OSError, ValueError):
                self._stream = None

    def isatty(self) -> bool:
        try:
            return self._stream is not None and self._stream.isatty()
        except (OSError, ValueError):
            return False

    def fileno(self) -> int:
        if self._stream is None:
            raise io.UnsupportedOperation("the stream failed and writes nowhere")
        return self._stream.fileno()

    def __getattr__(self, name: str) -> Any:  # encoding, errors, buffer, ...
        if self._stream is None:
            raise AttributeError(name)
        return getattr(self._stream, name)


def _reopen_closed_descriptors() -> None:
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            opened = os.open(os.devnull, os.O_RDWR)
            if opened != fd:
                os.dup2(opened, fd)
                os.close(opened)


def forgive_streams() -> None:
    """Make this process's standard streams unable to fail it (see the module docstring)."""
    _reopen_closed_descriptors()
    for name, fd in (("stdout", 1), ("stderr", 2)):
        stream = getattr(sys, name)
        if isinstance(stream, ForgivingStream):
            continue
        if stream is None:  # closed when Python started: now /dev/null
            stream = open(fd, "w", buffering=1, closefd=False)  # noqa: SIM115 - lives as long as the process
        setattr(sys, name, ForgivingStream(stream))
