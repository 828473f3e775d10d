"""MNIST and Fashion-MNIST from the four idx files (gzip-compressed or not)."""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from typing import BinaryIO, Optional, Tuple

import numpy as np
import torch

from dlcomm.data.base import InMemoryImageData
from dlcomm.errors import UserError

FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
_UBYTE = 0x08


@dataclass(frozen=True)
class IdxSource:
    """What tells MNIST-like data sets apart: name, default root, statistics and where to get it."""

    name: str
    title: str
    folder: str  # torchvision's folder name: <root>/<folder>/raw
    default_root: str
    mean: float
    std: float
    how_to_get: str


FASHION_MNIST = IdxSource(
    name="fashion_mnist",
    title="Fashion-MNIST",
    folder="FashionMNIST",
    default_root="/usr/share/datasets/fashion-mnist",
    mean=0.2860,
    std=0.3530,
    how_to_get="install Debian's dataset-fashion-mnist (apt-get install dataset-fashion-mnist) or",
)
MNIST = IdxSource(
    name="mnist",
    title="MNIST",
    folder="MNIST",
    default_root="",
    mean=0.1307,
    std=0.3081,
    how_to_get="",
)
SOURCES = {s.name: s for s in (FASHION_MNIST, MNIST)}


def resolve_root(source: IdxSource, root: str) -> str:
    """``root`` when set, else the source's default root (empty when it has none)."""
    return root or source.default_root


def candidate_dirs(root: str, source: IdxSource) -> Tuple[str, ...]:
    """Folders searched for the idx files, in order: root, root/raw, root/<Folder>/raw."""
    return (root, os.path.join(root, "raw"), os.path.join(root, source.folder, "raw"))


def find_file(root: str, source: IdxSource, stem: str) -> Optional[str]:
    """Path of ``stem.gz`` or ``stem`` in the first candidate folder holding one, else None."""
    for folder in candidate_dirs(root, source):
        for name in (stem + ".gz", stem):
            path = os.path.join(folder, name)
            if os.path.isfile(path):
                return path
    return None


def _fix(source: IdxSource) -> str:
    """The end of every error message: how to get the files."""
    lead = f"{source.how_to_get} set" if source.how_to_get else "set"
    return (
        f"{lead} dataset.root to a folder holding {FILES[0]}.gz and the three other "
        f"{source.title} files (gzip-compressed or not, also found in raw/ or {source.folder}/raw/)"
    )


def check(source: IdxSource, root: str) -> None:
    """Raise a one-line :class:`UserError` unless the four idx files can be found; reads nothing."""
    root = resolve_root(source, root)
    if not root:
        raise UserError(f"dataset.root is empty for dataset.name={source.name}: {_fix(source)}")
    if not os.path.isdir(root):
        raise UserError(f"dataset.root={root} does not exist: {_fix(source)}")
    missing = [stem for stem in FILES if find_file(root, source, stem) is None]
    if missing:
        raise UserError(f"dataset.root={root} lacks {', '.join(m + '.gz' for m in missing)}: {_fix(source)}")


def _open(path: str) -> BinaryIO:
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")  # type: ignore[return-value]


def _read_exact(stream: BinaryIO, size: int, path: str) -> bytearray:
    """Exactly ``size`` bytes of ``stream`` in a fresh (writable) bytearray."""
    buffer = bytearray(size)
    view = memoryview(buffer)
    filled = 0
    while filled < size:
        got = stream.readinto(view[filled:])  # type: ignore[attr-defined]
        if not got:
            raise UserError(f"{path} is truncated: expected {size} data bytes, got {filled}")
        filled += got
    return buffer


def read_idx(path: str) -> torch.Tensor:
    """The uint8 array stored in idx file ``path``, with the shape its header gives.

    Raises :class:`UserError` when the file is not an unsigned-byte idx file or is truncated.
    """
    with _open(path) as stream:
        head = stream.read(4)
        if len(head) != 4 or head[0] != 0 or head[1] != 0 or head[2] != _UBYTE:
            raise UserError(f"{path} is not an unsigned-byte idx file: bad magic number")
        ndim = head[3]
        dims = tuple(int(d) for d in np.frombuffer(stream.read(4 * ndim), dtype=">u4"))
        if len(dims) != ndim:
            raise UserError(f"{path} is truncated in its header")
        data = _read_exact(stream, int(np.prod(dims, dtype=np.int64)), path)
    return torch.frombuffer(data, dtype=torch.uint8).view(dims)


def count(path: str) -> int:
    """The number of items an idx file holds (its first dimension), read from its header."""
    with _open(path) as stream:
        head = stream.read(8)
    if len(head) != 8 or head[:3] != bytes((0, 0, _UBYTE)):
        raise UserError(f"{path} is not an unsigned-byte idx file: bad magic number")
    return int.from_bytes(head[4:8], "big")


def sizes(source: IdxSource, root: str) -> Tuple[int, int]:
    """``(training images, test images)`` from the label files' headers, after :func:`check`."""
    check(source, root)
    root = resolve_root(source, root)
    return count(find_file(root, source, FILES[1])), count(find_file(root, source, FILES[3]))  # type: ignore[arg-type]


def _load_split(root: str, source: IdxSource, images_stem: str, labels_stem: str) -> Tuple[torch.Tensor, torch.Tensor]:
    images_path = find_file(root, source, images_stem)
    labels_path = find_file(root, source, labels_stem)
    assert images_path is not None and labels_path is not None  # check() ran first
    images = read_idx(images_path)
    labels = read_idx(labels_path).to(torch.int64)
    if images.dim() != 3 or labels.dim() != 1 or len(images) != len(labels):
        raise UserError(
            f"{images_path} and {labels_path} do not match: image shape {tuple(images.shape)}, "
            f"label shape {tuple(labels.shape)}"
        )
    return images.unsqueeze(1), labels


def load(source: IdxSource, root: str) -> InMemoryImageData:
    """The data set ``source`` read from ``root`` (or its default root): uint8 images (N,1,28,28)
    held in memory, 10 classes, batches normalised with the source's mean and std."""
    check(source, root)
    root = resolve_root(source, root)
    train = _load_split(root, source, FILES[0], FILES[1])
    test = _load_split(root, source, FILES[2], FILES[3])
    return InMemoryImageData(train, test, num_classes=10, mean=[source.mean], std=[source.std])
