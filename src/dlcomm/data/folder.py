"""Layout checks of image folders in torchvision's ImageFolder layout; reads no image and
imports no torchvision (see :mod:`dlcomm.data._imagefolder_data` for the loader)."""

from __future__ import annotations

import os
from typing import List, Optional, Tuple

from dlcomm.errors import UserError


def class_names(directory: str) -> List[str]:
    """Sorted names of the sub-folders of ``directory``: the classes, as ImageFolder sees them."""
    return sorted(entry.name for entry in os.scandir(directory) if entry.is_dir())


def _fix() -> str:
    return (
        "set dataset.root (default $DLCOMM_DATA/imagenet) to a folder holding <dataset.train_dir>/<class>/<image> "
        "and <dataset.val_dir>/<class>/<image> (torchvision ImageFolder layout; ImageNet: ILSVRC2012's train and "
        "val images, one folder per synset, as docs/datasets.md shows; nothing is downloaded)"
    )


def check(root: str, train_dir: str, val_dir: str) -> None:
    """Raise a one-line :class:`UserError` unless both split folders exist and the training one
    has at least two class folders; lists directories only."""
    if not root:
        raise UserError(f"dataset.root is empty for dataset.name=imagefolder: {_fix()}")
    if not os.path.isdir(root):
        raise UserError(f"dataset.root={root} does not exist: {_fix()}")
    for key, sub in (("dataset.train_dir", train_dir), ("dataset.val_dir", val_dir)):
        path = os.path.join(root, sub)
        if not os.path.isdir(path):
            raise UserError(f"{key}={sub}: {path} does not exist under dataset.root={root}: {_fix()}")
    names = class_names(os.path.join(root, train_dir))
    if not names:
        raise UserError(
            f"dataset.train_dir={train_dir}: {os.path.join(root, train_dir)} has no class folders: {_fix()}"
        )
    if len(names) < 2:
        raise UserError(
            f"dataset.train_dir={train_dir}: {os.path.join(root, train_dir)} has one class folder ({names[0]}), and "
            "a classifier of one class is right by construction (its accuracy is 100% whatever it learns): "
            "add a folder per class, at least 2"
        )


# the file names torchvision's ImageFolder loads (torchvision.datasets.folder.IMG_EXTENSIONS), any case
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def first_image(directory: str) -> Optional[str]:
    """The first file ImageFolder would load from class folder ``directory`` (in its order:
    sorted, sub-folders followed), or None when it holds none."""
    for folder, _, files in sorted(os.walk(directory, followlinks=True)):
        for name in sorted(files):
            if name.lower().endswith(IMAGE_EXTENSIONS):
                return os.path.join(folder, name)
    return None


def check_images(root: str, train_dir: str, val_dir: str) -> None:
    """Raise a one-line :class:`UserError` unless every class folder of the training split, and
    at least one of the test split, holds an image file, and the first image of each class folder (both splits) is one PIL can
    identify; reads one header per class, not the pixels (a rank names a file that fails to
    decode later)."""
    from PIL import Image

    train = os.path.join(root, train_dir)
    classes = class_names(train)
    if not any(first_image(os.path.join(root, val_dir, name)) for name in classes):
        raise UserError(
            f"dataset.val_dir={val_dir}: no class folder of {os.path.join(root, val_dir)} holds an image "
            f"(evaluation needs the test split): add its images, or point dataset.val_dir at them"
        )
    for split, key in ((train_dir, "dataset.train_dir"), (val_dir, "dataset.val_dir")):
        for name in classes:
            directory = os.path.join(root, split, name)
            if split != train_dir and not os.path.isdir(directory):
                continue  # the test split may lack a class
            path = first_image(directory)
            if path is None:
                if split != train_dir:
                    continue  # an empty class folder in the test split is allowed
                raise UserError(
                    f"{key}={split}: class folder {directory} holds no image "
                    f"({', '.join(IMAGE_EXTENSIONS)}): add its images or remove the folder"
                )
            try:
                with Image.open(path):
                    pass
            except Exception as error:  # noqa: BLE001 - whatever PIL raises, the file is not an image it reads
                raise UserError(
                    f"{path} is not an image PIL can read ({type(error).__name__}): "
                    f"replace or remove it under dataset.root={root}"
                ) from None


def shape(root: str, train_dir: str, image_size: int) -> Tuple[Tuple[int, int, int], int]:
    """(3, image_size, image_size) and the number of class folders in ``root/train_dir``."""
    return (3, image_size, image_size), len(class_names(os.path.join(root, train_dir)))
