"""Range checks that types cannot express, each failing with one line: the key, the value,
the rule and the fix."""

from __future__ import annotations

import dataclasses
import math
import re
from typing import TYPE_CHECKING, Any, Mapping, Optional

from dlcomm.errors import UserError

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from dlcomm.config.schema import NetworkConfig, RunConfig


def require(ok: bool, key: str, value: Any, rule: str) -> None:
    """Raise ``UserError("<key>=<value> is invalid: <rule>")`` unless ``ok``."""
    if not ok:
        raise UserError(f"{key}={value} is invalid: {rule}")


INT64 = 2**63


def check_groups(cfg: DictConfig, schema: type) -> None:
    """Refuse a composed config that lacks a key of its schema (``~tracking``, ``~seed`` delete one):
    one line naming the override and the fix."""
    for item in dataclasses.fields(schema):
        if item.name not in cfg:
            if item.default is dataclasses.MISSING:  # a group of keys (train, tracking)
                example = f"{item.name}.<key>=<value>"
            else:  # a choice (model, algo: MISSING until a defaults list picks one) or a value (seed)
                example = f"{item.name}=<choice>" if item.default == "???" else f"{item.name}={item.default}"
            raise UserError(
                f"~{item.name} is invalid: a run needs {item.name}; leave ~{item.name} out "
                f"(set it instead, e.g. {example}; `dlcomm config` lists the settings)"
            )


def check_values(node: Any, prefix: str = "") -> None:
    """One pass over a composed run configuration (the schemas' dataclasses): every float finite,
    every integer within 64 bits, and the domain each schema field declares with
    :func:`dlcomm.config.schema.domain` (:func:`check_value`). The first value out is one line. A
    mapping a field holds (no schema) is walked the same way."""
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        for item in dataclasses.fields(node):
            check_value(f"{prefix}{item.name}", getattr(node, item.name), item)
    elif isinstance(node, dict):
        for key, value in node.items():
            check_value(f"{prefix}{key}", value, None)
    else:  # a DictConfig: its schema's domains would go unread
        raise TypeError(f"check_values reads the typed run (dataclasses), not a {type(node).__name__}")


def check_value(name: str, value: Any, spec: Optional[dataclasses.Field]) -> None:
    """``value`` of the key ``name`` against the domain its schema field ``spec`` declares (each
    element of a list too; None: no field, only finiteness and 64 bits): a refusal names the key,
    the value, the field's own words and rule, and the schema's default as an example."""
    rules: Mapping[str, Any] = spec.metadata.get("limits", {}) if spec is not None else {}
    example = _default(spec)
    if isinstance(value, dict) or (dataclasses.is_dataclass(value) and not isinstance(value, type)):
        check_values(value, name + ".")
    elif isinstance(value, (list, tuple)):
        items = list(value)
        length = rules.get("length")
        require(length is None or len(items) == length, name, items, f"give {length} values, e.g. {example}")
        for item in items:
            if not isinstance(item, (dict, list, tuple)):
                _check_scalar(name, items, item, rules, "each value ", example)
    else:
        _check_scalar(name, value, value, rules, "", example)


def _default(spec: Any) -> Any:
    if spec is None:
        return None
    if spec.default is not dataclasses.MISSING:
        return spec.default
    return spec.default_factory() if spec.default_factory is not dataclasses.MISSING else None


def _check_scalar(name: str, shown: Any, value: Any, rules: Mapping[str, Any], each: str, example: Any) -> None:
    if isinstance(value, str):
        _check_text(name, shown, value, rules, each, example)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        _check_number(name, shown, value, rules, each, example)


def _subject(rules: Mapping[str, Any], each: str) -> str:
    """``the per-worker batch `` (the field's own words), ``each value `` for a list's elements."""
    means = rules.get("means") or ""
    return f"{means} " if means and not each else f"{each}{'of ' + means + ' ' if means else ''}"


def _check_text(name: str, shown: Any, value: str, rules: Mapping[str, Any], each: str, example: Any) -> None:
    subject = _subject(rules, each)
    one_of, pattern, max_chars = rules.get("one_of"), rules.get("pattern"), rules.get("max_chars")
    if one_of is not None:
        require(value in one_of, name, _shortened(shown), f"{subject}must be {_listed(one_of)}")
    if max_chars is not None:
        require(
            len(value) <= max_chars,
            name,
            _shortened(shown),
            f"{subject}must be at most {max_chars} characters (it has {len(value)})",
        )
    if pattern is not None:
        hint = f", e.g. {example}" if example not in (None, "") else ""
        require(
            re.fullmatch(pattern, value) is not None, name, _shortened(shown), f"{subject}must match {pattern}{hint}"
        )


