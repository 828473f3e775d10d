"""dataset=mnist and fashion_mnist: the four idx files (gzip-compressed or not).

The choices' ``Config`` and registered sources sit beside the code that checks and reads the
files; torch and numpy are imported inside the functions that use them, so composing a
configuration (which imports this module for the schema) loads neither."""

from __future__ import annotations

import functools
import gzip
import os
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, BinaryIO, Optional, Tuple

from dlcomm.config.schema import DATA_ROOT, DatasetConfig, domain
from dlcomm.data.registry import register
from dlcomm.data.source import DataSource, root
from dlcomm.errors import UserError

if TYPE_CHECKING:
    import torch

    from dlcomm.data.base import ImageClassificationData, InMemoryImageData

FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
_UBYTE = 0x08
_GZIP_MAGIC = b"\x1f\x8b"


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


_FASHION_MNIST = IdxSource(
    name="fashion_mnist",
    title="Fashion-MNIST",
    folder="FashionMNIST",
    default_root="/usr/share/datasets/fashion-mnist",
    mean=0.2860,
    std=0.3530,
    how_to_get="install Debian's dataset-fashion-mnist (apt-get install dataset-fashion-mnist) or",
)
_MNIST = IdxSource(
    name="mnist",
    title="MNIST",
    folder="MNIST",
    default_root="",
    mean=0.1307,
    std=0.3081,
    how_to_get="",
)
VARIANTS = {s.name: s for s in (_FASHION_MNIST, _MNIST)}


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
    """Raise a one-line :class:`UserError` unless the four idx files can be found and are what
    they claim: gzip streams where named ``.gz``, unsigned-byte idx headers (images N x 28 x 28,
    labels N), exactly the bytes their headers announce, as many labels as images and every
    label below 10. Reads the headers, the sizes and the label files, never the images' pixels."""
    root = resolve_root(source, root)
    if not root:
        raise UserError(f"dataset.root is empty for dataset.name={source.name}: {_fix(source)}")
    if not os.path.isdir(root):
        raise UserError(f"dataset.root={root} does not exist: {_fix(source)}")
    missing = [stem for stem in FILES if find_file(root, source, stem) is None]
    if missing:
        raise UserError(f"dataset.root={root} lacks {', '.join(m + '.gz' for m in missing)}: {_fix(source)}")
    for images_stem, labels_stem in ((FILES[0], FILES[1]), (FILES[2], FILES[3])):
        images_path, labels_path = find_file(root, source, images_stem), find_file(root, source, labels_stem)
        assert images_path is not None and labels_path is not None
        images, labels = header(images_path, 3, source), header(labels_path, 1, source)
        if images[1:] != (28, 28):
            raise UserError(
                f"{images_path} holds images of {images[1]}x{images[2]} pixels, not 28x28: {_replace(source)}"
            )
        if images[0] != labels[0]:
            raise UserError(
                f"{images_path} holds {images[0]} images but {labels_path} holds {labels[0]} labels: "
                f"{_replace(source, them=True)}"
            )
        _check_labels(labels_path, source)


def _replace(source: IdxSource, them: bool = False) -> str:
    """The fix of a file (or two) that is not what it claims."""
    return (
        f"replace {'them with the original' if them else 'it with the original'} {source.title} "
        f"file{'s' if them else ''} ({_fix(source)})"
    )


def _open(path: str) -> BinaryIO:
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")  # type: ignore[return-value]


# What a damaged gzip stream raises while it is read: not gzip, cut short, bad data, bad CRC.
_DECODE_ERRORS = (gzip.BadGzipFile, EOFError, zlib.error, OSError)


def _damaged(path: str, error: BaseException, source: IdxSource | None) -> UserError:
    if isinstance(error, EOFError):
        what = "is truncated: its compressed stream ends early"
    else:
        what = f"cannot be decompressed ({type(error).__name__}: {error})"
    fix = _replace(source) if source is not None else "replace it with the original file"
    return UserError(f"{path} {what}: {fix}")


