"""The paper-scale presets (``experiment=<paper>_paper``, issue 48 item 4): each composes, passes the
pre-launch checks given its data or names what is missing in one line, and trains 2 steps under
``launcher=threads`` on synthetic data of its data set's shapes."""

from __future__ import annotations

import os
import pickle
import shlex
from pathlib import Path

import pytest

from dlcomm.compose import compose
from dlcomm.errors import UserError
from dlcomm.run import check_runnable

EXPERIMENTS = Path(__file__).parents[1] / "src" / "dlcomm" / "configs" / "experiment"

# preset -> (its data set's image shape and classes, what the 2-step run shrinks on this 2-core CPU).
# Every run keeps the preset's model, input shape, classes, algorithm, world size and network; it shrinks
# the per-worker batch (and the Crossover preset's 42 micro-batches per step to 1) and the test set, and
# evaluates one replica, so that the five runs take well under a minute together.
PAPERS = {
    "crossover_paper": ((3, 224, 224), 1000, ["train.batch_size=1", "train.comm_interval=1"]),
    "layerdrop_paper": ((3, 224, 224), 1000, ["train.batch_size=1"]),
    "node_based_paper": ((3, 32, 32), 10, ["train.batch_size=2"]),
    "sesgd_paper": ((3, 32, 32), 10, ["train.batch_size=2"]),
    "wan_gossip_paper": ((1, 28, 28), 10, ["train.batch_size=4"]),
}


def test_every_paper_preset_is_listed_here() -> None:
    assert sorted(p.stem for p in EXPERIMENTS.glob("*_paper.yaml")) == sorted(PAPERS)


def _first_element(name: str) -> list[str]:
    """The first run of the first sweep the preset's header documents (its launcher arguments included)."""
    from dlcomm.sweep import expand

    text = (EXPERIMENTS / f"{name}.yaml").read_text()
    line = next(line for line in text.splitlines() if "dlcomm train -m" in line)
    return expand([w for w in shlex.split(line.split("dlcomm train", 1)[1]) if w != "-m"])[0]


def _fake_data(root: Path, name: str) -> str:
    """A folder the preset's data check accepts (file names, layouts and headers; never real images)."""
    if name in ("node_based_paper", "sesgd_paper"):  # CIFAR-10: six pickle files
        folder = root / "cifar-10-batches-py"
        folder.mkdir(parents=True)
        for file in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
            (folder / file).write_bytes(pickle.dumps({"data": b"", "labels": []}, protocol=2))
        return str(root)
    if name in ("crossover_paper", "layerdrop_paper"):  # ImageNet: 1,000 synset folders of one image
        import io

        from PIL import Image

        png = io.BytesIO()
        Image.new("RGB", (4, 4)).save(png, format="PNG")
        for split in ("train", "val"):
            for k in range(1000):
                (root / split / f"n{k:08d}").mkdir(parents=True)
                (root / split / f"n{k:08d}" / "a.png").write_bytes(png.getvalue())
        return str(root)
    return ""  # Fashion-MNIST: the preset's own root (Debian's package), checked as it is


@pytest.fixture
def slurm_here(tmp_path, monkeypatch) -> None:
    """An ``sbatch`` (and an ``sinfo`` that lists nothing) on PATH, as on a login node."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sbatch", "sinfo"):
        (bin_dir / tool).write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


@pytest.mark.parametrize("name", sorted(PAPERS))
def test_a_missing_data_set_is_named_in_one_line(name, tmp_path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(UserError) as info:
        check_runnable(compose([*_first_element(name), f"dataset.root={missing}"]))
    message = str(info.value)
    assert "\n" not in message and f"dataset.root={missing}" in message, message
    fix = {"imagefolder": "ILSVRC2012", "cifar10": "cifar-10-python.tar.gz", "fashion_mnist": "dataset-fashion-mnist"}
    assert fix[compose([f"experiment={name}"]).dataset.name] in message, message  # where to get the files


@pytest.mark.parametrize("name", sorted(PAPERS))
def test_the_pre_launch_checks_pass_given_the_data(name, tmp_path, slurm_here) -> None:
    """The header's first run, data in place: it passes, or (a threads preset on a machine without a
    GPU) names the one thing missing, the GPU, in one line."""
    import torch

    root = _fake_data(tmp_path / "data", name)
    cfg = compose([*_first_element(name), *([f"dataset.root={root}"] if root else [])])
    assert cfg.train.device == "cuda"
    try:
        check_runnable(cfg)
    except UserError as error:
        if not root and not os.path.isdir(cfg.dataset.root):  # Fashion-MNIST's package is not installed here
            assert "dataset-fashion-mnist" in str(error) and "\n" not in str(error), error
            return
        assert cfg.launcher.name == "threads" and not torch.cuda.is_available(), error
        assert str(error) == "train.device=cuda is invalid: no CUDA device is visible; use train.device=cpu or auto"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PAPERS))
def test_two_steps_on_synthetic_data_of_the_papers_shapes(name, home, cli_here) -> None:
    shape, classes, shrink = PAPERS[name]
    world = compose([f"experiment={name}"])
    result = cli_here(
        home,
        "train",
        f"experiment={name}",
        "dataset=synthetic",
        f"dataset.shape=[{','.join(map(str, shape))}]",
        f"dataset.num_classes={classes}",
        "dataset.train_size=64",  # 2 steps of every rank (16 ranks x 2 x 2 at most)
        "dataset.test_size=16",  # at least the world size: a rank without a test sample fails (evaluate.py)
        "launcher=threads",
        "train.device=cpu",
        "train.amp=false",  # bf16 autocast on this CPU is no check of the GPU's fp16
        "train.max_steps=2",
        "train.eval_batch_size=8",
        "train.eval_replicas=1",
        "network.compute=measured",  # the simulated clock without profiling a replica first
        *shrink,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert "done:" in result.stdout, result.stdout[-2000:]
    from mlflow.tracking import MlflowClient

    run = MlflowClient(tracking_uri=result.tracking_uri).get_run(result.run_id)
    assert run.data.tags["algo"] == world.algo.name and run.data.tags["model"] == world.model.name
    assert run.data.tags["world_size"] == str(world.nodes * world.workers_per_node)
    assert "final/train_loss" in run.data.metrics