def _listed(one_of: Any) -> str:
    """A set of values in words: ``4 or 8``, ``cos, tan or sec``."""
    words = [str(word) for word in one_of]
    return ", ".join(words[:-1]) + f" or {words[-1]}" if len(words) > 1 else words[0]


def _shortened(value: Any) -> Any:
    """A long string shown by its first 40 characters, a control character by its escape (``\\n``):
    a refusal stays one readable line."""
    if not isinstance(value, str):
        return value
    shown = _CONTROL.sub(lambda found: repr(found.group())[1:-1], value)
    return f"{shown[:40]}... ({len(value)} characters)" if len(shown) > 60 else shown


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _check_number(name: str, shown: Any, value: Any, rules: Mapping[str, Any], each: str, example: Any) -> None:
    subject = _subject(rules, each)
    hint = f", e.g. {example}" if example not in (None, [], "") else ""
    if rules.get("one_of") is not None:  # a set is described as the set, never as the range around it
        require(value in rules["one_of"], name, shown, f"{subject}must be {_listed(rules['one_of'])}{hint}")
    low, above, high, below = (rules.get(bound) for bound in ("low", "above", "high", "below"))
    ok = (
        (low is None or value >= low)
        and (above is None or value > above)
        and (high is None or value <= high)
        and (below is None or value < below)
    )
    if not ok:
        floor = f"[{low}" if low is not None else f"({above}" if above is not None else None
        if low is not None and high is not None and below is None:
            rule = f"{subject}must be from {low} to {high}"
        elif floor is not None and (high is not None or below is not None):
            rule = f"{subject}must be in {floor}, {high if below is None else below}{']' if below is None else ')'}"
        elif below is not None:
            rule = f"{subject}must be below {below}"
        elif high is not None:
            rule = f"{subject}must be {high} or less"
        elif above is not None:
            rule = f"{subject}must be above {above}"
        else:
            rule = f"{subject}must be {low} or more"
        require(False, name, shown, rule + hint)
    if isinstance(value, float):
        require(math.isfinite(value), name, shown, f"{subject}must be a finite number (not nan or inf){hint}")
    else:
        require(
            -INT64 <= value < INT64,
            name,
            shown,
            f"{subject}must be a whole number of at most 64 bits (below 2**63){hint}",
        )


def validate_run(cfg: "RunConfig") -> None:
    """Checks on the keys every run shares that their declared domains
    (:func:`dlcomm.config.schema.domain`, checked while composing) cannot say: a value inside a
    range that is not one (train.max_steps=0) and rules across keys. The algorithm checks its own
    (``check_config``), the launcher its ``launcher.*`` keys (``dlcomm.launch.base.Launcher.check``)."""
    train = cfg.train
    require(
        train.max_steps == -1 or train.max_steps >= 1,
        "train.max_steps",
        train.max_steps,
        "use -1 for no cap or a positive number of steps",
    )
    optim = cfg.optim  # its name is a choice of the optim group: composition refuses an unknown one
    require(
        optim.warmup_epochs <= train.epochs,
        "optim.warmup_epochs",
        optim.warmup_epochs,
        f"the warm-up is longer than the run (train.epochs={train.epochs}), so the learning rate would never reach "
        f"optim.lr; pass optim.warmup_epochs={train.epochs} or less (0: no warm-up)",
    )
    require(
        optim.schedule != "cosine" or optim.min_lr <= optim.lr,
        "optim.min_lr",
        optim.min_lr,
        f"the cosine schedule's floor is above optim.lr={optim.lr}, so the learning rate would rise; pass "
        f"optim.min_lr={optim.lr} or less, e.g. 0",
    )
    check_experiment_name(cfg.tracking.experiment, "tracking.experiment")
    validate_network(cfg.network, cfg.nodes * cfg.workers_per_node)


def check_experiment_name(name: str, setting: str) -> None:
    """An experiment's report goes to ``results/<name>/``: a name dlcomm keeps there for itself
    (``runs``, ``mlflow.db``, ...: :data:`dlcomm.paths.OWN_NAMES`) would put the report among the
    runs' folders or onto the store's file."""
    from dlcomm.paths import OWN_NAMES, own_name

    require(
        not own_name(name),
        setting,
        name,
        f"that name is dlcomm's own under results/ ({', '.join(OWN_NAMES)}), where the experiment's report "
        "would go; pick another name",
    )