def header(path: str, ndim: int, source: IdxSource | None = None) -> Tuple[int, ...]:
    """The dimensions in idx file ``path``'s header, after checking (without reading its data)
    that a ``.gz`` file is gzip, that the header is an unsigned-byte idx header of ``ndim``
    dimensions and that the file holds exactly the data bytes the header announces; a one-line
    :class:`UserError` naming the file otherwise. Remembered per file, size and mtime."""
    stat = os.stat(path)
    return _header(path, stat.st_size, stat.st_mtime_ns, ndim, source)


@functools.lru_cache(maxsize=64)
def _header(path: str, size: int, mtime_ns: int, ndim: int, source: IdxSource | None) -> Tuple[int, ...]:
    import numpy as np

    fix = _replace(source) if source is not None else "replace it with the original file"
    compressed = path.endswith(".gz")
    with open(path, "rb") as raw:
        magic = raw.read(2)
    if compressed and magic != _GZIP_MAGIC:
        raise UserError(
            f"{path} is not gzip-compressed although its name ends in .gz: if it is a plain idx file "
            f"remove the .gz from its name, else {fix}"
        )
    try:
        with _open(path) as stream:
            head = stream.read(4)
            if len(head) != 4 or head[0] != 0 or head[1] != 0 or head[2] != _UBYTE:
                hint = (
                    " (it looks gzip-compressed: add .gz to its name)"
                    if magic == _GZIP_MAGIC and not compressed
                    else ""
                )
                raise UserError(f"{path} is not an unsigned-byte idx file: bad magic number{hint}: {fix}")
            if head[3] != ndim:
                raise UserError(f"{path} has {head[3]} dimensions in its header, not {ndim}: {fix}")
            raw_dims = stream.read(4 * ndim)
            if len(raw_dims) != 4 * ndim:
                raise UserError(f"{path} is truncated in its header: {fix}")
            dims = tuple(int(d) for d in np.frombuffer(raw_dims, dtype=">u4"))
            expected = 4 + 4 * ndim + int(np.prod(dims, dtype=np.int64))
            if compressed:
                total = _gzip_size(path, expected, stream, 4 + 4 * ndim)
            else:
                total = size
    except _DECODE_ERRORS as error:
        raise _damaged(path, error, source) from None
    if total != expected:
        what = "images of " + "x".join(map(str, dims[1:])) if ndim == 3 else "labels"
        cut = "is truncated" if total < expected else "is longer than its header says"
        raise UserError(
            f"{path} {cut}: its header announces {dims[0]} {what} ({expected} bytes{' uncompressed' if compressed else ''}), "
            f"it holds {total}{'' if total < expected else ' or more'}: {fix}"
        )
    return dims


def _gzip_size(path: str, expected: int, stream: BinaryIO, consumed: int) -> int:
    """The uncompressed size of gzip file ``path`` when it is ``expected`` (its trailer says so:
    the size modulo 2**32), else counted by reading ``stream`` (already ``consumed`` bytes in)
    up to ``expected + 1`` bytes."""
    with open(path, "rb") as raw:
        raw.seek(0, os.SEEK_END)
        if raw.tell() >= 22:  # a gzip member's header and trailer
            raw.seek(-4, os.SEEK_END)
            if int.from_bytes(raw.read(4), "little") == expected % 2**32:
                return expected
    total = consumed
    while total <= expected:
        chunk = stream.read(min(1 << 20, expected + 1 - total))
        if not chunk:
            break
        total += len(chunk)
    return total


def _check_labels(path: str, source: IdxSource) -> None:
    labels = read_idx(path, 1, source)
    if len(labels) and int(labels.max()) >= 10:
        index = int((labels >= 10).nonzero()[0, 0])
        raise UserError(
            f"{path} holds label {int(labels[index])} at index {index}: {source.title} has 10 classes "
            f"(labels 0-9): {_replace(source)}"
        )


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


