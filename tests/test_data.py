"""Tests of dlcomm.data: the per-epoch partition and the data sets."""

from __future__ import annotations

import gzip
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from dlcomm.config.schema import DatasetConfig
from dlcomm.data import (
    ImageClassificationData,
    build_dataset,
    check_dataset,
    dataset_shape,
    epoch_partition,
    epoch_permutation,
)
from dlcomm.data.cifar import CifarConfig, random_crop_flip
from dlcomm.data.imagefolder import ImageFolderConfig
from dlcomm.data.mnist import IdxDatasetConfig
from dlcomm.data.synthetic import SyntheticConfig
from dlcomm.errors import UserError

FMNIST_ROOT = "/usr/share/datasets/fashion-mnist"


# ---------------------------------------------------------------- partition


@pytest.mark.parametrize("num_samples, world_size", [(1003, 4), (1000, 4), (17, 16), (5, 1)])
def test_partitions_are_disjoint_equal_and_cover_the_truncated_permutation(num_samples, world_size):
    parts = [epoch_partition(num_samples, world_size, r, seed=3, epoch=2) for r in range(world_size)]
    total = num_samples - num_samples % world_size
    assert all(p.dtype == torch.int64 for p in parts)
    assert {len(p) for p in parts} == {total // world_size}
    joined = torch.cat(parts)
    assert len(set(joined.tolist())) == total  # disjoint
    perm = epoch_permutation(num_samples, seed=3, epoch=2)
    assert set(joined.tolist()) == set(perm[:total].tolist())
    assert sorted(perm.tolist()) == list(range(num_samples))


def test_partition_is_identical_across_calls_and_reshuffled_across_epochs_and_seeds():
    a = epoch_partition(1000, 4, 2, seed=7, epoch=5)
    assert torch.equal(a, epoch_partition(1000, 4, 2, seed=7, epoch=5))
    assert not torch.equal(a, epoch_partition(1000, 4, 2, seed=7, epoch=6))
    assert not torch.equal(a, epoch_partition(1000, 4, 2, seed=8, epoch=5))


def test_union_of_rank_batches_is_the_single_worker_batch():
    n, b, num_samples = 4, 16, 1000  # 1000 is not a multiple of n*b: the tails must agree too
    parts = [epoch_partition(num_samples, n, r, seed=1, epoch=3) for r in range(n)]
    single = epoch_partition(num_samples, 1, 0, seed=1, epoch=3)
    steps = ImageClassificationData.num_train_batches(len(parts[0]), b)
    assert steps == ImageClassificationData.num_train_batches(len(single), b * n) == num_samples // (b * n)
    for t in range(steps):
        union = set(torch.cat([p[t * b : (t + 1) * b] for p in parts]).tolist())
        assert union == set(single[t * b * n : (t + 1) * b * n].tolist())


def test_partition_rejects_bad_rank():
    with pytest.raises(ValueError):
        epoch_partition(10, 2, 2, seed=0, epoch=0)


# ---------------------------------------------------------------- MNIST-like


@pytest.mark.skipif(
    not os.path.isfile(os.path.join(FMNIST_ROOT, "train-images-idx3-ubyte.gz")),
    reason="needs Debian's dataset-fashion-mnist (apt-get install dataset-fashion-mnist)",
)
def test_fashion_mnist_loads_from_the_debian_package():
    cfg = IdxDatasetConfig(name="fashion_mnist")
    check_dataset(cfg)
    assert dataset_shape(cfg) == ((1, 28, 28), 10)
    data = build_dataset(cfg)
    assert (data.train_size, data.test_size) == (60000, 10000)
    assert data.input_shape == (1, 28, 28) and data.num_classes == 10
    assert data.train_images.dtype == torch.uint8  # one byte per pixel in memory
    assert set(data.train_labels.unique().tolist()) == set(range(10))
    assert set(data.test_labels.unique().tolist()) == set(range(10))
    indices = epoch_partition(data.train_size, 4, 0, seed=0, epoch=0)
    batches = data.train_batches(indices, 512, seed=0)
    x, y = next(batches)
    assert x.shape == (512, 1, 28, 28) and x.dtype == torch.float32
    assert y.shape == (512,) and y.dtype == torch.int64
    assert torch.equal(y, data.train_labels[indices[:512]])
    assert abs(x.mean().item()) < 0.1 and abs(x.std().item() - 1.0) < 0.1
    sizes = [len(y) for _, y in data.test_batches(3000)]
    assert sizes == [3000, 3000, 3000, 1000]


def _write_idx(path: Path, array: np.ndarray, compress: bool) -> None:
    header = bytes([0, 0, 0x08, array.ndim]) + np.asarray(array.shape, dtype=">u4").tobytes()
    payload = header + array.astype(np.uint8).tobytes()
    if compress:
        with gzip.open(path.with_name(path.name + ".gz"), "wb") as f:
            f.write(payload)
    else:
        path.write_bytes(payload)


def test_mnist_reads_uncompressed_idx_files_in_a_torchvision_raw_folder(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    train_x, test_x = rng.integers(0, 256, (12, 28, 28)), rng.integers(0, 256, (5, 28, 28))
    train_y, test_y = np.arange(12) % 10, np.arange(5)
    _write_idx(raw / "train-images-idx3-ubyte", train_x, compress=False)
    _write_idx(raw / "train-labels-idx1-ubyte", train_y, compress=True)
    _write_idx(raw / "t10k-images-idx3-ubyte", test_x, compress=False)
    _write_idx(raw / "t10k-labels-idx1-ubyte", test_y, compress=False)
    data = build_dataset(IdxDatasetConfig(name="mnist", root=str(tmp_path)))
    assert (data.train_size, data.test_size) == (12, 5)
    x, y = next(data.train_batches(torch.tensor([3, 1, 4, 0]), 4, seed=0))
    expected = (torch.from_numpy(train_x[[3, 1, 4, 0]]).float() / 255 - 0.1307) / 0.3081
    assert torch.allclose(x[:, 0], expected, atol=1e-5)
    assert y.tolist() == [3, 1, 4, 0]
    assert [len(y) for _, y in data.test_batches(2)] == [2, 2, 1]
    assert len(list(data.train_batches(torch.arange(12), 5, seed=0))) == 2  # last partial dropped


def test_check_dataset_names_the_missing_root(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(UserError) as info:
        check_dataset(IdxDatasetConfig(name="fashion_mnist", root=str(missing)))
    message = str(info.value)
    assert str(missing) in message and "dataset.root" in message and "\n" not in message
    assert "dataset-fashion-mnist" in message and "train-images-idx3-ubyte.gz" in message


def test_check_dataset_names_missing_files_and_unknown_names(tmp_path):
    with pytest.raises(UserError, match="dataset.root=.*lacks"):
        check_dataset(IdxDatasetConfig(name="mnist", root=str(tmp_path)))
    with pytest.raises(UserError, match="dataset.root is empty"):
        check_dataset(IdxDatasetConfig(name="mnist"))
    with pytest.raises(UserError, match="cifar-10-batches-py") as info:
        check_dataset(CifarConfig(name="cifar10", root=str(tmp_path)))
    assert str(tmp_path) in str(info.value)
    with pytest.raises(UserError, match="dataset.name=imagenet_typo"):
        check_dataset(DatasetConfig(name="imagenet_typo"))
    with pytest.raises(UserError, match="dataset.val_dir"):
        (tmp_path / "train" / "a").mkdir(parents=True)
        check_dataset(ImageFolderConfig(name="imagefolder", root=str(tmp_path)))


# ---------------------------------------------------------------- synthetic


def test_synthetic_is_deterministic_and_index_addressed():
    cfg = SyntheticConfig(name="synthetic", shape=[3, 32, 32], num_classes=10, train_size=4096, test_size=256)
    assert dataset_shape(cfg) == ((3, 32, 32), 10)
    a, b = build_dataset(cfg), build_dataset(cfg)
    idx = torch.tensor([5, 900, 17, 4095, 2, 33, 64, 1000])
    xa, ya = next(a.train_batches(idx, 8, seed=0))
    xb, yb = next(b.train_batches(idx, 8, seed=123))
    assert xa.shape == (8, 3, 32, 32) and xa.dtype == torch.float32 and ya.dtype == torch.int64
    assert torch.equal(xa, xb) and torch.equal(ya, yb)
    # the same index gives the same sample whatever batch it lands in
    x1, y1 = next(a.train_batches(torch.tensor([17]), 1, seed=9))
    assert torch.equal(x1[0], xa[2]) and y1[0] == ya[2]
    # test split differs from the train split
    xt, _ = next(a.test_batches(8, torch.tensor([5])))
    assert not torch.equal(xt[0], xa[0])
    assert [len(y) for _, y in a.test_batches(100)] == [100, 100, 56]


def test_synthetic_labels_follow_the_teacher_and_use_every_class():
    data = build_dataset(
        SyntheticConfig(name="synthetic", shape=[1, 8, 8], num_classes=4, train_size=512, test_size=64)
    )
    x, y = next(data.train_batches(torch.arange(512), 512, seed=0))
    assert torch.equal(y, (x.flatten(1) @ data.teacher.T).argmax(1))
    counts = torch.bincount(y, minlength=4)
    assert counts.min() > 512 / 4 / 2  # roughly balanced, so learnable and not trivial
    assert abs(x.mean().item()) < 0.05 and abs(x.std().item() - 1) < 0.05


# ---------------------------------------------------------------- CIFAR


def _write_cifar10(root: Path, per_batch: int = 6, test: int = 5) -> None:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(1)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for name in names:
        n = test if name == "test_batch" else per_batch
        entry = {"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), "labels": rng.integers(0, 10, n).tolist()}
        with open(folder / name, "wb") as f:
            pickle.dump(entry, f)
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({"label_names": [f"c{i}" for i in range(10)]}, f)


def test_cifar_loads_the_torchvision_pickle_layout(tmp_path):
    _write_cifar10(tmp_path)
    data = build_dataset(CifarConfig(name="cifar10", root=str(tmp_path), augment=False))
    assert (data.train_size, data.test_size, data.num_classes) == (30, 5, 10)
    assert data.input_shape == (3, 32, 32) and data.train_images.dtype == torch.uint8
    with open(tmp_path / "cifar-10-batches-py" / "data_batch_2", "rb") as f:
        entry = pickle.load(f)
    x, y = next(data.train_batches(torch.tensor([6, 7]), 2, seed=0))  # first two of batch 2
    raw = torch.from_numpy(entry["data"][:2].reshape(2, 3, 32, 32)).float() / 255
    mean = torch.tensor([0.4914, 0.4822, 0.4465]).view(3, 1, 1)
    std = torch.tensor([0.2470, 0.2435, 0.2616]).view(3, 1, 1)
    assert torch.allclose(x, (raw - mean) / std, atol=1e-5)
    assert y.tolist() == entry["labels"][:2]


def test_cifar_augmentation_is_deterministic_for_a_fixed_seed(tmp_path):
    _write_cifar10(tmp_path)
    data = build_dataset(CifarConfig(name="cifar10", root=str(tmp_path), augment=True))
    idx = epoch_partition(data.train_size, 1, 0, seed=0, epoch=0)

    def run(seed):
        return [x for x, _ in data.train_batches(idx, 8, seed=seed)]

    first, again, other = run(5), run(5), run(6)
    assert len(first) == 3
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not all(torch.equal(a, b) for a, b in zip(first, other))
    plain = build_dataset(CifarConfig(name="cifar10", root=str(tmp_path), augment=False))
    assert not torch.equal(first[0], next(plain.train_batches(idx, 8, seed=5))[0])


def test_random_crop_flip_gives_a_crop_of_the_padded_image_possibly_mirrored():
    images = torch.randint(0, 256, (6, 3, 32, 32), dtype=torch.uint8)
    out = random_crop_flip(images, torch.Generator().manual_seed(0))
    assert out.shape == images.shape and out.dtype == torch.uint8
    padded = torch.nn.functional.pad(images, (4, 4, 4, 4))
    for img, result in zip(padded, out):
        crops = [img[:, i : i + 32, j : j + 32] for i in range(9) for j in range(9)]
        assert any(torch.equal(result, c) or torch.equal(result, c.flip(-1)) for c in crops)


# ---------------------------------------------------------------- image folders


def _write_folder(root: Path) -> None:
    from PIL import Image

    rng = np.random.default_rng(2)
    for split, classes in (("train", ("ant", "bee", "cat")), ("val", ("ant", "cat"))):
        for name in classes:
            (root / split / name).mkdir(parents=True)
            for k in range(2):
                pixels = rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(root / split / name / f"{k}.png")


def test_imagefolder_shapes_labels_and_seeded_augmentation(tmp_path):
    _write_folder(tmp_path)
    cfg = ImageFolderConfig(name="imagefolder", root=str(tmp_path), image_size=16, augment=True, loader_workers=0)
    assert dataset_shape(cfg) == ((3, 16, 16), 3)
    data = build_dataset(cfg)
    assert (data.train_size, data.test_size, data.num_classes) == (6, 4, 3)
    idx = torch.tensor([5, 0, 3, 1])
    ((x1, y1),) = list(data.train_batches(idx, 3, seed=4))  # 4 // 3: one batch
    ((x2, _),) = list(data.train_batches(idx, 3, seed=4))
    assert x1.shape == (3, 3, 16, 16) and x1.dtype == torch.float32
    assert y1.tolist() == [2, 0, 1] and torch.equal(x1, x2)
    labels = torch.cat([y for _, y in data.test_batches(3)])
    assert labels.tolist() == [0, 0, 2, 2]  # val lacks "bee": labels still follow train's classes


# ---------------------------------------------------------------- data that is not what it claims (issue 34 class 4)


def _write_mnist(root: Path) -> None:
    rng = np.random.default_rng(3)
    _write_idx(root / "train-images-idx3-ubyte", rng.integers(0, 256, (12, 28, 28)), compress=True)
    _write_idx(root / "train-labels-idx1-ubyte", np.arange(12) % 10, compress=True)
    _write_idx(root / "t10k-images-idx3-ubyte", rng.integers(0, 256, (5, 28, 28)), compress=True)
    _write_idx(root / "t10k-labels-idx1-ubyte", np.arange(5), compress=True)


def _idx_bytes(array: np.ndarray, dims: tuple[int, ...] | None = None) -> bytes:
    dims = array.shape if dims is None else dims
    return bytes([0, 0, 0x08, array.ndim]) + np.asarray(dims, dtype=">u4").tobytes() + array.astype(np.uint8).tobytes()


def _cut(path: Path, keep: int) -> None:
    path.write_bytes(path.read_bytes()[:keep])


TRAIN_IMAGES, TRAIN_LABELS = "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"
TEST_IMAGES, TEST_LABELS = "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"
BAD_IDX = {  # what is done to a good set of four files -> (the file named, what the line says)
    "a label file that is not gzip": (
        lambda r: (r / TRAIN_LABELS).write_bytes(b"not gzip at all\n" * 4),
        TRAIN_LABELS,
        "is not gzip-compressed although its name ends in .gz",
    ),
    "a truncated gzip image file": (
        lambda r: _cut(r / TRAIN_IMAGES, len((r / TRAIN_IMAGES).read_bytes()) - 200),
        TRAIN_IMAGES,
        "is truncated",
    ),
    "a truncated plain image file": (
        lambda r: (
            (r / TEST_IMAGES).unlink(),
            (r / "t10k-images-idx3-ubyte").write_bytes(_idx_bytes(np.zeros((5, 28, 28)))[:-784]),
        ),
        "t10k-images-idx3-ubyte",
        "is truncated: its header announces 5 images of 28x28 (3936 bytes), it holds 3152",
    ),
    "a header claiming 4e9 images": (
        lambda r: (r / TRAIN_IMAGES).write_bytes(
            gzip.compress(_idx_bytes(np.zeros((1, 28, 28)), (4_000_000_000, 28, 28)))
        ),
        TRAIN_IMAGES,
        "its header announces 4000000000 images of 28x28",
    ),
    "labels of 200 for 10 classes": (
        lambda r: (r / TEST_LABELS).write_bytes(gzip.compress(_idx_bytes(np.array([1, 2, 200, 3, 4])))),
        TEST_LABELS,
        "holds label 200 at index 2: MNIST has 10 classes",
    ),
    "a bad magic number": (
        lambda r: (r / TEST_IMAGES).write_bytes(gzip.compress(b"\x00\x00\x0d\x03" + bytes(64))),
        TEST_IMAGES,
        "is not an unsigned-byte idx file: bad magic number",
    ),
    "more images than labels": (
        lambda r: (r / TRAIN_LABELS).write_bytes(gzip.compress(_idx_bytes(np.arange(11) % 10))),
        TRAIN_IMAGES,
        "holds 12 images but",
    ),
    "trailing bytes": (
        lambda r: (r / TEST_LABELS).write_bytes(gzip.compress(_idx_bytes(np.arange(5)) + b"xyz")),
        TEST_LABELS,
        "is longer than its header says",
    ),
    "images of 32x32": (
        lambda r: (r / TEST_IMAGES).write_bytes(gzip.compress(_idx_bytes(np.zeros((5, 32, 32))))),
        TEST_IMAGES,
        "holds images of 32x32 pixels, not 28x28",
    ),
}


@pytest.mark.parametrize("damage, named, expected", BAD_IDX.values(), ids=list(BAD_IDX))
def test_idx_files_that_are_not_what_they_claim_are_refused_before_launch_in_one_line(
    tmp_path, damage, named, expected
):
    _write_mnist(tmp_path)
    damage(tmp_path)
    with pytest.raises(UserError) as info:
        check_dataset(IdxDatasetConfig(name="mnist", root=str(tmp_path)))
    message = str(info.value)
    assert str(tmp_path / named) in message and expected in message and "\n" not in message, message
    assert "replace" in message  # and the fix


def test_an_idx_file_damaged_inside_its_gzip_stream_is_named_when_a_rank_reads_it(tmp_path):
    """The headers and the gzip trailer are fine, so the check before launch passes: the damage
    shows when the data is decoded, and the rank says which file in one line."""
    _write_mnist(tmp_path)
    path = tmp_path / TRAIN_IMAGES
    data = bytearray(path.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = bytes(64)  # the middle of the deflate stream, not the trailer
    path.write_bytes(bytes(data))
    cfg = IdxDatasetConfig(name="mnist", root=str(tmp_path))
    check_dataset(cfg)
    with pytest.raises(UserError) as info:
        build_dataset(cfg)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def _write_bad_folder(root: Path, what: str) -> Path:
    _write_folder(root)
    if what == "empty class folder":
        for image in (root / "train" / "bee").iterdir():
            image.unlink()
        (root / "train" / "bee" / "notes.txt").write_text("no images here\n")
        return root / "train" / "bee"
    bad = root / "train" / "bee" / "0.png"
    bad.write_text("this is text, not a PNG\n")
    return bad


@pytest.mark.parametrize(
    "what, expected", [("empty class folder", "holds no image"), ("text image", "is not an image PIL can read")]
)
def test_an_image_folder_with_an_empty_class_or_a_text_image_is_refused_before_launch(tmp_path, what, expected):
    named = _write_bad_folder(tmp_path, what)
    with pytest.raises(UserError) as info:
        check_dataset(ImageFolderConfig(name="imagefolder", root=str(tmp_path)))
    assert str(named) in str(info.value) and expected in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("workers", [0, 1])
def test_an_image_that_does_not_decode_is_named_in_one_line_by_the_rank(tmp_path, workers):
    """The first image of each class is checked before launch; a later one that does not decode
    (here a PNG cut short) stops the rank with one line naming it, from a loader worker too."""
    _write_folder(tmp_path)
    bad = tmp_path / "train" / "bee" / "1.png"
    _cut(bad, 40)
    cfg = ImageFolderConfig(
        name="imagefolder", root=str(tmp_path), image_size=16, augment=False, loader_workers=workers
    )
    check_dataset(cfg)
    data = build_dataset(cfg)
    with pytest.raises(UserError) as info:
        list(data.train_batches(torch.arange(6), 2, seed=0))
    message = str(info.value)
    assert message.startswith(f"{bad} does not decode as an image") and "\n" not in message, message
    assert "Traceback" not in message


def test_the_folder_check_knows_the_extensions_imagefolder_loads():
    from torchvision.datasets.folder import IMG_EXTENSIONS

    from dlcomm.data.folder import IMAGE_EXTENSIONS

    assert IMAGE_EXTENSIONS == tuple(IMG_EXTENSIONS)


def test_a_cifar_pickle_that_would_run_code_is_refused_in_one_line_and_runs_nothing(tmp_path):
    """Issue 34 (security): unpickling a batch file from elsewhere ran whatever it named
    (pickle.load); now only numpy's array reconstruction may be named."""
    _write_cifar10(tmp_path)
    witness = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {witness}",))

    with open(tmp_path / "cifar-10-batches-py" / "test_batch", "wb") as f:
        pickle.dump({"data": Payload(), "labels": [0]}, f, protocol=2)
    with pytest.raises(UserError, match=r"test_batch is not a CIFAR batch of the python version \(it names .*system"):
        build_dataset(CifarConfig(name="cifar10", root=str(tmp_path), augment=False))
    assert not witness.exists()


def test_cifar_loads_python_2_protocol_2_pickles(tmp_path):
    """The published files are Python 2 pickles (protocol 2, byte strings): the allow-list covers them."""
    _write_cifar10(tmp_path)
    folder = tmp_path / "cifar-10-batches-py"
    rng = np.random.default_rng(2)
    data = rng.integers(0, 256, (5, 3072), dtype=np.uint8)
    with open(folder / "test_batch", "wb") as f:
        pickle.dump(
            {
                "data": data,
                "labels": [1, 2, 3, 4, 5],
                "batch_label": "testing batch 1 of 1",
                "filenames": [b"a.png"] * 5,
            },
            f,
            protocol=2,
        )
    loaded = build_dataset(CifarConfig(name="cifar10", root=str(tmp_path), augment=False))
    assert loaded.test_size == 5
