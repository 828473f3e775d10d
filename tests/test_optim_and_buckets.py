"""Learning-rate schedules by hand, optimizer construction, and gradient buckets."""

from __future__ import annotations

import math

import pytest
import torch

from dlcomm.algorithms.buckets import make_buckets
from dlcomm.catalog import schema_of
from dlcomm.config.schema import TrainConfig
from dlcomm.train.optim import ConstantSchedule, LarsConfig, SGDConfig, build_optimizer, build_scheduler, lr_factor
from dlcomm.train.plan import plan_steps


def test_warmup_then_cosine_by_hand() -> None:
    cfg = SGDConfig(name="sgd", lr=0.1, schedule="cosine", warmup_epochs=1.0, min_lr=0.01)
    steps_per_epoch, total = 10, 30
    assert lr_factor(cfg, 0, steps_per_epoch, total) == pytest.approx(0.1)  # (0+1)/10
    assert lr_factor(cfg, 9, steps_per_epoch, total) == pytest.approx(1.0)
    assert lr_factor(cfg, 10, steps_per_epoch, total) == pytest.approx(1.0)  # cosine starts at 1
    assert lr_factor(cfg, 20, steps_per_epoch, total) == pytest.approx(0.1 + 0.9 * 0.5)  # half-way
    assert lr_factor(cfg, 30, steps_per_epoch, total) == pytest.approx(0.1)  # floor min_lr / lr


def test_a_constant_schedule_leaves_the_learning_rates_as_torch_s_lambdalr_does() -> None:
    """Without a warm-up step the constant schedule is f = 1: no LambdaLR (its step and its wrapper
    around optimizer.step are host time for nothing), the same learning rates at every step."""

    def rates(cfg: SGDConfig, steps: int = 5) -> tuple[type, list[float]]:
        model = torch.nn.Linear(3, 2)
        optimizer = build_optimizer(cfg, [{"params": model.parameters()}])
        scheduler = build_scheduler(cfg, optimizer, 10, 30)
        seen = []
        for _ in range(steps):
            optimizer.step()
            scheduler.step()
            seen.append(optimizer.param_groups[0]["lr"])
        return type(scheduler), seen

    assert rates(SGDConfig(name="sgd", lr=0.1)) == (ConstantSchedule, [0.1] * 5)
    reference = torch.optim.lr_scheduler.LambdaLR(
        torch.optim.SGD(torch.nn.Linear(3, 2).parameters(), lr=0.1), lambda _: 1.0
    )
    assert reference.get_last_lr() == [0.1]
    kind, warm = rates(SGDConfig(name="sgd", lr=0.1, warmup_epochs=0.5))  # 5 warm-up steps: a real schedule
    assert kind is torch.optim.lr_scheduler.LambdaLR and warm == pytest.approx([0.04, 0.06, 0.08, 0.1, 0.1])


def test_multistep_by_hand() -> None:
    cfg = SGDConfig(name="sgd", lr=0.1, schedule="multistep", milestones=[2, 4], gamma=0.1)
    assert [lr_factor(cfg, step, 10, 60) for step in (0, 19, 20, 39, 40)] == pytest.approx([1, 1, 0.1, 0.1, 0.01])


def test_constant_is_one() -> None:
    cfg = SGDConfig(name="sgd", schedule="constant")
    assert {lr_factor(cfg, step, 7, 70) for step in range(70)} == {1.0}


def _kinds():
    from timm.optim import AdaBelief

    from dlcomm.train.angulargrad import AngularGrad

    return [
        ("sgd", torch.optim.SGD),
        ("adam", torch.optim.Adam),
        ("adamw", torch.optim.AdamW),
        ("adabelief", AdaBelief),
        ("angulargrad", AngularGrad),
    ]


@pytest.mark.parametrize("name,kind", _kinds())
def test_optimizers_get_their_settings(name, kind) -> None:
    model = torch.nn.Linear(3, 2)
    momentum = {"momentum": 0.9, "nesterov": True} if name == "sgd" else {}  # knobs of sgd only
    cfg = schema_of("optim", name)(name=name, lr=0.02, weight_decay=0.001, **momentum)
    optimizer = build_optimizer(cfg, [{"params": list(model.parameters())}])
    assert isinstance(optimizer, kind)
    group = optimizer.param_groups[0]
    assert group["lr"] == 0.02 and group["weight_decay"] == 0.001
    if name == "sgd":
        assert group["momentum"] == 0.9 and group["nesterov"] is True


def test_plan_steps() -> None:
    train = TrainConfig(epochs=3, batch_size=16, max_steps=-1)
    assert plan_steps(train, train_size=1000, world_size=4) == (15, 45)  # 250 per rank // 16
    train.max_steps = 20
    assert plan_steps(train, 1000, 4) == (15, 20)


def _params(*shapes: tuple[int, ...]) -> list[torch.nn.Parameter]:
    torch.manual_seed(0)
    return [torch.nn.Parameter(torch.randn(*shape)) for shape in shapes]


def test_buckets_respect_size_and_reverse_order() -> None:
    params = _params((10,), (20,), (30,), (5,))  # 40, 80, 120, 20 bytes
    buckets = make_buckets(params, bucket_bytes=140)  # 20 + 120 fit; adding 80 would not
    assert [[p.numel() for p in b.params] for b in buckets] == [[5, 30], [20, 10]]
    assert [[p.numel() for p in b.params] for b in make_buckets(params, 0)] == [[5], [30], [20], [10]]
    assert len(make_buckets(params, 10**9)) == 1


