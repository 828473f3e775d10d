"""The interface every data set offers to the training loop, and its in-memory implementation."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Callable, Iterator, Optional, Sequence, Tuple

import torch

Batch = Tuple[torch.Tensor, torch.Tensor]
# (uint8 images (B,C,H,W), generator) -> augmented uint8 images of the same shape
Augment = Callable[[torch.Tensor, torch.Generator], torch.Tensor]


class ImageClassificationData(ABC):
    """An image classification data set: a training split indexed by the caller, and a test split.

    ``input_shape`` is (C, H, W); batches are ``(float32 (B,C,H,W), int64 (B,))`` with labels in
    ``range(num_classes)``. Indices of the training split are ``range(train_size)``.
    """

    input_shape: Tuple[int, int, int]
    num_classes: int
    train_size: int
    test_size: int
    # Per channel: batches hold (pixel - mean) / std for pixels in [0, 1]; None when the inputs
    # are not normalised pixels (synthetic data). Generators use it to produce the same range.
    pixel_mean: Optional[Tuple[float, ...]] = None
    pixel_std: Optional[Tuple[float, ...]] = None

    @abstractmethod
    def train_batches(self, indices: torch.Tensor, batch_size: int, seed: int) -> Iterator[Batch]:
        """Batches of the training samples ``indices``, in that order; the last incomplete batch is
        dropped, so exactly ``num_train_batches(len(indices), batch_size)`` come out. ``seed``
        alone decides any augmentation: the same arguments give the same batches."""

    @abstractmethod
    def test_batches(self, batch_size: int, indices: Optional[torch.Tensor] = None) -> Iterator[Batch]:
        """Batches of the whole test split (or of its samples ``indices``), in order, without
        augmentation; the last batch is kept even when smaller than ``batch_size``."""

    @staticmethod
    def num_train_batches(num_indices: int, batch_size: int) -> int:
        """How many batches :meth:`train_batches` yields for ``num_indices`` indices."""
        return num_indices // batch_size

    @staticmethod
    def num_test_batches(num_indices: int, batch_size: int) -> int:
        """How many batches :meth:`test_batches` yields for ``num_indices`` indices."""
        return -(-num_indices // batch_size)


def check_batch_size(batch_size: int) -> None:
    """Raise ``ValueError`` unless ``batch_size`` is a positive integer."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")


def as_index_tensor(indices: torch.Tensor | Sequence[int], size: int) -> torch.Tensor:
    """``indices`` as a 1-D int64 tensor, after checking every entry lies in ``range(size)``."""
    idx = torch.as_tensor(indices, dtype=torch.int64).reshape(-1)
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= size):
        raise IndexError(f"indices must lie in [0, {size}), got [{int(idx.min())}, {int(idx.max())}]")
    return idx


def split_batches(indices: torch.Tensor, batch_size: int, drop_last: bool) -> Iterator[torch.Tensor]:
    """Consecutive slices of ``indices`` of length ``batch_size`` (the shorter tail unless
    ``drop_last``)."""
    check_batch_size(batch_size)
    stop = len(indices) - len(indices) % batch_size if drop_last else len(indices)
    for start in range(0, stop, batch_size):
        yield indices[start : start + batch_size]


class Normalizer:
    """Turns uint8 images (B,C,H,W) into float32 ``(x/255 - mean) / std`` per channel."""

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        self.scale = (1.0 / (255.0 * torch.tensor(std, dtype=torch.float32))).view(-1, 1, 1)
        self.shift = (torch.tensor(mean, dtype=torch.float32) / torch.tensor(std, dtype=torch.float32)).view(-1, 1, 1)

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        """A new float32 tensor of the normalised images; ``images`` is left as it was."""
        return images.to(torch.float32).mul_(self.scale).sub_(self.shift)


class InMemoryImageData(ImageClassificationData):
    """Both splits held as uint8 tensors (N,C,H,W) plus int64 labels; batches are normalised on
    the fly, so memory stays at one byte per pixel."""

    def __init__(
        self,
        train: Tuple[torch.Tensor, torch.Tensor],
        test: Tuple[torch.Tensor, torch.Tensor],
        num_classes: int,
        mean: Sequence[float],
        std: Sequence[float],
        augment: Optional[Augment] = None,
    ) -> None:
        self.train_images, self.train_labels = train
        self.test_images, self.test_labels = test
        self.input_shape = tuple(int(d) for d in self.train_images.shape[1:])  # type: ignore[assignment]
        self.num_classes = num_classes
        self.train_size = len(self.train_labels)
        self.test_size = len(self.test_labels)
        self.normalize = Normalizer(mean, std)
        self.pixel_mean, self.pixel_std = tuple(mean), tuple(std)
        self.augment = augment

    def train_batches(self, indices: torch.Tensor, batch_size: int, seed: int) -> Iterator[Batch]:
        idx = as_index_tensor(indices, self.train_size)
        generator = torch.Generator().manual_seed(seed & ((1 << 64) - 1))
        for chunk in split_batches(idx, batch_size, drop_last=True):
            images = self.train_images[chunk]
            if self.augment is not None:
                images = self.augment(images, generator)
            yield self.normalize(images), self.train_labels[chunk]

    def test_batches(self, batch_size: int, indices: Optional[torch.Tensor] = None) -> Iterator[Batch]:
        check_batch_size(batch_size)
        if indices is None:
            for start in range(0, self.test_size, batch_size):
                stop = start + batch_size
                yield self.normalize(self.test_images[start:stop]), self.test_labels[start:stop]
            return
        idx = as_index_tensor(indices, self.test_size)
        for chunk in split_batches(idx, batch_size, drop_last=False):
            yield self.normalize(self.test_images[chunk]), self.test_labels[chunk]


def concat_consuming(chunks: list[torch.Tensor]) -> torch.Tensor:
    """``torch.cat(chunks)`` that empties ``chunks`` as it copies, so peak memory is about the
    result plus one chunk (the result's pages are only touched as they are written)."""
    if not chunks:
        raise ValueError("nothing to concatenate")
    total = sum(len(c) for c in chunks)
    out = torch.empty((total, *chunks[0].shape[1:]), dtype=chunks[0].dtype)
    start = 0
    while chunks:
        chunk = chunks.pop(0)
        out[start : start + len(chunk)] = chunk
        start += len(chunk)
        del chunk
    return out
