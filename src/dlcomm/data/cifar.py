"""dataset=cifar10 and cifar100: torchvision's python-pickle folders (nothing is downloaded), with
batch augmentation.

The choices' ``Config`` and registered sources sit beside the code that checks and loads the
files; torch and numpy are imported inside the functions that use them, so composing a
configuration (which imports this module for the schema) loads neither."""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, List, Optional, Tuple

from dlcomm.config.schema import DATA_ROOT, DatasetConfig, doc, domain
from dlcomm.data.registry import register
from dlcomm.data.source import DataSource, root
from dlcomm.errors import UserError

if TYPE_CHECKING:
    import torch

    from dlcomm.data.base import ImageClassificationData, InMemoryImageData

CROP = 32
PADDING = 4


@dataclass(frozen=True)
class CifarSource:
    """Layout and statistics of one CIFAR variant."""

    name: str
    folder: str  # the folder torchvision's archive unpacks to, under root
    train_files: Tuple[str, ...]
    test_files: Tuple[str, ...]
    label_key: str
    num_classes: int
    archive: str
    mean: Tuple[float, float, float]
    std: Tuple[float, float, float]
    train_size: int = 50_000  # both variants: the pickles cannot be counted without loading them
    test_size: int = 10_000


CIFAR10 = CifarSource(
    name="cifar10",
    folder="cifar-10-batches-py",
    train_files=tuple(f"data_batch_{i}" for i in range(1, 6)),
    test_files=("test_batch",),
    label_key="labels",
    num_classes=10,
    archive="https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
    mean=(0.4914, 0.4822, 0.4465),
    std=(0.2470, 0.2435, 0.2616),
)
CIFAR100 = CifarSource(
    name="cifar100",
    folder="cifar-100-python",
    train_files=("train",),
    test_files=("test",),
    label_key="fine_labels",
    num_classes=100,
    archive="https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
    mean=(0.5071, 0.4865, 0.4409),
    std=(0.2673, 0.2564, 0.2762),
)
VARIANTS = {s.name: s for s in (CIFAR10, CIFAR100)}


def data_dir(source: CifarSource, root: str) -> str:
    """``root/<folder>``, or ``root`` itself when it already is that folder (holds the files)."""
    nested = os.path.join(root, source.folder)
    if not os.path.isdir(nested) and os.path.isfile(os.path.join(root, source.train_files[0])):
        return root
    return nested


def _fix(source: CifarSource) -> str:
    return f"place torchvision's {source.folder} folder (unpacked from {source.archive}) under dataset.root"


def check(source: CifarSource, root: str) -> None:
    """Raise a one-line :class:`UserError` unless every pickle file is there; reads nothing."""
    if not root:
        raise UserError(f"dataset.root is empty for dataset.name={source.name}: {_fix(source)}")
    if not os.path.isdir(root):
        raise UserError(f"dataset.root={root} does not exist: {_fix(source)}")
    folder = data_dir(source, root)
    if not os.path.isdir(folder):
        raise UserError(f"dataset.root={root} has no {source.folder} folder: {_fix(source)}")
    missing = [f for f in source.train_files + source.test_files if not os.path.isfile(os.path.join(folder, f))]
    if missing:
        raise UserError(f"dataset.root={root}: {folder} lacks {', '.join(missing)}: {_fix(source)}")
    for name in source.train_files + source.test_files:
        path = os.path.join(folder, name)
        with open(path, "rb") as f:
            opening = f.read(2)
        if len(opening) < 2 or opening[0] != pickle.PROTO[0]:  # protocol 2 and later open with PROTO
            raise UserError(
                f"{path} is not a pickle file (the first bytes of CIFAR's python version are): {_fix(source)}"
            )


# What a CIFAR pickle may name: numpy's array reconstruction (numpy 1 and 2 module paths), and
# _codecs.encode, which Python 2 pickles use for byte strings. Anything else (os.system, eval, ...)
# is refused: unpickling a file from elsewhere must not run its code.
_PICKLE_NAMES = frozenset(
    {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy._core.numeric", "_frombuffer"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
    }
)


class _DataOnlyUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):  # noqa: ANN201 - pickle's signature
        if (module, name) not in _PICKLE_NAMES:
            raise pickle.UnpicklingError(f"it names {module}.{name}, which a CIFAR file never does")
        return super().find_class(module, name)


