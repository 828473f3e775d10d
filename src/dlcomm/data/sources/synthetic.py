"""synthetic: learnable data of any shape generated on the fly (:mod:`dlcomm.data.synthetic`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, List, Optional, Tuple

from dlcomm.config.schema import SYNTHETIC_MAX, DatasetConfig, domain
from dlcomm.data.registry import register
from dlcomm.data.source import DataSource

if TYPE_CHECKING:
    from dlcomm.data.base import ImageClassificationData


@dataclass
class SyntheticConfig(DatasetConfig):
    """synthetic: learnable data of any shape (labels from a fixed random linear teacher), for tests
    and timing; nothing is read from disk."""

    shape: List[int] = field(
        default_factory=lambda: [1, 28, 28], metadata=domain(low=1, length=3)
    )  # C, H, W of the images
    num_classes: int = field(default=10, metadata=domain(low=2))  # labels
    train_size: int = field(default=4096, metadata=domain(low=1, high=SYNTHETIC_MAX))  # samples in the training split
    test_size: int = field(default=1024, metadata=domain(low=1, high=SYNTHETIC_MAX))  # samples in the test split


def _args(cfg: SyntheticConfig) -> Tuple[Tuple[int, int, int], int, int, int]:
    """``(shape, num_classes, train_size, test_size)`` after their checks."""
    from dlcomm.data import synthetic

    shape = synthetic.parse_shape(list(cfg.shape))
    synthetic.check_sizes(int(cfg.num_classes), int(cfg.train_size), int(cfg.test_size))
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
        from dlcomm.data.synthetic import SyntheticData

        shape, num_classes, train_size, test_size = _args(cfg)
        return SyntheticData(shape, num_classes, train_size, test_size)
