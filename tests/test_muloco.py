"""MuLoCo (``algo=muloco``: DiLoCo with ``optim=muon``, arXiv 2505.23725) and the ``muon`` optimizer.

1. ``optim=muon``'s step, in float64, is torch's own: ``torch.optim.Muon`` on the hidden 2-D weights
   and ``torch.optim.AdamW`` on the rest (the first and last weight matrices, the biases), applied by
   hand on the same parameters, over 6 steps, equal bit for bit (the defaults, Nesterov with the
   other learning-rate scalings, and ``io_layers`` putting the first and last matrices on Muon).
2. Its state survives ``state_dict``/``load_state_dict`` (through ``torch.save``) mid-run, and a
   schedule's learning rate reaches both parts.
3. ``algo=muloco`` through the train loop (every rank a thread, ``launcher=threads``) trains (the
   loss of the final replicas on the training set is below the initial model's) and a run
   preempted mid-period (and mid-epoch) and resumed from its checkpoint ends with the
   uninterrupted run's parameters, bit for bit.
4. The preset: ``algo=muloco`` composes DiLoCo's outer loop with ``optim=muon`` and the reference
   config's values; an ``optim=`` on the command line still wins; knobs outside their domain are refused.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dlcomm.algorithms.muloco import MuLoCo
from dlcomm.train.optim import MuonConfig, build_optimizer, build_scheduler
from outer_fixtures import assert_resumed_equal, tiny_mlp

import rank_programs


def _mlp() -> torch.nn.Module:
    """Four weight matrices: the first and last are the input layer and the head."""
    return tiny_mlp(16, 12, 10, 12, 4, dtype=torch.float64)


def _loss(model: torch.nn.Module, step: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(step)
    inputs = torch.randn(8, 16, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, 4, (8,), generator=generator)
    return torch.nn.functional.cross_entropy(model(inputs), labels)


def _by_hand(model: torch.nn.Module, cfg: MuonConfig) -> list[torch.optim.Optimizer]:
    """torch's Muon and AdamW on the split the docs state, written out here."""
    layers = [m for m in model if isinstance(m, torch.nn.Linear)]
    hidden = [m.weight for m in (layers if cfg.io_layers else layers[1:-1])]
    others = [p for p in model.parameters() if all(p is not h for h in hidden)]
    muon = torch.optim.Muon(
        hidden,
        lr=cfg.lr,
        weight_decay=cfg.weight_decay,
        momentum=cfg.momentum,
        nesterov=cfg.nesterov,
        ns_steps=cfg.ns_steps,
        adjust_lr_fn=cfg.adjust_lr_fn,
    )
    adamw = torch.optim.AdamW(
        others,
        lr=cfg.adamw_lr,
        betas=tuple(cfg.adamw_betas),
        eps=cfg.adamw_eps,
        weight_decay=cfg.adamw_weight_decay,
    )
    return [muon, adamw]


CONFIGS = [
    pytest.param({}, id="defaults"),
    pytest.param(
        {"nesterov": True, "momentum": 0.95, "adjust_lr_fn": "original", "ns_steps": 3, "adamw_lr": 0.01},
        id="nesterov-original",
    ),
    pytest.param({"adjust_lr_fn": "match_rms_adamw", "io_layers": True, "weight_decay": 0.1}, id="io-layers"),
]


@pytest.mark.parametrize("knobs", CONFIGS)
def test_the_step_is_torchs_muon_and_adamw_applied_by_hand(knobs: dict) -> None:
    cfg = MuonConfig(name="muon", **knobs)
    ours, theirs = _mlp(), _mlp()
    optimizer = build_optimizer(cfg, [{"params": list(ours.parameters())}])
    by_hand = _by_hand(theirs, cfg)
    for step in range(6):
        optimizer.zero_grad()
        _loss(ours, step).backward()
        optimizer.step()
        for part in by_hand:
            part.zero_grad()
        _loss(theirs, step).backward()
        for part in by_hand:
            part.step()
    for mine, reference in zip(ours.parameters(), theirs.parameters(), strict=True):
        assert torch.equal(mine, reference)
    # the split shows: AdamW alone (torch's, on every parameter) ends elsewhere
    alone = _mlp()
    adamw = torch.optim.AdamW(alone.parameters(), lr=cfg.adamw_lr, betas=tuple(cfg.adamw_betas))
    for step in range(6):
        adamw.zero_grad()
        _loss(alone, step).backward()
        adamw.step()
    assert not torch.equal(ours[2].weight, alone[2].weight)