def read_idx(path: str, ndim: int, source: IdxSource | None = None) -> torch.Tensor:
    """The uint8 array stored in idx file ``path``, with the shape its header gives, after
    :func:`header`'s checks. Raises a one-line :class:`UserError` naming the file when it is not
    what it claims or cannot be decompressed."""
    import numpy as np
    import torch

    dims = header(path, ndim, source)
    try:
        with _open(path) as stream:
            stream.read(4 + 4 * ndim)
            data = _read_exact(stream, int(np.prod(dims, dtype=np.int64)), path)
            if stream.read(1):  # at the end a gzip stream checks its CRC: damaged data is refused here
                raise UserError(
                    f"{path} is longer than its header says: {_replace(source) if source else 'replace it'}"
                )
    except _DECODE_ERRORS as error:
        raise _damaged(path, error, source) from None
    return torch.frombuffer(data, dtype=torch.uint8).view(dims)


def sizes(source: IdxSource, root: str) -> Tuple[int, int]:
    """``(training images, test images)`` from the label files' headers, after :func:`check`."""
    check(source, root)
    root = resolve_root(source, root)
    return tuple(header(find_file(root, source, stem), 1, source)[0] for stem in (FILES[1], FILES[3]))  # type: ignore[arg-type,return-value]


def _load_split(root: str, source: IdxSource, images_stem: str, labels_stem: str) -> Tuple[torch.Tensor, torch.Tensor]:
    import torch

    images_path = find_file(root, source, images_stem)
    labels_path = find_file(root, source, labels_stem)
    assert images_path is not None and labels_path is not None  # check() ran first
    images = read_idx(images_path, 3, source)
    labels = read_idx(labels_path, 1, source).to(torch.int64)
    if len(images) != len(labels):  # check() refused it already; a file changed since
        raise UserError(
            f"{images_path} and {labels_path} do not match: image shape {tuple(images.shape)}, "
            f"label shape {tuple(labels.shape)}"
        )
    return images.unsqueeze(1), labels


def load(source: IdxSource, root: str) -> InMemoryImageData:
    """The data set ``source`` read from ``root`` (or its default root): uint8 images (N,1,28,28)
    held in memory, 10 classes, batches normalised with the source's mean and std."""
    from dlcomm.data.base import InMemoryImageData

    check(source, root)
    root = resolve_root(source, root)
    train = _load_split(root, source, FILES[0], FILES[1])
    test = _load_split(root, source, FILES[2], FILES[3])
    return InMemoryImageData(train, test, num_classes=10, mean=[source.mean], std=[source.std])


@dataclass
class IdxDatasetConfig(DatasetConfig):
    """mnist, fashion_mnist: the four idx files."""

    root: str = field(
        default="", metadata=domain(anything=DATA_ROOT, doc="folder of the idx files (or root/raw, root/<Folder>/raw)")
    )


class IdxData(DataSource[IdxDatasetConfig]):
    """An MNIST-like set; ``name`` picks its :class:`IdxSource`."""

    Config = IdxDatasetConfig

    @classmethod
    def check(cls, cfg: IdxDatasetConfig) -> None:
        check(VARIANTS[cls.name], root(cfg))

    @classmethod
    def shape(cls, cfg: IdxDatasetConfig) -> Tuple[Tuple[int, int, int], int]:
        return (1, 28, 28), cls.classes(cfg)

    @classmethod
    def classes(cls, cfg: IdxDatasetConfig) -> int:
        return 10

    @classmethod
    def sizes(cls, cfg: IdxDatasetConfig) -> Optional[Tuple[int, int]]:
        return sizes(VARIANTS[cls.name], root(cfg))

    @classmethod
    def build(cls, cfg: IdxDatasetConfig) -> "ImageClassificationData":
        return load(VARIANTS[cls.name], root(cfg))


@register
class MNIST(IdxData):
    name = "mnist"


@register
class FashionMNIST(IdxData):
    name = "fashion_mnist"