def validate_network(network: "NetworkConfig", world: int) -> None:
    """The network's rules across keys: wide_workers and the per-worker lists within the world, and
    each compute key only under the clock that uses it (a compute scale simulated, a profile's keys
    profiled). The ranges of bandwidths, latencies and factors are declared in the schemas."""
    require(
        0 <= network.wide_workers <= world,
        "network.wide_workers",
        network.wide_workers,
        f"the job has {world} workers (nodes*workers_per_node); pass a count from 0 to {world}",
    )
    per_rank = list(network.worker_bandwidth_gbps)
    require(
        len(per_rank) in (0, world),
        "network.worker_bandwidth_gbps",
        per_rank,
        f"give one Gb/s value per worker ({world} values for nodes*workers_per_node={world}) or []",
    )
    require(
        network.compute_scale == 1 or network.mode == "simulate",
        "network.compute_scale",
        network.compute_scale,
        "only simulated clocks can scale compute; add network.mode=simulate or leave it at 1",
    )
    scales = list(network.rank_compute_scale)
    require(
        len(scales) in (0, world),
        "network.rank_compute_scale",
        scales,
        f"give one factor per worker ({world} values for nodes*workers_per_node={world}) or []",
    )
    profiled = network.mode == "simulate" and network.compute == "profile"
    for key, value, off in (
        ("compute_ms", network.compute_ms, 0),
        ("compute_jitter", network.compute_jitter, 0),
        ("straggler_prob", network.straggler_prob, 0),
        ("compute_profile", network.compute_profile, ""),
    ):
        require(
            value == off or profiled,
            f"network.{key}",
            value,
            "only a profiled simulated clock has it; add network.mode=simulate network.compute=profile",
        )
    require(
        not scales or profiled,
        "network.rank_compute_scale",
        scales,
        "only a profiled simulated clock has it; add network.mode=simulate network.compute=profile",
    )
    if network.compute_profile:
        from pathlib import Path

        from dlcomm.profiles import library_names, library_path

        shipped = library_names()
        require(
            Path(network.compute_profile).is_file() or library_path(network.compute_profile) is not None,
            "network.compute_profile",
            network.compute_profile,
            "no such file or shipped profile; write one with `dlcomm profile <the run's overrides> --out <file>`"
            + (f", or pick a shipped one ({', '.join(shipped)})" if shipped else " (dlcomm ships none yet)"),
        )


def check_fault_ranks(cfg: "RunConfig", roles: tuple[str, ...]) -> None:
    """``debug.*`` only where the fault can happen, its rank: ``fail_rank`` one of this job's ranks
    (the workers ``0..W-1``, then the service processes ``roles``); ``fail_step``/``fail_mode``
    without ``fail_rank`` refused, as they would do nothing. Its step: :func:`check_fault_steps`."""
    debug = cfg.debug
    workers = cfg.nodes * cfg.workers_per_node
    if debug.fail_rank == -1:
        for key, value, default in (("fail_step", debug.fail_step, -1), ("fail_mode", debug.fail_mode, "raise")):
            require(
                value == default,
                f"debug.{key}",
                value,
                "it takes effect only with debug.fail_rank=<rank> (the rank that fails); pass that too, or leave debug.* out",
            )
        return
    ranks = workers + len(roles)
    services = f" and {', '.join(roles)} as rank(s) {workers} to {ranks - 1}" if roles else ""
    require(
        debug.fail_rank < ranks,
        "debug.fail_rank",
        debug.fail_rank,
        f"this job's ranks are 0 to {ranks - 1} ({workers} workers{services}); pass one of them, or -1 for no fault",
    )


def check_fault_steps(cfg: "RunConfig", total_steps: int | None) -> None:
    """The step of the fault :func:`check_fault_ranks` passed: a worker's ``fail_step`` one of the
    run's steps ``0..total_steps-1`` (``total_steps`` None: not known before the data is read), a
    service's a number of seconds."""
    debug = cfg.debug
    workers = cfg.nodes * cfg.workers_per_node
    if debug.fail_rank == -1:
        return
    if debug.fail_rank >= workers:
        require(
            debug.fail_step >= 0,
            "debug.fail_step",
            debug.fail_step,
            "a service rank dies this many seconds after it starts; pass 0 or more",
        )
        return
    last = f"{total_steps - 1}" if total_steps is not None else "the last step"
    require(
        debug.fail_step >= 0 and (total_steps is None or debug.fail_step < total_steps),
        "debug.fail_step",
        debug.fail_step,
        f"worker {debug.fail_rank} fails when it begins this step, and this run's steps are 0 to {last}; pass one of them",
    )