def test_a_schedule_reaches_both_parts() -> None:
    cfg = MuonConfig(name="muon", schedule="cosine")
    model = _mlp()
    optimizer = build_optimizer(cfg, [{"params": list(model.parameters())}])
    scheduler = build_scheduler(cfg, optimizer, 4, 8)
    for step in range(4):
        optimizer.zero_grad()
        _loss(model, step).backward()
        optimizer.step()
        scheduler.step()
    lrs = {group["rule"]: group["lr"] for group in optimizer.param_groups}
    expected = 0.5 * (1 + np.cos(np.pi * 4 / 8))  # the cosine's factor after 4 of 8 steps
    assert lrs["muon"] == pytest.approx(cfg.lr * expected) and lrs["adamw"] == pytest.approx(cfg.adamw_lr * expected)


def test_the_state_survives_a_checkpoint_mid_run() -> None:
    cfg = MuonConfig(name="muon", nesterov=True)
    straight, split = _mlp(), _mlp()
    one = build_optimizer(cfg, [{"params": list(straight.parameters())}])
    two = build_optimizer(cfg, [{"params": list(split.parameters())}])
    for step in range(6):
        for model, optimizer in ((straight, one), (split, two)):
            optimizer.zero_grad()
            _loss(model, step).backward()
            optimizer.step()
        if step == 2:  # split's optimizer replaced by a fresh one loaded from its state (through torch.save)
            import io

            buffer = io.BytesIO()
            torch.save(two.state_dict(), buffer)
            buffer.seek(0)
            two = build_optimizer(cfg, [{"params": list(split.parameters())}])
            two.load_state_dict(torch.load(buffer, weights_only=True))
    for mine, reference in zip(straight.parameters(), split.parameters(), strict=True):
        assert torch.equal(mine, reference)


# ---- 3. through the train loop ---------------------------------------------------------------------

RESUME_STOP_AT = 5  # stopped after 6 of 12 steps: 1 step into the second period of 5, 2 into epoch 2 of 4 steps


def _training_loss(cfg, model: torch.nn.Module) -> float:
    from dlcomm.data import build_dataset

    data = build_dataset(cfg.dataset)
    inputs, labels = next(iter(data.train_batches(torch.arange(256), 256, 0)))
    with torch.no_grad():
        return float(torch.nn.functional.cross_entropy(model(inputs), labels))


def _loss_and_rules(spec, algorithm, model: torch.nn.Module) -> dict:
    """A finished run's training loss before and after, and the optimizer's rules."""
    from dlcomm.data import build_dataset
    from dlcomm.tasks import build_task

    cfg = spec.cfg()
    torch.manual_seed(cfg.seed)
    initial = build_task(cfg).build_model(cfg.model, build_dataset(cfg.dataset))  # as train_until_warned built it
    return {
        "loss": (_training_loss(cfg, initial), _training_loss(cfg, model)),
        "rules": sorted({group["rule"] for group in algorithm.optimizer.param_groups}),
    }


def test_muloco_trains_through_the_loop_and_resumes_mid_period_bit_for_bit(tmp_path) -> None:
    spec = rank_programs.run_spec(["algo=muloco", "algo.period=5", *rank_programs.SMALL_JOB, "seed=5"])
    assert spec.cfg().optim.name == "muon"
    folder = str(tmp_path / "checkpoints")
    results = assert_resumed_equal(spec, folder, RESUME_STOP_AT, MuLoCo, ("theta",), more=_loss_and_rules)
    for rank in results:
        assert rank["straight"]["rules"] == ["adamw", "muon"]
        initial, final = rank["straight"]["loss"]
        assert final < 0.8 * initial, (initial, final)


# ---- 4. the preset and the refusals ------------------------------------------------------------------


def test_the_preset_is_diloco_with_muon_and_the_reference_values() -> None:
    from dlcomm.compose import compose

    cfg = compose(["algo=muloco"])
    assert (cfg.algo.name, cfg.optim.name) == ("muloco", "muon")
    assert (cfg.algo.period, cfg.algo.outer_lr, cfg.algo.outer_momentum, cfg.algo.nesterov) == (30, 0.9, 0.8, True)
    assert (cfg.optim.lr, cfg.optim.momentum, cfg.optim.nesterov, cfg.optim.adjust_lr_fn) == (
        0.044,
        0.9,
        False,
        "spectral_unclamped",
    )
    assert compose(["algo=muloco", "optim=adamw"]).optim.name == "adamw"
    assert compose(["algo=diloco", "optim=muon"]).optim.name == "muon"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("optim.adjust_lr_fn=spectral", "optim.adjust_lr_fn=spectral is invalid"),
        ("optim.ns_steps=0", "optim.ns_steps=0 is invalid"),
        ("optim.momentum=1.0", "optim.momentum=1.0 is invalid"),
        ("optim.adamw_lr=0", "optim.adamw_lr=0.0 is invalid"),
    ],
)
def test_muon_knobs_outside_their_domain_are_refused(override: str, message: str) -> None:
    from dlcomm.compose import compose
    from dlcomm.errors import UserError

    with pytest.raises(UserError, match=f"^{message}"):
        compose(["algo=muloco", override])
