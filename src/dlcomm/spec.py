"""RunSpec: the resolved configuration of one run plus its identity, handed to every rank."""

from __future__ import annotations

import hashlib
import json
import subprocess
from dataclasses import Field, dataclass, fields, replace
from functools import cached_property
from pathlib import Path
from typing import Any, cast

from dlcomm.config.schema import COMPUTES, RunConfig
from dlcomm.config.typed import plain

RUN_NAME_CHARS = 64  # a run's default name, which the MLflow UI's runs list shows whole at about this width
# Keys that say where and how a run is recorded or launched, not what it computes; of ``launcher``,
# the knobs marked :func:`dlcomm.config.schema.computes` are hashed all the same (computed_config).
_NOT_HASHED = ("tracking", "launcher", "debug", "report")


@dataclass(frozen=True)
class RunSpec:
    """``run``: the configuration as the schemas' dataclasses, what :meth:`cfg` gives every check,
    the driver and every rank; :attr:`config` (plain data: hashed, logged as params, shown) and
    :attr:`config_hash` are derived from it."""

    run: RunConfig
    git_commit: str
    tracking_uri: str
    run_id: str = ""
    run_dir: str = ""
    parent_run_id: str = ""  # the sweep's parent run, for a sweep's element
    overrides: tuple[str, ...] = ()  # the command line's overrides that composed ``run``
    varied: tuple[str, ...] = ()  # a sweep element's overrides of the keys its sweep varies
    # what the ranks shared on the driver's machine ("8 ranks took turns on 2 cores"; empty: hardware
    # of their own, or a launcher that cannot tell): its wall clock is then no cluster's
    shared: str = ""

    @classmethod
    def from_config(cls, cfg: RunConfig, tracking_uri: str, overrides: tuple[str, ...] = ()) -> "RunSpec":
        """The run ``cfg`` (:func:`dlcomm.compose.compose`'s) describes, recorded in ``tracking_uri``."""
        return cls(run=cfg, git_commit=git_commit(), tracking_uri=tracking_uri, overrides=tuple(overrides))

    def cfg(self) -> RunConfig:
        """The run's configuration as typed objects (``cfg().algo`` is the algorithm's ``Config``)."""
        return self.run

    @cached_property
    def config(self) -> dict[str, Any]:
        """The configuration as plain data (a closed knob as its word), for params, hashing and files."""
        return cast(dict[str, Any], plain(self.run))

    @cached_property
    def computed(self) -> dict[str, Any]:
        """What the run computes, as plain data: what :attr:`config_hash` hashes (:func:`computed_config`)."""
        return computed_config(self.run)

    @cached_property
    def config_hash(self) -> str:
        return config_hash(self.computed)

    def with_run(self, run_id: str, run_dir: Path) -> "RunSpec":
        return replace(self, run_id=run_id, run_dir=str(run_dir))

    def sharing(self, shared: str) -> "RunSpec":
        return replace(self, shared=shared)

    def in_sweep(self, parent_run_id: str) -> "RunSpec":
        return replace(self, parent_run_id=parent_run_id)

    def run_name(self) -> str:
        """``tracking.run_name``, else a name that tells runs apart in the MLflow UI: algorithm,
        nodes x workers per node, the network preset (when one is modelled), then what the sweep
        varies (a sweep's element) or the command line's other settings (a single run), then the
        seed, e.g. ``crossover 2x4 eth_1g algo.segments=4 seed=2``; at most :data:`RUN_NAME_CHARS`
        characters (the rest of a long command line is in the run's params)."""
        cfg = self.run
        if cfg.tracking.run_name:
            return cfg.tracking.run_name
        shown = ("algo", "nodes", "workers_per_node", "seed", "network", "experiment")
        quiet = ("tracking", "launcher", "debug", "report")
        extra = [
            item.lstrip("+~")
            for item in (self.varied if self.parent_run_id or self.varied else self.overrides)
            if _key(item) not in shown and _key(item).split(".")[0] not in quiet
        ]
        network = cfg.network.name
        words = [
            cfg.algo.name,
            f"{cfg.nodes}x{cfg.workers_per_node}",
            *([network] if network not in ("off", "") else []),
            *extra,
        ]
        seed = f" seed={cfg.seed}"
        head = " ".join(words)
        if len(head) + len(seed) > RUN_NAME_CHARS:
            head = head[: RUN_NAME_CHARS - len(seed) - 3].rstrip() + "..."
        return head + seed

    def network_label(self) -> str:
        """The network preset's name, with the link values the command line changed, e.g.
        ``eth_10g, inter 25 Gb/s``: what the run modelled, not only what it started from."""
        changed = []
        for item in self.overrides:
            key, _, value = item.lstrip("+~").partition("=")
            if not key.startswith("network.") or key in ("network.mode",):
                continue
            parts = key.split(".")[1:]
            if parts[0] in ("inter", "intra") and len(parts) == 2:
                unit = {"bandwidth_gbps": "Gb/s", "latency_ms": "ms"}.get(parts[1])
                changed.append(f"{parts[0]} {value} {unit}" if unit else f"{'.'.join(parts)}={value}")
            elif parts[0] in ("wide_workers", "wide_bandwidth_gbps", "worker_bandwidth_gbps"):
                changed.append(f"{parts[0]}={value}")
        return ", ".join([self.run.network.name, *changed])


def _key(override: str) -> str:
    return override.lstrip("+~").split("=", 1)[0]


def computed_config(run: RunConfig) -> dict[str, Any]:
    """The configuration of ``run`` that decides its numbers, as plain data: every key but
    ``tracking``, ``launcher``, ``debug`` and ``report``, and of ``launcher`` the knobs its schema
    marks :func:`~dlcomm.config.schema.computes` (``launcher.backend``, ``launcher.semantics``,
    ``launcher.compute``, ``launcher.gpus_per_node``, ``launcher.cpus_per_task``) set away from
    their defaults (so runs of different launchers at their defaults, which compute alike, share a
    hash, and a run's hash is what it was before these knobs were hashed): a resume must keep all of
    these, and may change the rest (partition, account, time limit, ...)."""
    config = cast(dict[str, Any], plain(run))
    payload = {key: value for key, value in config.items() if key not in _NOT_HASHED}
    launcher = {
        item.name: config["launcher"][item.name]
        for item in computing_knobs(run.launcher)
        if config["launcher"][item.name] != plain(item.default)
    }
    if launcher:
        payload["launcher"] = launcher
    return payload


def computing_knobs(launcher: Any) -> list[Field[Any]]:
    """The fields of a launcher's ``Config`` marked :func:`~dlcomm.config.schema.computes`."""
    return [item for item in fields(launcher) if item.metadata.get(COMPUTES)]


def config_hash(computed: dict[str, Any]) -> str:
    """First 12 hex digits of the SHA-256 of the canonical JSON of what the run computes
    (:func:`computed_config`)."""
    return hashlib.sha256(json.dumps(computed, sort_keys=True).encode()).hexdigest()[:12]


def git_commit() -> str:
    """The commit of the code that runs when dlcomm is installed from a source checkout
    (editable); "" for an installed package (``dlcomm_version`` says which code it is: the
    working directory's repository, perhaps the user's own project, is not dlcomm's code)."""
    code = Path(__file__).resolve().parents[2]
    if not (code / ".git").exists():
        return ""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=code, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""