def _read_pickle(path: str, label_key: str) -> Tuple[torch.Tensor, List[int]]:
    """uint8 images (N,3,32,32) and labels of one pickle file of the torchvision layout; a file
    that is not one is named in one line (:class:`UserError`), and nothing in it is run."""
    import numpy as np
    import torch

    try:
        with open(path, "rb") as f:
            entry = _DataOnlyUnpickler(f, encoding="latin1").load()
        data = np.asarray(entry["data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
        labels = list(entry[label_key])
    except Exception as error:  # noqa: BLE001 - pickle, numpy and key errors: the file is not a CIFAR batch
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise UserError(f"{path} is not a CIFAR batch of the python version ({reason}): replace it") from None
    if len(labels) != len(data):
        raise UserError(f"{path} holds {len(data)} images but {len(labels)} labels")
    return torch.from_numpy(data), labels


def _load_split(folder: str, files: Tuple[str, ...], label_key: str) -> Tuple[torch.Tensor, torch.Tensor]:
    import torch

    from dlcomm.data.base import concat_consuming

    chunks: List[torch.Tensor] = []
    labels: List[int] = []
    for name in files:
        images, file_labels = _read_pickle(os.path.join(folder, name), label_key)
        chunks.append(images)
        labels.extend(file_labels)
        del images
    return concat_consuming(chunks), torch.tensor(labels, dtype=torch.int64)


def random_crop_flip(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Per image: a random 32x32 crop of the image zero-padded by 4 on each side, then a
    horizontal flip with probability 1/2; all draws come from ``generator``.

    ``images`` is uint8 (B,C,H,W); the result is a new tensor of shape (B,C,32,32). The same
    images and generator state give the same result.
    """
    import torch

    b = images.shape[0]
    padded = torch.nn.functional.pad(images, (PADDING, PADDING, PADDING, PADDING))
    span_h = padded.shape[2] - CROP + 1
    span_w = padded.shape[3] - CROP + 1
    top = torch.randint(0, span_h, (b,), generator=generator)
    left = torch.randint(0, span_w, (b,), generator=generator)
    flip = torch.rand(b, generator=generator) < 0.5
    offsets = torch.arange(CROP)
    rows = top[:, None] + offsets  # (B, 32)
    cols = left[:, None] + torch.where(flip[:, None], offsets.flip(0), offsets)  # (B, 32)
    batch = torch.arange(b)[:, None, None]
    # advanced indices split by a slice move to the front: (B, 32, 32, C)
    out = padded[batch, :, rows[:, :, None], cols[:, None, :]]
    return out.permute(0, 3, 1, 2).contiguous()


def load(source: CifarSource, root: str, augment: bool) -> InMemoryImageData:
    """CIFAR variant ``source`` from ``root``: uint8 (N,3,32,32) in memory, normalised per batch
    with the usual CIFAR mean and std; with ``augment``, training batches get
    :func:`random_crop_flip`."""
    from dlcomm.data.base import InMemoryImageData

    check(source, root)
    folder = data_dir(source, root)
    train = _load_split(folder, source.train_files, source.label_key)
    test = _load_split(folder, source.test_files, source.label_key)
    return InMemoryImageData(
        train,
        test,
        num_classes=source.num_classes,
        mean=source.mean,
        std=source.std,
        augment=random_crop_flip if augment else None,
    )


def shape(source: CifarSource) -> Tuple[Tuple[int, int, int], int]:
    """Input shape and number of classes of ``source``."""
    return (3, 32, 32), source.num_classes


@dataclass
class CifarConfig(DatasetConfig):
    """cifar10, cifar100: torchvision's python-pickle folder under ``root`` (nothing is downloaded)."""

    root: str = field(
        default="",
        metadata=domain(anything=DATA_ROOT, doc="the folder holding the pickle folder; set per data set, in its file"),
    )
    augment: bool = field(default=True, metadata=doc("random crop 32 (padding 4) + horizontal flip"))


class CifarData(DataSource[CifarConfig]):
    """A CIFAR variant; ``name`` picks its :class:`CifarSource`."""

    Config = CifarConfig

    @classmethod
    def check(cls, cfg: CifarConfig) -> None:
        check(VARIANTS[cls.name], root(cfg))

    @classmethod
    def shape(cls, cfg: CifarConfig) -> Tuple[Tuple[int, int, int], int]:
        return shape(VARIANTS[cls.name])

    @classmethod
    def classes(cls, cfg: CifarConfig) -> int:
        return VARIANTS[cls.name].num_classes

    @classmethod
    def sizes(cls, cfg: CifarConfig) -> Optional[Tuple[int, int]]:
        source = VARIANTS[cls.name]
        return source.train_size, source.test_size

    @classmethod
    def build(cls, cfg: CifarConfig) -> "ImageClassificationData":
        return load(VARIANTS[cls.name], root(cfg), bool(cfg.augment))


@register
class Cifar10(CifarData):
    name = "cifar10"


@register
class Cifar100(CifarData):
    name = "cifar100"
