"""mnist and fashion_mnist: the four idx files (:mod:`dlcomm.data.mnist`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional, Tuple

from dlcomm.config.schema import DATA_ROOT, DatasetConfig, domain
from dlcomm.data.registry import register
from dlcomm.data.source import DataSource, root

if TYPE_CHECKING:
    from dlcomm.data.base import ImageClassificationData


@dataclass
class IdxDatasetConfig(DatasetConfig):
    """mnist, fashion_mnist: the four idx files."""

    root: str = field(
        default="", metadata=domain(anything=DATA_ROOT)
    )  # folder of the idx files (or root/raw, root/<Folder>/raw)


class IdxData(DataSource[IdxDatasetConfig]):
    """An MNIST-like set; ``name`` picks its :class:`dlcomm.data.mnist.IdxSource`."""

    Config = IdxDatasetConfig

    @classmethod
    def check(cls, cfg: IdxDatasetConfig) -> None:
        from dlcomm.data import mnist

        mnist.check(mnist.SOURCES[cls.name], root(cfg))

    @classmethod
    def shape(cls, cfg: IdxDatasetConfig) -> Tuple[Tuple[int, int, int], int]:
        return (1, 28, 28), cls.classes(cfg)

    @classmethod
    def classes(cls, cfg: IdxDatasetConfig) -> int:
        return 10

    @classmethod
    def sizes(cls, cfg: IdxDatasetConfig) -> Optional[Tuple[int, int]]:
        from dlcomm.data import mnist

        return mnist.sizes(mnist.SOURCES[cls.name], root(cfg))

    @classmethod
    def build(cls, cfg: IdxDatasetConfig) -> "ImageClassificationData":
        from dlcomm.data import mnist

        return mnist.load(mnist.SOURCES[cls.name], root(cfg))


@register
class MNIST(IdxData):
    name = "mnist"


@register
class FashionMNIST(IdxData):
    name = "fashion_mnist"
