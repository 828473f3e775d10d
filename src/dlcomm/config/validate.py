"""Range checks that types cannot express, each failing with one line: the key, the value,
the rule and the fix."""

from __future__ import annotations

from typing import Any

from dlcomm.errors import UserError


def require(ok: bool, key: str, value: Any, rule: str) -> None:
    """Raise ``UserError("<key>=<value> is invalid: <rule>")`` unless ``ok``."""
    if not ok:
        raise UserError(f"{key}={value} is invalid: {rule}")


def validate_run(cfg: Any) -> None:
    """Checks on the keys every run shares; the algorithm checks its own (``check_config``)."""
    require(cfg.nodes >= 1, "nodes", cfg.nodes, "the number of machines must be at least 1; pass nodes=1 or more")
    require(
        cfg.workers_per_node >= 1,
        "workers_per_node",
        cfg.workers_per_node,
        "each node needs at least one worker; pass workers_per_node=1 or more",
    )
    train = cfg.train
    require(train.batch_size >= 1, "train.batch_size", train.batch_size, "the per-worker batch must hold at least one sample; pass train.batch_size=1 or more")
    require(train.epochs >= 1, "train.epochs", train.epochs, "train for at least one epoch; pass train.epochs=1 or more")
    require(train.max_steps == -1 or train.max_steps >= 1, "train.max_steps", train.max_steps, "use -1 for no cap or a positive number of steps")
    require(train.eval_every >= 0, "train.eval_every", train.eval_every, "use 0 (evaluate only at the end) or a positive number of epochs")
    require(train.eval_batch_size >= 1, "train.eval_batch_size", train.eval_batch_size, "pass a positive batch size")
    require(0.0 <= train.label_smoothing < 1.0, "train.label_smoothing", train.label_smoothing, "use a value in [0, 1)")
    require(train.device in ("cpu", "cuda", "auto"), "train.device", train.device, "use cpu, cuda or auto")
    require(train.threads_per_rank >= 0, "train.threads_per_rank", train.threads_per_rank, "use 0 (automatic) or a positive thread count")
    optim = cfg.optim
    require(optim.lr > 0, "optim.lr", optim.lr, "the learning rate must be positive")
    require(optim.schedule in ("constant", "cosine", "multistep"), "optim.schedule", optim.schedule, "use constant, cosine or multistep")
    require(optim.warmup_epochs >= 0, "optim.warmup_epochs", optim.warmup_epochs, "use 0 (no warm-up) or a positive number of epochs")
    require(cfg.launcher.backend in ("auto", "gloo", "nccl"), "launcher.backend", cfg.launcher.backend, "use auto, gloo or nccl")
    require(cfg.network.mode == "off", "network.mode", cfg.network.mode, "only network=off exists so far")
