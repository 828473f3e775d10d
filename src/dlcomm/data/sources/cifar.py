"""cifar10 and cifar100: torchvision's python-pickle folders (:mod:`dlcomm.data.cifar`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional, Tuple

from dlcomm.config.schema import DATA_ROOT, DatasetConfig, domain
from dlcomm.data.registry import register
from dlcomm.data.source import DataSource, root

if TYPE_CHECKING:
    from dlcomm.data.base import ImageClassificationData


@dataclass
class CifarConfig(DatasetConfig):
    """cifar10, cifar100: torchvision's python-pickle folder under ``root`` (nothing is downloaded)."""

    root: str = field(
        default="", metadata=domain(anything=DATA_ROOT)
    )  # the folder holding the pickle folder; set per data set, in its file
    augment: bool = True  # random crop 32 (padding 4) + horizontal flip


class CifarData(DataSource[CifarConfig]):
    """A CIFAR variant; ``name`` picks its :class:`dlcomm.data.cifar.CifarSource`."""

    Config = CifarConfig

    @classmethod
    def check(cls, cfg: CifarConfig) -> None:
        from dlcomm.data import cifar

        cifar.check(cifar.SOURCES[cls.name], root(cfg))

    @classmethod
    def shape(cls, cfg: CifarConfig) -> Tuple[Tuple[int, int, int], int]:
        from dlcomm.data import cifar

        return cifar.shape(cifar.SOURCES[cls.name])

    @classmethod
    def classes(cls, cfg: CifarConfig) -> int:
        from dlcomm.data import cifar

        return cifar.SOURCES[cls.name].num_classes

    @classmethod
    def sizes(cls, cfg: CifarConfig) -> Optional[Tuple[int, int]]:
        from dlcomm.data import cifar

        source = cifar.SOURCES[cls.name]
        return source.train_size, source.test_size

    @classmethod
    def build(cls, cfg: CifarConfig) -> "ImageClassificationData":
        from dlcomm.data import cifar

        return cifar.load(cifar.SOURCES[cls.name], root(cfg), bool(cfg.augment))


@register
class Cifar10(CifarData):
    name = "cifar10"


@register
class Cifar100(CifarData):
    name = "cifar100"
