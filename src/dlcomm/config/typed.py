"""The run's configuration in the one form every check after composition and every rank reads:
the schemas' dataclasses (:class:`~dlcomm.config.schema.RunConfig`, whose ``algo`` is the chosen
algorithm's own ``Config``, ``model`` its family's schema, and so on), and back to plain data for
hashing, logging and caching."""

from __future__ import annotations

import dataclasses
from enum import Enum
from typing import TYPE_CHECKING, Any

from dlcomm.config.schema import RunConfig

if TYPE_CHECKING:
    from omegaconf import DictConfig


def to_run_config(cfg: DictConfig) -> RunConfig:
    """The composed, resolved ``DictConfig`` as typed objects: each node becomes the dataclass
    Hydra composed it with (``OmegaConf.to_object``), so ``cfg.algo`` is e.g. a ``DPSGDConfig``."""
    from omegaconf import OmegaConf

    run = OmegaConf.to_object(cfg)
    if not isinstance(run, RunConfig):  # a composition without the primary schema: a programming error
        raise TypeError(f"the composed config is a {type(run).__name__}, not a RunConfig")
    return run


def typed_section(schema: type, values: Any) -> Any:
    """``values`` (a dict or ``DictConfig``) checked against ``schema`` and made one of its
    instances: for code that builds a section outside a composition (tests, harnesses)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), values))


def plain(node: Any) -> Any:
    """A config node (dataclass, ``DictConfig``, list or value) as plain data: dicts, lists,
    numbers and strings (a :class:`~dlcomm.config.schema.Choice` as its word)."""
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        return {item.name: plain(getattr(node, item.name)) for item in dataclasses.fields(node)}
    if isinstance(node, Enum):
        return str(node.value)
    if isinstance(node, dict):
        return {key: plain(value) for key, value in node.items()}
    if isinstance(node, (list, tuple)):
        return [plain(value) for value in node]
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(node, (DictConfig, ListConfig)):
        return OmegaConf.to_container(node, resolve=True, enum_to_str=True)
    return node
