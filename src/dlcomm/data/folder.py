"""Layout checks of image folders in torchvision's ImageFolder layout; reads no image and
imports no torchvision (see :mod:`dlcomm.data.imagefolder` for the loader)."""

from __future__ import annotations

import os
from typing import List, Tuple

from dlcomm.errors import UserError


def class_names(directory: str) -> List[str]:
    """Sorted names of the sub-folders of ``directory``: the classes, as ImageFolder sees them."""
    return sorted(entry.name for entry in os.scandir(directory) if entry.is_dir())


def _fix() -> str:
    return (
        "set dataset.root to a folder holding <dataset.train_dir>/<class>/<image> and "
        "<dataset.val_dir>/<class>/<image> (torchvision ImageFolder layout)"
    )


def check(root: str, train_dir: str, val_dir: str) -> None:
    """Raise a one-line :class:`UserError` unless both split folders exist and the training one
    has at least one class folder; lists directories only."""
    if not root:
        raise UserError(f"dataset.root is empty for dataset.name=imagefolder: {_fix()}")
    if not os.path.isdir(root):
        raise UserError(f"dataset.root={root} does not exist: {_fix()}")
    for key, sub in (("dataset.train_dir", train_dir), ("dataset.val_dir", val_dir)):
        path = os.path.join(root, sub)
        if not os.path.isdir(path):
            raise UserError(f"{key}={sub}: {path} does not exist under dataset.root={root}: {_fix()}")
    if not class_names(os.path.join(root, train_dir)):
        raise UserError(f"dataset.train_dir={train_dir}: {os.path.join(root, train_dir)} has no class folders: {_fix()}")


def shape(root: str, train_dir: str, image_size: int) -> Tuple[Tuple[int, int, int], int]:
    """(3, image_size, image_size) and the number of class folders in ``root/train_dir``."""
    return (3, image_size, image_size), len(class_names(os.path.join(root, train_dir)))
