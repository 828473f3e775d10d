"""Knobs whose limits depend on the model or the data, refused before launch in one line (issue 57,
item 7): Streaming DiLoCo's fragments (one layer each at least), the compressors' sizes (a block, a
bucket, a PowerSGD rank) bounded by the model at hand before a rank allocates by them, and data of
fewer than two classes. Each through ``dlcomm train`` in this process: exit 2, one line, no store."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import FAST

ONE = ["launcher=threads", "nodes=2", "model=mlp", "train.max_steps=5", *FAST]  # the outside test run's job
MLP_ENTRIES = 535_818  # model=mlp's trainable parameters on the synthetic 1x28x28 images, 10 classes

ROWS = [
    (
        ["algo=streaming_diloco", "algo.fragments=4"],
        "algo.fragments=4 is invalid: the model has 3 layers with parameters; pass algo.fragments=3 or less",
    ),
    (
        ["algo=diloco", "compress=lowbit", "compress.block_size=1099511627776"],
        f"compress.block_size=1099511627776 is invalid: the model has {MLP_ENTRIES:,} trainable parameters",
    ),
    (
        ["algo=streaming_diloco", "compress=lowbit", f"compress.block_size={MLP_ENTRIES + 1}"],
        f"pass compress.block_size={MLP_ENTRIES} or less, e.g. 128",
    ),
    (
        ["algo=allreduce", "compress=qsgd", "compress.bucket_size=1099511627776"],
        "compress.bucket_size=1099511627776 is invalid: the model has",
    ),
    (
        ["algo=allreduce", "compress=powersgd", "compress.rank=100000"],
        "compress.rank=100000 is invalid: at that rank none of the model's matrices is compressed",
    ),
]


@pytest.mark.parametrize("row,expected", ROWS, ids=[" ".join(row) for row, _ in ROWS])
@pytest.mark.parametrize("sweep", [False, True], ids=["run", "sweep"])
def test_a_limit_that_depends_on_the_model_is_refused_before_launch(home, cli_here, row, expected, sweep) -> None:
    argv = ["train", *ONE, *row] if not sweep else ["train", "-m", *ONE, "seed=1,2", *row]
    result = cli_here(home, *argv)
    lines = [
        line for line in result.stderr.splitlines() if line.strip() and not line.startswith(("sweep: ", "dlcomm: "))
    ]
    errors = [line for line in result.stderr.splitlines() if line.startswith("dlcomm: error: ")]
    assert result.returncode == 2, result.stderr
    assert len(errors) == 1 and expected in errors[0], result.stderr
    assert lines == [] and "Traceback" not in result.stderr, result.stderr
    assert not (home / "results" / "mlflow.db").exists(), "a run was recorded before the refusal"


@pytest.mark.parametrize(
    "row",
    [
        ["algo=streaming_diloco", "algo.fragments=3"],
        ["algo=diloco", "compress=lowbit", f"compress.block_size={MLP_ENTRIES}"],
        ["algo=allreduce", "compress=qsgd", f"compress.bucket_size={MLP_ENTRIES}"],
        ["algo=allreduce", "compress=powersgd", "compress.rank=154"],
    ],
    ids=lambda row: " ".join(row),
)
def test_the_limits_themselves_check_out(home, monkeypatch, row) -> None:
    """Each bound is the model's own: at the limit the pre-launch check passes."""
    from dlcomm.compose import compose
    from dlcomm.run import check_runnable

    monkeypatch.setenv("DLCOMM_HOME", str(home))
    check_runnable(compose([*ONE, *row]))


def _one_class(home: Path) -> Path:
    import numpy as np
    from PIL import Image

    root = home / "images"
    for folder in ("train/ant", "val/ant"):
        (root / folder).mkdir(parents=True)
        Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)).save(root / folder / "0.png")
    return root


def test_an_imagefolder_of_one_class_is_refused_before_launch(home, cli_here) -> None:
    """It trained to "test accuracy 100.00%": every prediction of a one-class classifier is right."""
    argv = ["train", "dataset=imagefolder", f"dataset.root={_one_class(home)}", "dataset.image_size=32"]
    result = cli_here(home, *argv, "dataset.loader_workers=0", "train.max_steps=2", "nodes=1", "train.batch_size=1")
    errors = [line for line in result.stderr.splitlines() if line.startswith("dlcomm: error: ")]
    assert result.returncode == 2, result.stderr
    assert len(errors) == 1 and "has one class folder (ant)" in errors[0] and "at least 2" in errors[0], result.stderr
    assert not (home / "results" / "mlflow.db").exists()


def test_any_source_of_fewer_than_two_classes_is_refused(monkeypatch) -> None:
    """The rule is the data set's, not imagefolder's: a source (a plugin's) that counts one class."""
    import dlcomm.data as data
    from dlcomm.data.synthetic import SyntheticConfig
    from dlcomm.errors import UserError

    class OneClass:
        @classmethod
        def shape(cls, cfg):
            return (1, 28, 28), 1

    monkeypatch.setattr(data.SOURCES, "get", lambda name: OneClass)
    with pytest.raises(UserError, match=r"^dataset=synthetic has 1 class, and a classifier of fewer than 2"):
        data.dataset_shape(SyntheticConfig(name="synthetic"))
