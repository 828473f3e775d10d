"""``compress=none`` (the default): nothing is compressed; every algorithm keeps its own path."""

from __future__ import annotations

from dlcomm.compress.base import Compressor
from dlcomm.compress.registry import register
from dlcomm.config.schema import CompressConfig


@register
class NoCompression(Compressor):
    """``compress=none``: its name is :class:`CompressConfig`'s ``name`` default."""

    Config = CompressConfig
    display_name = "uncompressed"
    identity = True
