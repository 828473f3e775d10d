"""dataset=synthetic's data set (an ``ImageClassificationData`` subclass, so torch at import:
:mod:`dlcomm.data.synthetic` imports this module inside its source's ``build``)."""

from __future__ import annotations

from typing import Iterator, Optional, Sequence

import torch

from dlcomm.data.base import Batch, ImageClassificationData, as_index_tensor, split_batches
from dlcomm.data.synthetic import TEACHER_SEED, check_sizes, parse_shape, sample_seed


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
