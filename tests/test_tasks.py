"""Tasks (classification, the GAN), optimizers by name and mixed precision."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from dlcomm.models.gan import build_acgan
from dlcomm.tasks.gan import GanTask
from dlcomm.train.optim import build_optimizer
from dlcomm.train.precision import Precision

from conftest import FAST, mlflow_run


def _gan_run(seed: int = 0, **knobs) -> SimpleNamespace:
    """The part of a run's configuration a GAN task reads: ``task`` (GanTaskConfig's knobs) and ``seed``."""
    task = {"generator_lr": 0.0, "discriminator_lr": 0.0, "samples_per_class": 3, **knobs}
    return SimpleNamespace(task=SimpleNamespace(**task), seed=seed)


def _gan(seed: int = 0):
    torch.manual_seed(seed)
    return build_acgan(SimpleNamespace(latent_dim=8), (1, 8, 8), 4, [0.3], [0.4])


def _grads(module: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in module.parameters()])


def test_gan_step_gives_each_network_the_gradient_of_its_own_loss() -> None:
    """One backward of L_D + L_G: D receives exactly grad L_D, G exactly grad L_G."""
    model = _gan().eval()  # eval: no dropout, BN on running statistics, so forward passes repeat exactly
    task = GanTask(_gan_run(seed=0))
    images, labels = torch.randn(6, 1, 8, 8), torch.randint(0, 4, (6,))
    torch.manual_seed(5)
    task.loss(model, images, labels).backward()
    d_grad, g_grad = _grads(model.discriminator), _grads(model.generator)

    reference = copy.deepcopy(model)
    generator, discriminator = reference.generator, reference.discriminator
    torch.manual_seed(5)  # the same noise and classes
    noise, fake_labels = torch.randn(6, 8), torch.randint(0, 4, (6,))
    fake = generator(noise, fake_labels)
    real_v, real_c = discriminator(images)
    fake_v, fake_c = discriminator(fake.detach())
    d_loss = 0.25 * (
        F.binary_cross_entropy_with_logits(real_v, torch.ones(6))
        + F.cross_entropy(real_c, labels)
        + F.binary_cross_entropy_with_logits(fake_v, torch.zeros(6))
        + F.cross_entropy(fake_c, fake_labels)
    )
    g_v, g_c = discriminator(fake)
    g_loss = 0.5 * (F.binary_cross_entropy_with_logits(g_v, torch.ones(6)) + F.cross_entropy(g_c, fake_labels))
    d_ref = torch.cat([g.reshape(-1) for g in torch.autograd.grad(d_loss, list(discriminator.parameters()))])
    g_ref = torch.cat([g.reshape(-1) for g in torch.autograd.grad(g_loss, list(generator.parameters()))])

    assert torch.allclose(d_grad, d_ref, atol=1e-6) and torch.allclose(g_grad, g_ref, atol=1e-6)
    assert float(d_ref.abs().sum()) > 0 and float(g_ref.abs().sum()) > 0
    losses = task.take_epoch_losses()
    assert losses["gan_d_loss"] == pytest.approx(float(d_loss)) and losses["gan_g_loss"] == pytest.approx(float(g_loss))
    assert task.take_epoch_losses() == {"gan_d_loss": 0.0, "gan_g_loss": 0.0}  # taken: the sums start again


def test_gan_parameter_groups_are_one_optimizer_per_network() -> None:
    model = _gan()
    groups = GanTask(_gan_run(generator_lr=0.001)).param_groups(model, SimpleNamespace(lr=0.0002))
    optim_cfg = SimpleNamespace(name="adam", lr=0.0002, betas=[0.5, 0.999], eps=1e-8, weight_decay=0.0)
    optimizer = build_optimizer(optim_cfg, groups)
    assert [group["lr"] for group in optimizer.param_groups] == [0.001, 0.0002]
    assert {id(p) for p in optimizer.param_groups[0]["params"]} == {id(p) for p in model.generator.parameters()}
    assert {id(p) for p in optimizer.param_groups[1]["params"]} == {id(p) for p in model.discriminator.parameters()}


def test_generated_images_have_the_datas_range_and_the_grid_one_row_per_class() -> None:
    model = _gan()
    images = model.generator(torch.randn(5, 8), torch.arange(5) % 4)
    low, high = (0 - 0.3) / 0.4, (1 - 0.3) / 0.4  # pixels 0 and 1 after the data's normalisation
    assert images.shape == (5, 1, 8, 8) and float(images.min()) >= low - 1e-6 and float(images.max()) <= high + 1e-6
    grid = GanTask(_gan_run(seed=3)).samples(model)["samples"]
    assert grid.shape == (3, 4 * 10 + 2, 3 * 10 + 2)  # make_grid: 4 rows x 3 columns of 8x8 with 2-pixel padding
    again = GanTask(_gan_run(seed=3)).samples(model)["samples"]
    assert torch.equal(grid, again) and model.training  # fixed noise; the mode is restored


@pytest.mark.parametrize("name", ["sgd", "adam", "adamw", "adabelief", "angulargrad"])
def test_every_optimizer_of_table_iv_fits_a_regression(name) -> None:
    """Each optimizer, built by name, drives a least-squares loss down by 10x in 300 steps."""
    torch.manual_seed(0)
    inputs, weights = torch.randn(64, 5), torch.randn(5, 1)
    targets = inputs @ weights
    model = torch.nn.Linear(5, 1, bias=False)
    cfg = SimpleNamespace(
        name=name,
        lr=0.01,
        momentum=0.9,
        nesterov=False,
        weight_decay=0.0,
        betas=[0.9, 0.999],
        eps=1e-8,
        decoupled_weight_decay=False,
        rectify=False,
        method="cos",
    )
    optimizer = build_optimizer(cfg, [{"params": list(model.parameters())}])
    start = float(F.mse_loss(model(inputs), targets))
    for _ in range(300):
        optimizer.zero_grad()
        F.mse_loss(model(inputs), targets).backward()
        optimizer.step()
    assert float(F.mse_loss(model(inputs), targets)) < start / 10


def test_fp16_loss_scaling_skips_a_step_with_an_infinite_gradient() -> None:
    """GradScaler's path (fp16 on CUDA) checked on the CPU: scaled backward, unscaled step,
    a non-finite gradient skips the step and halves the scale."""
    precision = Precision(True, torch.device("cpu"), "fp16")
    weight = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    scale = precision.scaler.get_scale()
    precision.backward((weight * torch.tensor([1.0, 2.0, 3.0])).sum())
    assert torch.allclose(weight.grad, scale * torch.tensor([1.0, 2.0, 3.0]))  # what the algorithms reduce
    precision.step(optimizer)
    assert torch.allclose(weight.data, torch.tensor([0.9, 0.8, 0.7]))  # the step used the true gradient
    optimizer.zero_grad()
    precision.backward((weight * torch.tensor([1.0, float("inf"), 1.0])).sum())
    precision.step(optimizer)
    assert torch.allclose(weight.data, torch.tensor([0.9, 0.8, 0.7])) and precision.scaler.get_scale() == scale / 2


def test_bf16_autocast_runs_matmuls_in_bf16_on_cpu() -> None:
    precision = Precision(True, torch.device("cpu"))
    assert precision.scaler is None and precision.dtype == torch.bfloat16
    with precision.autocast():
        out = torch.nn.Linear(4, 2)(torch.randn(3, 4))
    assert out.dtype == torch.bfloat16


def test_gan_run_logs_both_losses_per_epoch_and_a_sample_grid(home, cli_here) -> None:
    result = cli_here(
        home,
        "train",
        "task=gan",
        "dataset=synthetic",
        "dataset.shape=[1,12,12]",
        "dataset.train_size=256",
        "dataset.test_size=64",
        "nodes=2",
        "train.epochs=2",
        "train.batch_size=16",
        "task.samples_per_class=4",
        "launcher=threads",
    )
    assert result.returncode == 0, result.stderr
    run = mlflow_run(result)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(result.tracking_uri)
    for key in ("epoch/gan_d_loss", "epoch/gan_g_loss"):
        history = client.get_metric_history(run.info.run_id, key)
        assert sorted(point.step for point in history) == [1, 2] and all(point.value > 0 for point in history)
    assert "discriminator" in result.stdout and "generator" in result.stdout
    # whose accuracy it is: the discriminator's auxiliary classifier, never a bare "test acc"
    assert "discriminator's class accuracy on the test set" in result.stdout and ", test acc " not in result.stdout
    assert "[discriminator's class accuracy on the test set]" in next(
        line for line in result.stdout.splitlines() if line.startswith("done: ")
    )
    assert [a.path for a in client.list_artifacts(run.info.run_id, "samples")] == [
        "samples/epoch_001.png",
        "samples/epoch_002.png",
    ]
    # the loss the loop records is L_D + L_G
    timings = pd.read_csv(result.run_dir / "timings.csv")
    last = {
        key: client.get_metric_history(run.info.run_id, key)[-1].value
        for key in ("epoch/gan_d_loss", "epoch/gan_g_loss")
    }
    assert timings[timings.epoch == 1].loss.mean() == pytest.approx(
        last["epoch/gan_d_loss"] + last["epoch/gan_g_loss"], rel=1e-6
    )


def test_amp_and_every_optimizer_run_through_the_cli(home, cli_here) -> None:
    """`dlcomm train optim=<name>` for the five optimizers of the node-based paper's Table IV, with
    bf16 autocast: every run finishes with a finite loss."""
    result = cli_here(
        home,
        "train",
        "-m",
        *FAST,
        "nodes=1",
        "train.max_steps=4",
        "train.amp=true",
        "launcher=threads",
        "optim=sgd,adam,adamw,adabelief,angulargrad",
    )
    assert result.returncode == 0, result.stderr
    assert "5 of 5 runs finished" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["task=gan", "model=small_cnn"], "task=gan trains model=acgan"),
        (["model=acgan"], "pass task=gan"),
        (["optim=rmsprop"], "optim"),
        (["train.amp=true", "train.amp_dtype=fp16", "algo=ps"], "train.amp_dtype=bf16"),
    ],
)
def test_task_and_precision_errors_are_one_line(home, args, message, cli_here) -> None:
    result = cli_here(home, "train", *FAST, *args)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
