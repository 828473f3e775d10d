"""The external tools dlcomm reads (``nvidia-smi``, ``sinfo``, ``scontrol``, ``sbatch``), asked
one way: their output read as bytes and decoded with replacement characters, so a tool that prints
something odd (a ``WARNING:`` line first, another encoding, a localised message) is something to
report, never a ``UnicodeDecodeError``; a tool that cannot be run or does not answer in time is
:class:`ToolSilent`, with the reason in words.

What a caller parses from :attr:`Answer.stdout` is its own business; :func:`quoted` shows a piece
of it in one short line, for a finding that quotes what the tool said."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Answer:
    """What a tool printed (decoded) and its exit status."""

    returncode: int
    stdout: str
    stderr: str

    def said(self) -> str:
        """The first non-blank line of stderr, else of stdout, quoted; ``nothing`` when silent."""
        for text in (self.stderr, self.stdout):
            line = next((line for line in text.splitlines() if line.strip()), "")
            if line:
                return quoted(line)
        return "nothing"


class ToolSilent(Exception):
    """The tool could not be started (missing, not executable) or did not answer in time."""


def decode(raw: bytes | None) -> str:
    """``raw`` as text: UTF-8, an undecodable byte becoming U+FFFD."""
    return (raw or b"").decode("utf-8", errors="replace")


def ask(argv: Sequence[str], timeout: float | None) -> Answer:
    """Run ``argv`` (no input, output captured) and return what it printed; :class:`ToolSilent`
    naming the tool when it cannot be run or outlives ``timeout`` seconds (None: no limit)."""
    try:
        done = subprocess.run(list(argv), capture_output=True, stdin=subprocess.DEVNULL, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ToolSilent(f"{argv[0]} did not answer within {timeout:g} s") from None
    except (OSError, ValueError) as error:  # ValueError: a NUL byte in an argument
        reason = getattr(error, "strerror", None) or str(error)
        raise ToolSilent(f"{argv[0]} could not be run: {reason}") from None
    return Answer(done.returncode, decode(done.stdout), decode(done.stderr))


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def quoted(text: str, limit: int = 80) -> str:
    """``text`` in quotes on one line: control characters escaped, cut after ``limit`` characters."""
    shown = _CONTROL.sub(lambda found: repr(found.group())[1:-1], text.strip())
    return f"'{shown[:limit]}{'...' if len(shown) > limit else ''}'"
