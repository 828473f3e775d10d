"""``key=value`` words of the commands that take a few settings rather than Hydra overrides
(``dlcomm report``, ``dlcomm topology``, ``dlcomm runs reap``)."""

from __future__ import annotations

from dlcomm.errors import UserError


def parse_settings(words: list[str], defaults: dict[str, str], command: str, hint: str) -> dict[str, str]:
    """``defaults`` updated with every ``key=value`` word; a word without ``=`` or with a key not
    in ``defaults`` is a one-line :class:`UserError`: ``'<word>' is not a <command> setting: <hint>``."""
    settings = dict(defaults)
    for word in words:
        key, sep, value = word.partition("=")
        if not sep or key not in settings:
            raise UserError(f"{word!r} is not a {command} setting: {hint}")
        settings[key] = value
    return settings
