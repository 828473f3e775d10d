"""dataset=imagefolder: class sub-folders under root/train_dir and root/val_dir; its ``Config`` and
registered source. :mod:`dlcomm.data.folder` checks the layout (no torch); the loader
(:mod:`dlcomm.data._imagefolder_data`: torch ``Dataset`` subclasses, so torch and torchvision at
import) is imported inside :meth:`ImageFolder.build`, so composing imports this module without them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional, Tuple

from dlcomm.config.schema import DATA_ROOT, DatasetConfig, doc, domain
from dlcomm.data import folder
from dlcomm.data.registry import register
from dlcomm.data.source import DataSource, root

if TYPE_CHECKING:
    from dlcomm.data.base import ImageClassificationData


@dataclass
class ImageFolderConfig(DatasetConfig):
    """imagefolder: any folder of class sub-folders under root/train_dir and root/val_dir: ImageNet
    (train/ val/) and fine-grained sets arranged the same way (docs/datasets.md). Images are decoded
    by a DataLoader with ``loader_workers``."""

    root: str = field(
        default="${oc.env:DLCOMM_DATA,/data}/imagenet",
        metadata=domain(anything=DATA_ROOT, doc="the folder holding train_dir/ and val_dir/"),
    )
    train_dir: str = field(
        default="train", metadata=domain(anything=DATA_ROOT, doc="class sub-folders of the training split")
    )
    val_dir: str = field(default="val", metadata=domain(anything=DATA_ROOT, doc="class sub-folders of the test split"))
    image_size: int = field(default=224, metadata=domain(low=1, doc="side of the square crops"))
    augment: bool = field(
        default=True, metadata=doc("random resized crop + horizontal flip (else resize + center crop)")
    )
    loader_workers: int = field(default=2, metadata=domain(low=0, doc="DataLoader processes decoding images"))


@register
class ImageFolder(DataSource[ImageFolderConfig]):
    """Reads one image header per class folder to check; counts the class folders for its shape."""

    name = "imagefolder"
    Config = ImageFolderConfig

    @classmethod
    def check(cls, cfg: ImageFolderConfig) -> None:
        folder.check(root(cfg), str(cfg.train_dir), str(cfg.val_dir))
        folder.check_images(root(cfg), str(cfg.train_dir), str(cfg.val_dir))

    @classmethod
    def shape(cls, cfg: ImageFolderConfig) -> Tuple[Tuple[int, int, int], int]:
        folder.check(root(cfg), str(cfg.train_dir), str(cfg.val_dir))
        return folder.shape(root(cfg), str(cfg.train_dir), int(cfg.image_size))

    @classmethod
    def sizes(cls, cfg: ImageFolderConfig) -> Optional[Tuple[int, int]]:
        return None  # counting a large tree's files is not free: its ranks check

    @classmethod
    def build(cls, cfg: ImageFolderConfig) -> "ImageClassificationData":
        from dlcomm.data._imagefolder_data import ImageFolderData  # torchvision: imported only when used

        return ImageFolderData(
            root(cfg),
            str(cfg.train_dir),
            str(cfg.val_dir),
            int(cfg.image_size),
            bool(cfg.augment),
            int(cfg.loader_workers),
        )
