"""A learnable synthetic data set generated on the fly: Gaussian inputs labelled by a fixed
random linear teacher."""

from __future__ import annotations

from typing import Iterator, Optional, Sequence, Tuple

import torch

from dlcomm.data.base import Batch, ImageClassificationData, as_index_tensor, split_batches
from dlcomm.errors import UserError

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


class SyntheticData(ImageClassificationData):
    """Sample ``i`` of a split is ``x ~ N(0, I)`` drawn from a generator seeded by (split, i), with
    label ``argmax(W x)`` for a fixed teacher ``W`` whose rows are random unit vectors (so the
    classes are equally likely). Nothing is stored but ``W``: the same index always gives the
    same sample, on every rank and in every run."""

    def __init__(self, shape: Sequence[int], num_classes: int, train_size: int, test_size: int) -> None:
        self.input_shape = parse_shape(shape)
        check_sizes(num_classes, train_size, test_size)
        self.num_classes = num_classes
        self.train_size = train_size
        self.test_size = test_size
        generator = torch.Generator().manual_seed(TEACHER_SEED)
        teacher = torch.randn(num_classes, self.dim, generator=generator)
        self.teacher = teacher / teacher.norm(dim=1, keepdim=True)

    @property
    def dim(self) -> int:
        """Number of input features, C*H*W."""
        c, h, w = self.input_shape
        return c * h * w

    def samples(self, split: str, indices: torch.Tensor) -> Batch:
        """Inputs (B,C,H,W) and labels (B,) of samples ``indices`` of ``split`` ("train" or "test")."""
        inputs = torch.empty(len(indices), self.dim)
        labels = torch.empty(len(indices), dtype=torch.int64)
        generator = torch.Generator()
        for row, index in enumerate(indices.tolist()):
            generator.manual_seed(sample_seed(split, index))
            torch.randn(self.dim, generator=generator, out=inputs[row])
            # one matrix-vector product per sample: the label never depends on the batch around it
            labels[row] = torch.mv(self.teacher, inputs[row]).argmax()
        return inputs.view(len(indices), *self.input_shape), labels

    def train_batches(self, indices: torch.Tensor, batch_size: int, seed: int) -> Iterator[Batch]:
        """See :meth:`ImageClassificationData.train_batches`; there is no augmentation, so ``seed``
        is unused."""
        idx = as_index_tensor(indices, self.train_size)
        for chunk in split_batches(idx, batch_size, drop_last=True):
            yield self.samples("train", chunk)

    def test_batches(self, batch_size: int, indices: Optional[torch.Tensor] = None) -> Iterator[Batch]:
        idx = torch.arange(self.test_size) if indices is None else as_index_tensor(indices, self.test_size)
        for chunk in split_batches(idx, batch_size, drop_last=False):
            yield self.samples("test", chunk)