def test_bucket_roundtrip_of_gradients_and_parameters() -> None:
    params = _params((3, 4), (7,), (2, 2, 2))
    for p in params:
        p.grad = torch.randn_like(p)
    expected_grads = [p.grad.clone() for p in params]
    (bucket,) = make_buckets(params, 10**9)
    flat = bucket.pack_grads()
    assert flat.numel() == 12 + 7 + 8
    for p in params:
        p.grad.zero_()
    bucket.unpack_grads()
    for p, grad in zip(params, expected_grads):
        assert torch.equal(p.grad, grad)
    bucket.pack_params()
    bucket.buffer.mul_(2)
    before = [p.detach().clone() for p in params]
    bucket.unpack_params()
    for p, old in zip(params, before):
        assert torch.allclose(p.detach(), 2 * old)


def test_missing_gradient_packs_as_zero() -> None:
    params = _params((4,), (4,))
    params[0].grad = torch.ones(4)
    (bucket,) = make_buckets(params, 10**9)
    flat = bucket.pack_grads()
    assert math.isclose(float(flat.sum()), 4.0)


def test_bound_parameters_live_in_the_bucket() -> None:
    params = _params((3, 4), (7,))
    values = [p.detach().clone() for p in params]
    optimizer = torch.optim.SGD(params, lr=0.5)
    (bucket,) = make_buckets(params, 10**9)
    buffer = bucket.bind_params()
    assert torch.equal(buffer, torch.cat([v.reshape(-1) for v in reversed(values)]))  # reverse order
    buffer.mul_(3)  # what an in-place allreduce does: the parameters see it
    for p, value in zip(params, values):
        assert torch.allclose(p.detach(), 3 * value)
    for p in params:
        p.grad = torch.ones_like(p)
    optimizer.step()  # and the optimizer's updates land in the buffer
    assert torch.allclose(buffer, torch.cat([(3 * v - 0.5).reshape(-1) for v in reversed(values)]))


def test_lars_step_matches_the_trust_ratio_by_hand() -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    cfg = LarsConfig(name="lars", lr=0.5, momentum=0.0, weight_decay=0.01, trust_coefficient=0.0025)
    optimizer = build_optimizer(cfg, [{"params": list(model.parameters())}])
    model(torch.randn(8, 4)).pow(2).mean().backward()
    w, g = model.weight.detach().clone(), model.weight.grad.clone()
    b, gb = model.bias.detach().clone(), model.bias.grad.clone()
    optimizer.step()
    trust = 0.0025 * w.norm() / (g.norm() + 0.01 * w.norm() + 1e-8)
    assert torch.allclose(model.weight, w - 0.5 * trust * (g + 0.01 * w), atol=1e-7)
    assert torch.allclose(model.bias, b - 0.5 * gb, atol=1e-7)  # biases: neither adapted nor decayed


def test_micro_batches_accumulate_to_the_full_batch_gradient() -> None:
    """comm_interval = c: c micro-batches of B give the step of one batch of c*B (no BatchNorm here)."""
    from dlcomm.algorithms.base import Algorithm
    from dlcomm.train.loop import cross_entropy_loss, hooked_step

    torch.manual_seed(0)
    inputs, labels = torch.randn(24, 5), torch.randint(0, 3, (24,))
    results = []
    for micro_batches in (1, 3):
        torch.manual_seed(1)
        model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        algorithm = Algorithm.__new__(Algorithm)
        algorithm.accumulating = False
        loss = hooked_step(algorithm, model, optimizer, cross_entropy_loss, inputs, labels, 0, micro_batches)
        results.append((float(loss), torch.cat([p.detach().reshape(-1) for p in model.parameters()])))
    assert results[0][0] == pytest.approx(results[1][0], abs=1e-6)
    assert torch.allclose(results[0][1], results[1][1], atol=1e-6)


def test_plan_steps_counts_optimizer_steps_of_comm_interval_micro_batches() -> None:
    train = TrainConfig(epochs=2, batch_size=16, comm_interval=4, max_steps=-1)
    assert plan_steps(train, 6400, 4) == ((6400 // 4) // 64, 2 * 25)


def _final_params(overrides: list[str], run_dir) -> dict:
    """One worker's final parameters after training ``overrides`` through the real rank code."""
    from dlcomm.compose import compose
    from dlcomm.data import build_dataset
    from dlcomm.launch.harness import run_ranks
    from dlcomm.spec import RunSpec

    import rank_programs

    cfg = compose([*rank_programs.FEW_STEPS_JOB, "dataset.train_size=64", "model.hidden=[16]", *overrides])
    spec = RunSpec.from_config(cfg, tracking_uri="").with_run("test", run_dir)
    run_dir.mkdir(parents=True)
    [result] = run_ranks(rank_programs.train_untracked, 1, spec, build_dataset(cfg.dataset), in_process="serial")
    return result["params"]


def test_the_training_loop_steps_the_schedule_after_every_optimizer_step(tmp_path) -> None:
    """multistep with a milestone at epoch 1 and a decay that rounds every update to nothing:
    the second epoch must leave the parameters where the first left them (a loop that did not
    step the schedule would train the second epoch at the full rate)."""
    schedule = ["optim.schedule=multistep", "optim.milestones=[1]", "optim.gamma=1e-30"]
    one_epoch = _final_params([*schedule, "train.epochs=1"], tmp_path / "one")
    two_epochs = _final_params([*schedule, "train.epochs=2"], tmp_path / "two")
    assert one_epoch.keys() == two_epochs.keys()
    for name in one_epoch:
        assert torch.equal(one_epoch[name], two_epochs[name]), name
    moved = _final_params(["train.epochs=2"], tmp_path / "constant")  # the same run without the decay moves on
    assert any(not torch.equal(one_epoch[name], moved[name]) for name in one_epoch)
