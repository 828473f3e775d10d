"""Compose ``configs/`` (shipped inside the package) with command-line overrides."""

from __future__ import annotations

import re
from typing import Any

from omegaconf import DictConfig, OmegaConf

from dlcomm.errors import UserError


def compose(overrides: list[str]) -> DictConfig:
    """The typed, composed run configuration; composition errors become one-line UserErrors."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from dlcomm.config.schema import register_schemas

    register_schemas()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module="dlcomm.configs", version_base="1.3"):
            cfg = hydra_compose(config_name="config", overrides=list(overrides))
        check_algorithm(cfg)
        OmegaConf.resolve(cfg)
    except (HydraException, OmegaConfBaseException) as error:
        raise UserError(_one_line(error)) from None
    return cfg


def check_algorithm(cfg: DictConfig) -> None:
    from dlcomm.algorithms.registry import get_algorithm

    algorithm = get_algorithm(cfg.algo.name)
    algorithm.check_config(cfg.algo)
    algorithm.check_world(cfg.algo, cfg.nodes, cfg.workers_per_node)


def _one_line(error: Exception) -> str:
    """Hydra's and OmegaConf's messages without the search path and the object dump."""
    text = str(error).split("Config search path")[0]
    text = re.split(r"\n\s*full_key:|\n\s*object_type=", text)[0]
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if any(line.startswith("Available options in") for line in lines):
        head = [line for line in lines if not line.startswith("Available options in")][0]
        at = next(i for i, line in enumerate(lines) if line.startswith("Available options in"))
        head = head.replace("In 'config': ", "")
        choices = [line for line in lines[at + 1 :] if not line.endswith("_schema")]
        return f"{head}. {lines[at].rstrip(':')}: {', '.join(choices)}"
    message = " ".join(lines)
    cause = error.__cause__
    if cause is not None and str(cause).strip():
        message += ": " + str(cause).strip().splitlines()[0]
    if "not in struct" in message or "Could not override" in message:
        message += ". See the keys with `dlcomm config`; a typo in the key is the usual cause"
    return message


def to_container(cfg: DictConfig) -> dict[str, Any]:
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
