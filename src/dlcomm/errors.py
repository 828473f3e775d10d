"""The one exception type that means "the user asked for something we cannot do".

The CLI turns a :class:`UserError` into a single line on stderr and exit code 2, with no
traceback. Everything else is a bug and keeps its traceback.
"""

from __future__ import annotations

EXIT_USAGE = 2


class UserError(Exception):
    """Bad input: the message names the problem and the fix, on one line."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))
