"""imagefolder: class sub-folders under root/train_dir and root/val_dir (:mod:`dlcomm.data.folder`
checks the layout, :mod:`dlcomm.data.imagefolder` loads it with torchvision)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Tuple

from dlcomm.config.schema import ImageFolderConfig
from dlcomm.data import folder
from dlcomm.data.registry import register
from dlcomm.data.source import DataSource, root

if TYPE_CHECKING:
    from dlcomm.data.base import ImageClassificationData


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
        from dlcomm.data.imagefolder import ImageFolderData  # torchvision: imported only when used

        return ImageFolderData(
            root(cfg),
            str(cfg.train_dir),
            str(cfg.val_dir),
            int(cfg.image_size),
            bool(cfg.augment),
            int(cfg.loader_workers),
        )
