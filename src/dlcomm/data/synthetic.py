"""dataset=synthetic: a learnable data set of any shape generated on the fly, Gaussian inputs
labelled by a fixed random linear teacher; nothing is read from disk.

The choice's ``Config``, its registered source and the checks of its sizes are here; the data set
itself (:class:`~dlcomm.data._synthetic_data.SyntheticData`, an ``ImageClassificationData``
subclass, so torch at import) is in :mod:`dlcomm.data._synthetic_data`, imported inside
:meth:`Synthetic.build`: composing a configuration imports this module without torch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple

from dlcomm.config.schema import SYNTHETIC_MAX, DatasetConfig, domain
from dlcomm.data.registry import register
from dlcomm.data.source import DataSource
from dlcomm.errors import UserError

if TYPE_CHECKING:
    from dlcomm.data.base import ImageClassificationData

# torch's CPU generator keeps only the low 32 bits of a seed, so every seed here fits in 32 bits.
# They are fixed: the data never depends on the run seed or the rank.
TEACHER_SEED = 0x5EED
MAX_SIZE = 1 << 31  # sample i of split s draws from seed s * 2**31 + i: never shared
SPLITS = {"train": 0, "test": 1}


def sample_seed(split: str, index: int) -> int:
    """The generator seed of sample ``index`` of ``split``: distinct for every (split, index)."""
    return SPLITS[split] * MAX_SIZE + index


def parse_shape(shape: Sequence[int]) -> Tuple[int, int, int]:
    """``shape`` as a (C, H, W) tuple of positive ints; :class:`UserError` otherwise."""
    dims = tuple(int(d) for d in shape)
    if len(dims) != 3 or min(dims) < 1:
        raise UserError(f"dataset.shape={list(dims)} must be three positive sizes [C, H, W]")
    return dims


def check_sizes(num_classes: int, train_size: int, test_size: int) -> None:
    """Raise :class:`UserError` unless there are >= 2 classes and both split sizes lie in
    [1, 2**31]."""
    if num_classes < 2:
        raise UserError(f"dataset.num_classes={num_classes} must be at least 2")
    if not (1 <= train_size <= MAX_SIZE and 1 <= test_size <= MAX_SIZE):
        raise UserError(
            f"dataset.train_size={train_size} and dataset.test_size={test_size} must lie in [1, {MAX_SIZE}]"
        )


@dataclass
class SyntheticConfig(DatasetConfig):
    """synthetic: learnable data of any shape (labels from a fixed random linear teacher), for tests
    and timing; nothing is read from disk."""

    shape: List[int] = field(
        default_factory=lambda: [1, 28, 28], metadata=domain(low=1, length=3, doc="C, H, W of the images")
    )
    num_classes: int = field(default=10, metadata=domain(low=2, doc="labels"))
    train_size: int = field(
        default=4096, metadata=domain(low=1, high=SYNTHETIC_MAX, doc="samples in the training split")
    )
    test_size: int = field(default=1024, metadata=domain(low=1, high=SYNTHETIC_MAX, doc="samples in the test split"))


def _args(cfg: SyntheticConfig) -> Tuple[Tuple[int, int, int], int, int, int]:
    """``(shape, num_classes, train_size, test_size)`` after their checks."""
    shape = parse_shape(list(cfg.shape))
    check_sizes(int(cfg.num_classes), int(cfg.train_size), int(cfg.test_size))
    return shape, int(cfg.num_classes), int(cfg.train_size), int(cfg.test_size)


@register
class Synthetic(DataSource[SyntheticConfig]):
    """Nothing is read from disk: its checks are of the sizes."""

    name = "synthetic"
    Config = SyntheticConfig

    @classmethod
    def check(cls, cfg: SyntheticConfig) -> None:
        _args(cfg)

    @classmethod
    def shape(cls, cfg: SyntheticConfig) -> Tuple[Tuple[int, int, int], int]:
        shape, num_classes, _, _ = _args(cfg)
        return shape, num_classes

    @classmethod
    def classes(cls, cfg: SyntheticConfig) -> int:
        return int(cfg.num_classes)

    @classmethod
    def sizes(cls, cfg: SyntheticConfig) -> Optional[Tuple[int, int]]:
        _, _, train_size, test_size = _args(cfg)
        return train_size, test_size

    @classmethod
    def build(cls, cfg: SyntheticConfig) -> "ImageClassificationData":
        from dlcomm.data._synthetic_data import SyntheticData

        shape, num_classes, train_size, test_size = _args(cfg)
        return SyntheticData(shape, num_classes, train_size, test_size)
