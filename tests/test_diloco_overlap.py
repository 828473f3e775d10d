"""Overlapped DiLoCo (``algo=diloco algo.overlap=delayed|eager``) against its rule.

1. ``delayed``, the one-step-delayed outer step of PrimeIntellect's prime, as PCCL's example
   ``python/examples/nanogpt_diloco/async_diloco.py`` writes it: a float64 NumPy transcription (its replicas trained with plain torch
   on the same batches) gives dlcomm's parameters after 3 periods at 2 and 4 workers, with DiLoCo's
   outer Nesterov, heavy ball, and the plain outer SGD of the reference runs (PCCL's async example:
   ``SGD(lr=0.7)``, no momentum); the transcription with the outer gradient taken after the outer
   step, with the first period's replicas not restarted from theta, with the local progress since
   the boundary kept (x_i = new theta + (x_i - old theta) instead of the reset), or with the fresh
   average applied at once (plain DiLoCo), does not.
2. ``eager`` (arXiv 2502.12996): the same, each worker with its own theta; the transcription without
   the correction (the fresh local share kept beside the delayed mean of all), with the whole local
   outer gradient instead of its 1/n share, or with the fresh share mixed into the delayed mean of
   all ((g_i + (n - 1) D) / n), does not.
3. Both under NCCL's rules (``launcher.semantics=nccl``) at 2, 3, 4 workers and 2 nodes x 2.
4. Through the train loop (``TrainLoop.run`` as a rank runs it: its data, model, optimizer and
   ``finish``), the transcription fed the same batches gives the loop's parameters. A run through
   the train loop preempted mid-period with an average in flight, resumed from its
   checkpoint, ends with the uninterrupted run's parameters (the in-flight average in the checkpoint).
5. ``overlap`` outside its set is refused while composing.

Every rank is a thread of this process on the in-process fabric (``launcher=threads``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dlcomm.algorithms.diloco import DiLoCo, DiLoCoConfig
from dlcomm.train.loop import cross_entropy_loss
from outer_fixtures import (
    PAPER,
    agree,
    assert_resumed_equal,
    flat,
    hooked_steps,
    inner_optimizer,
    rank_batch,
    replicas_step,
    run_ranks,
    tiny_mlp,
)

import rank_programs

PERIOD = 4
STEPS = 3 * PERIOD  # 3 outer boundaries


def _run(cluster, channel, knobs: dict, steps: int, finish: bool) -> np.ndarray:
    model = tiny_mlp()
    optimizer = inner_optimizer(model)
    algorithm = DiLoCo(DiLoCoConfig(period=PERIOD, **knobs), cluster, channel)
    hooked_steps(algorithm, model, optimizer, cluster.rank, steps)
    if finish:
        algorithm.finish()
    return flat(model)


def _rule(
    world: int,
    knobs: dict,
    steps: int,
    *,
    finish: bool = False,
    gradient_after_step: bool = False,
    keep_first_period: bool = False,
    at_once: bool = False,
    uncorrected: bool = False,
    whole_local: bool = False,
    keep_progress: bool = False,
    stale_mean: bool = False,
    replicas=None,
) -> list[np.ndarray]:
    """The rule of ``knobs["overlap"]`` in float64 over ``world`` replicas (plain torch, each its own
    AdamW). At the end of period k, each worker i, with D the average sent at the end of period k-1:

    delayed (PCCL's async_diloco.py): g_i = theta - x_i; if D: theta = OuterSGD(theta, D);
    x_i = theta (the unchanged theta at k = 1); send g_i.
    eager: g_i = theta_i - x_i; e_i = D + (g_i - g_i^{k-1}) / n (g_i / n at k = 1);
    theta_i = OuterSGD_i(theta_i, e_i); x_i = theta_i; send g_i.

    OuterSGD: v = mu v + d, theta -= lr (d + mu v) (Nesterov) or lr v. ``finish``: an average in
    flight after the last step is applied (eager: less the local share already applied). The wrong
    rules: ``gradient_after_step`` forms g_i against the updated theta; ``keep_first_period`` lets
    the replicas go on from x_i at k = 1; ``at_once`` applies the fresh average at once (DiLoCo);
    ``uncorrected`` uses D + g_i / n; ``whole_local`` uses D + g_i - g_i^{k-1}; ``keep_progress``
    moves the replicas by the outer step instead of restarting them (x_i += new theta - old theta);
    ``stale_mean`` uses (g_i + (n - 1) D) / n. ``replicas``:
    ``(models, optimizers, batch(rank, step), loss(model, inputs, labels))`` (default: this file's MLP,
    AdamW, batches and cross-entropy)."""
    lr, mu, nesterov, overlap = knobs["outer_lr"], knobs["outer_momentum"], knobs["nesterov"], knobs["overlap"]
    if replicas is None:
        models = [tiny_mlp() for _ in range(world)]
        replicas = (models, [inner_optimizer(model) for model in models], rank_batch, cross_entropy_loss)
    models, optimizers, batch, loss = replicas
    start = flat(models[0]).astype(np.float64)
    theta = [start.copy() for _ in range(world)]
    velocity = [np.zeros_like(start) for _ in range(world)]
    in_flight: np.ndarray | None = None
    sent: list[np.ndarray] = []
    share = 1.0 if whole_local else 1.0 / world

    def outer(i: int, d: np.ndarray) -> None:
        velocity[i] = mu * velocity[i] + d
        theta[i] = theta[i] - lr * (d + mu * velocity[i] if nesterov else velocity[i])

    def restart(i: int, model: torch.nn.Module) -> None:
        torch.nn.utils.vector_to_parameters(torch.from_numpy(theta[i]).float(), model.parameters())

    for step in range(steps):
        replicas_step(models, optimizers, step, batch, loss)
        if (step + 1) % PERIOD:
            continue
        local = [theta[i] - flat(model).astype(np.float64) for i, model in enumerate(models)]
        for i, model in enumerate(models):
            if overlap == "eager":
                e = share * local[i]
                if in_flight is not None and stale_mean:
                    e = e + (world - 1) / world * in_flight
                elif in_flight is not None:
                    e = in_flight + e - (0.0 if uncorrected else share * sent[i])
                outer(i, e)
                restart(i, model)
            elif at_once:
                outer(i, np.mean(local, axis=0))
                restart(i, model)
            else:
                before = theta[i]
                if in_flight is not None:
                    outer(i, in_flight)
                if gradient_after_step:
                    local[i] = theta[i] - flat(model).astype(np.float64)
                if keep_progress:
                    moved = flat(model).astype(np.float64) + (theta[i] - before)
                    torch.nn.utils.vector_to_parameters(torch.from_numpy(moved).float(), model.parameters())
                elif in_flight is not None or not keep_first_period:
                    restart(i, model)
        sent, in_flight = local, np.mean(local, axis=0)
    if finish and in_flight is not None:
        for i, model in enumerate(models):
            outer(i, in_flight - (share * sent[i] if overlap == "eager" else 0.0))
            restart(i, model)
    return [flat(model) for model in models]


DELAYED = {**PAPER, "overlap": "delayed"}
EAGER = {**PAPER, "overlap": "eager"}
HEAVY_BALL = {"outer_lr": 0.5, "outer_momentum": 0.5, "nesterov": False}
PLAIN_SGD = {"outer_lr": 0.7, "outer_momentum": 0.0, "nesterov": False}  # PCCL's async example, prime's SGDConfig


@pytest.mark.parametrize(
    "knobs",
    [DELAYED, {**HEAVY_BALL, "overlap": "delayed"}, {**PLAIN_SGD, "overlap": "delayed"}],
    ids=["paper", "heavy-ball", "plain-sgd"],
)
@pytest.mark.parametrize("world", [2, 4])
def test_the_delayed_rule_transcribed_gives_dlcomms_parameters(world: int, knobs: dict) -> None:
    ours = run_ranks(_run, world, knobs, STEPS, False)
    for result in ours[1:]:  # every worker applies the same outer step to the same theta
        assert np.array_equal(result, ours[0])
    assert agree(ours, _rule(world, knobs, STEPS)) <= 1e-6
    # the comparison can fail: each slip of the rule ends far from dlcomm's parameters
    assert agree(ours, _rule(world, knobs, STEPS, gradient_after_step=True)) > 1e-3
    assert agree(ours, _rule(world, knobs, STEPS, keep_first_period=True)) > 1e-3
    assert agree(ours, _rule(world, knobs, STEPS, keep_progress=True)) > 1e-3
    assert agree(ours, _rule(world, knobs, STEPS, at_once=True)) > 1e-3


@pytest.mark.parametrize(
    "knobs",
    [EAGER, {**HEAVY_BALL, "overlap": "eager"}, {**PLAIN_SGD, "overlap": "eager"}],
    ids=["paper", "heavy-ball", "plain-sgd"],
)
@pytest.mark.parametrize("world", [2, 4])
def test_the_eager_rule_transcribed_gives_dlcomms_parameters(world: int, knobs: dict) -> None:
    ours = run_ranks(_run, world, knobs, STEPS, False)
    assert not np.array_equal(ours[0], ours[1])  # each worker's theta holds its own fresh share
    assert agree(ours, _rule(world, knobs, STEPS)) <= 1e-6
    assert agree(ours, _rule(world, knobs, STEPS, uncorrected=True)) > 1e-3
    assert agree(ours, _rule(world, knobs, STEPS, whole_local=True)) > 1e-3
    assert agree(ours, _rule(world, knobs, STEPS, stale_mean=True)) > 1e-3
    assert agree(ours, _rule(world, {**knobs, "overlap": "delayed"}, STEPS)) > 1e-3


@pytest.mark.parametrize("knobs", [DELAYED, EAGER], ids=["delayed", "eager"])
def test_an_average_in_flight_at_the_end_is_applied_by_finish(knobs: dict) -> None:
    [note] = DiLoCo.plan_notes(DiLoCoConfig(period=PERIOD, **knobs), STEPS, STEPS)  # said before launch
    assert "still in flight after the last iteration" in note and "dropped" not in note
    assert "are dropped" in DiLoCo.plan_notes(DiLoCoConfig(period=PERIOD, **knobs), STEPS + 1, STEPS + 1)[0]
    ours = run_ranks(_run, 2, knobs, STEPS, True)
    assert agree(ours, _rule(2, knobs, STEPS, finish=True)) <= 1e-6
    assert agree(ours, _rule(2, knobs, STEPS)) > 1e-3


@pytest.mark.parametrize("knobs", [DELAYED, EAGER], ids=["delayed", "eager"])
@pytest.mark.parametrize(("nodes", "per_node"), [(2, 1), (3, 1), (4, 1), (2, 2)], ids=["2", "3", "4", "2x2"])
def test_the_rule_under_nccls_rules(nodes: int, per_node: int, knobs: dict) -> None:
    world = nodes * per_node
    ours = run_ranks(_run, world, knobs, STEPS, True, nodes=nodes, semantics="nccl")
    assert agree(ours, _rule(world, knobs, STEPS, finish=True)) <= 1e-6


# ---- through the train loop ---------------------------------------------------------------------------

LOOP_JOB = [f"algo.period={PERIOD}", "optim=adamw", *rank_programs.SMALL_JOB, "seed=5"]  # 12 steps: 3 periods


def _loop_params(cluster, channel, spec) -> np.ndarray:
    _, _, model, _, _ = rank_programs.train_until_warned(cluster, channel, spec, None, None, DiLoCo)
    return flat(model)


def _loop_replicas(spec, world: int):
    """The replicas, optimizers, batches and loss of the train loop for ``spec``, built as
    :func:`rank_programs.train_until_warned` and ``TrainLoop.run`` build them, with plain torch."""
    from dlcomm.data import build_dataset
    from dlcomm.data.partition import epoch_partition
    from dlcomm.tasks import build_task
    from dlcomm.train.optim import build_optimizer
    from dlcomm.train.plan import plan_steps, step_batch

    cfg = spec.cfg()
    data, task = build_dataset(cfg.dataset), build_task(cfg)
    models, optimizers = [], []
    for _ in range(world):
        torch.manual_seed(cfg.seed)
        models.append(task.build_model(cfg.model, data))
        optimizers.append(build_optimizer(cfg.optim, task.param_groups(models[-1], cfg.optim)))
    per_epoch, _ = plan_steps(cfg.train, data.train_size, world)
    batches: dict[tuple[int, int], list] = {}

    def batch(rank: int, step: int):
        epoch = step // per_epoch
        if (rank, epoch) not in batches:
            indices = epoch_partition(data.train_size, world, rank, cfg.seed, epoch)
            augment = (cfg.seed * 1_000_003 + epoch * 10_007 + rank) % 2**31
            batches[rank, epoch] = list(data.train_batches(indices, step_batch(cfg.train), augment))
        return batches[rank, epoch][step % per_epoch]

    return models, optimizers, batch, task.loss


@pytest.mark.parametrize("overlap", ["delayed", "eager"])
def test_the_rule_transcribed_gives_the_train_loops_parameters(overlap: str) -> None:
    """``dlcomm train`` as a rank runs it (the train loop, its data, model and optimizer) against the
    transcription fed the same batches: 3 periods, the last average applied by the loop's finish."""
    spec = rank_programs.run_spec(["algo=diloco", f"algo.overlap={overlap}", *LOOP_JOB])
    knobs = {**PAPER, "overlap": overlap}
    ours = run_ranks(_loop_params, 2, spec, nodes=2)
    reference = _rule(2, knobs, STEPS, finish=True, replicas=_loop_replicas(spec, 2))
    assert agree(ours, reference) <= 1e-6
    slip = {"delayed": {"gradient_after_step": True}, "eager": {"uncorrected": True}}[overlap]
    assert agree(ours, _rule(2, knobs, STEPS, finish=True, replicas=_loop_replicas(spec, 2), **slip)) > 1e-3


# ---- 4. resumed mid-period with an average in flight --------------------------------------------

RESUME_STOP_AT = 5  # stopped after 6 of 12 steps: the average sent after step 5 (period 5) is in flight


@pytest.mark.parametrize("overlap", ["delayed", "eager"])
def test_a_run_resumed_with_an_average_in_flight_ends_with_the_uninterrupted_runs_parameters(
    tmp_path, overlap: str
) -> None:
    spec = rank_programs.run_spec(
        ["algo=diloco", "algo.period=5", f"algo.overlap={overlap}", "optim=adamw", *rank_programs.SMALL_JOB, "seed=5"]
    )
    assert_resumed_equal(spec, str(tmp_path / "checkpoints"), RESUME_STOP_AT, DiLoCo, ("theta",), in_flight=True)


def test_an_overlap_outside_its_set_is_refused() -> None:
    from dlcomm.compose import compose
    from dlcomm.errors import UserError

    with pytest.raises(UserError, match=r"^algo.overlap=sometimes is invalid"):
        compose(["algo=diloco", "algo.overlap=sometimes"])
