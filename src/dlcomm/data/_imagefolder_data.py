"""dataset=imagefolder's loader: image folders in torchvision's ImageFolder layout (ImageNet, CUB,
Stanford Cars, ...). Torch ``Dataset`` subclasses, so torch and torchvision at import:
:mod:`dlcomm.data.imagefolder` (the choice's ``Config`` and source) imports this module inside its
``build``."""

from __future__ import annotations

import os
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms
from torchvision.datasets import ImageFolder

from dlcomm.data.base import Batch, ImageClassificationData, as_index_tensor, check_batch_size
from dlcomm.data.folder import check
from dlcomm.errors import UserError

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
RESIZE_RATIO = 1.14  # test images: resize the short side to image_size * 1.14, then center-crop


class UnreadableImage(UserError):
    """An image file that does not decode: one line naming it. A DataLoader worker's exception
    reaches the rank rebuilt from its traceback text, so the message is cut back to this line."""

    def __init__(self, message: str) -> None:
        marker = f"{type(self).__name__}: "
        super().__init__(message.rsplit(marker, 1)[-1] if "Original Traceback" in message else message)


def load_image(path: str) -> Any:
    """ImageFolder's loader (PIL, RGB), with a file that does not decode named in one line."""
    from PIL import Image, UnidentifiedImageError

    try:
        with open(path, "rb") as stream:
            return Image.open(stream).convert("RGB")
    except Exception as error:  # noqa: BLE001 - whatever PIL raises, the file is not an image it reads
        why = (
            "PIL cannot identify its format"
            if isinstance(error, UnidentifiedImageError)
            else f"{type(error).__name__}: {error}"
        )
        raise UnreadableImage(
            f"{path} does not decode as an image ({why}): replace or remove it under dataset.root"
        ) from None


class _FixedClassesFolder(ImageFolder):
    """An ImageFolder whose class-to-label map is given (the training split's), so labels agree
    between splits even when a class folder is missing from one of them."""

    def __init__(self, root: str, class_to_idx: Dict[str, int], transform: Any) -> None:
        self._given_classes = class_to_idx
        super().__init__(root, transform=transform, loader=load_image, allow_empty=True)

    def find_classes(self, directory: Any) -> Tuple[List[str], Dict[str, int]]:
        return sorted(self._given_classes, key=self._given_classes.__getitem__), dict(self._given_classes)


def _seed_of(seed: int, position: int) -> int:
    """The 64-bit seed of the augmentation of the ``position``-th sample of an epoch."""
    return (seed * 0x9E3779B97F4A7C15 + position) & ((1 << 64) - 1)


class _SeededSubset(Dataset):
    """``base[indices[p]]`` at position ``p``; with a ``seed``, the transform's random draws at
    position ``p`` come from torch's global generator reseeded by ``(seed, p)`` (restored after),
    so augmentation is reproducible whatever the number of loader workers."""

    def __init__(self, base: ImageFolder, indices: List[int], seed: Optional[int]) -> None:
        self.base = base
        self.indices = indices
        self.seed = seed

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, position: int) -> Any:
        if self.seed is None:
            return self.base[self.indices[position]]
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(_seed_of(self.seed, position))
            return self.base[self.indices[position]]


class ImageFolderData(ImageClassificationData):
    """Images decoded from disk by ``loader_workers`` DataLoader workers; training: random resized
    crop + flip (``augment``) or resize + center crop; test: resize to ``1.14 * image_size`` +
    center crop; ImageNet mean and std."""

    def __init__(
        self, root: str, train_dir: str, val_dir: str, image_size: int, augment: bool, loader_workers: int
    ) -> None:
        check(root, train_dir, val_dir)
        normalize = transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)
        if augment:
            train_tf = [transforms.RandomResizedCrop(image_size), transforms.RandomHorizontalFlip()]
        else:
            train_tf = [transforms.Resize(image_size), transforms.CenterCrop(image_size)]
        test_tf = [transforms.Resize(int(image_size * RESIZE_RATIO)), transforms.CenterCrop(image_size)]
        try:
            self.train_set = ImageFolder(
                os.path.join(root, train_dir),
                transform=transforms.Compose([*train_tf, transforms.ToTensor(), normalize]),
                loader=load_image,
            )
        except FileNotFoundError as error:  # a class folder without images (checked before launch; changed since)
            raise UserError(f"dataset.train_dir={train_dir}: {error}") from None
        self.test_set = _FixedClassesFolder(
            os.path.join(root, val_dir),
            self.train_set.class_to_idx,
            transform=transforms.Compose([*test_tf, transforms.ToTensor(), normalize]),
        )
        self.input_shape = (3, image_size, image_size)
        self.pixel_mean, self.pixel_std = IMAGENET_MEAN, IMAGENET_STD
        self.num_classes = len(self.train_set.classes)
        self.train_size = len(self.train_set)
        self.test_size = len(self.test_set)
        self.loader_workers = loader_workers

    def _loader(self, dataset: Dataset, batch_size: int, drop_last: bool) -> Iterator[Batch]:
        check_batch_size(batch_size)
        loader = DataLoader(
            dataset,
            batch_size=batch_size,
            shuffle=False,
            drop_last=drop_last,
            num_workers=self.loader_workers,
            persistent_workers=False,
        )
        for images, labels in loader:
            yield images, labels.to(torch.int64)

    def train_batches(self, indices: torch.Tensor, batch_size: int, seed: int) -> Iterator[Batch]:
        idx = as_index_tensor(indices, self.train_size).tolist()
        return self._loader(_SeededSubset(self.train_set, idx, seed), batch_size, drop_last=True)

    def test_batches(self, batch_size: int, indices: Optional[torch.Tensor] = None) -> Iterator[Batch]:
        idx = list(range(self.test_size)) if indices is None else as_index_tensor(indices, self.test_size).tolist()
        return self._loader(_SeededSubset(self.test_set, idx, None), batch_size, drop_last=False)
