"""The one exception type that means "the user asked for something we cannot do".

The CLI turns a :class:`UserError` into a single line on stderr and exit code 2, with no
traceback. Everything else is a bug and keeps its traceback.
"""

from __future__ import annotations

EXIT_USAGE = 2


def first_line(error: BaseException) -> str:
    """The first non-blank line of ``error``'s text (its type's name when it has none): what a
    one-line refusal quotes of a library's multi-line error."""
    return next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)


class UserError(Exception):
    """Bad input: the message names the problem and the fix, on one line."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


class Diverged(Exception):
    """The training loss stopped being a finite number: the run failed (exit 1) because of its
    settings, not a bug, so the launchers report this one line and no traceback."""

    def __init__(self, value: float, step: int, rank: int) -> None:
        self.step, self.rank = step, rank
        word = "NaN" if value != value else "inf"
        super().__init__(
            f"loss became {word} at step {step} (rank {rank}); lower optim.lr or enable warm-up (optim.warmup_epochs=1)"
        )
