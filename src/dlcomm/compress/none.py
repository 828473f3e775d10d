"""``compress=none`` (the default): nothing is compressed; every algorithm keeps its own path."""

from __future__ import annotations

from dlcomm.compress.base import Compressor
from dlcomm.compress.registry import register


@register
class NoCompression(Compressor):
    name = "none"
    display_name = "uncompressed"
    identity = True
