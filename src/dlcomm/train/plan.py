"""How many iterations a run has, from the config and the data set's size alone, and the checks
on it that can be made before anything starts (the launch checks and the ranks share them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dlcomm.errors import UserError
from dlcomm.metrics.batch import step_batch as samples_per_step

if TYPE_CHECKING:
    from dlcomm.config.schema import TrainConfig


def step_batch(train: TrainConfig) -> int:
    """Samples one rank consumes per optimizer step (:func:`dlcomm.metrics.batch.step_batch`)."""
    return int(samples_per_step(train.batch_size, train.comm_interval))


def plan_steps(train: TrainConfig, train_size: int, world_size: int) -> tuple[int, int]:
    """``(iterations per epoch, iterations of the run)``: every rank holds
    ``train_size // world_size`` samples and drops its last incomplete step batch (see
    :func:`step_batch`); ``max_steps`` caps the run.

    Under a time budget (``time_budget_s`` > 0) the budget ends the run, not the epochs: the
    run's iterations are ``max_steps`` when set, else unbounded (:data:`UNBOUNDED`), and
    ``epochs`` is only the horizon a learning-rate schedule that needs one (cosine) decays over
    (:func:`schedule_steps`)."""
    per_epoch = (train_size // world_size) // step_batch(train)
    if train.time_budget_s > 0:
        return per_epoch, (train.max_steps if train.max_steps > 0 else UNBOUNDED)
    total = per_epoch * train.epochs
    return per_epoch, (min(total, train.max_steps) if train.max_steps > 0 else total)


UNBOUNDED = 2**62  # iterations of a run that only its time budget ends


def schedule_steps(train: TrainConfig, per_epoch: int, total: int) -> int:
    """The iterations a learning-rate schedule spans: the run's, or under a time budget without
    ``max_steps`` the ``epochs`` horizon (the budget's end is not known in iterations)."""
    return per_epoch * train.epochs if total == UNBOUNDED else total


def ended_by(train: TrainConfig, steps: int, clock_s: float) -> str:
    """Which limit ended a run that trained ``steps`` iterations with the training clock at
    ``clock_s``: the time budget, ``max_steps`` or ``epochs``."""
    if train.time_budget_s > 0 and clock_s >= train.time_budget_s:
        return f"train.time_budget_s={train.time_budget_s:g}"
    if train.max_steps > 0 and steps >= train.max_steps:
        return f"train.max_steps={train.max_steps}"
    return f"train.epochs={train.epochs}"


def check_plan(
    train: TrainConfig, train_size: int, world_size: int, test_size: int | None = None, dataset: str = ""
) -> tuple[int, int]:
    """:func:`plan_steps`, after refusing in one line an epoch without an iteration and (when the
    test set's size is given) an ``eval_size`` beyond the test set."""
    per_epoch, total = plan_steps(train, train_size, world_size)
    of = f" of {dataset}" if dataset else ""
    if per_epoch == 0 and 1 <= train_size // step_batch(train) < world_size:
        raise UserError(
            f"nodes*workers_per_node={world_size} is invalid: the {train_size} training samples{of} make fewer than one "
            f"batch of train.batch_size={train.batch_size} (x train.comm_interval={train.comm_interval}) per worker; "
            f"use at most {train_size // step_batch(train)} workers, or a smaller train.batch_size"
        )
    if per_epoch == 0:
        raise UserError(
            f"train.batch_size={train.batch_size} (x train.comm_interval={train.comm_interval}) is invalid: each of the "
            f"{world_size} workers holds only {train_size // world_size} of the {train_size} training samples{of}; pass train.batch_size={max(1, train_size // world_size // train.comm_interval)} "
            "or less, a smaller comm_interval, or fewer workers"
        )
    if test_size is not None and train.eval_size > test_size:
        raise UserError(
            f"train.eval_size={train.eval_size} is invalid: the test set{of} has "
            f"{test_size} images; pass at most {test_size}, or 0 for all of them"
        )
    return per_epoch, total
