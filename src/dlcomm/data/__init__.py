"""Data sets and their per-rank partition.

``build_dataset(cfg)`` gives an :class:`ImageClassificationData` for the ``dataset`` config group
(``cfg.name`` one of :data:`DATASET_NAMES`); ``check_dataset(cfg)`` and ``dataset_shape(cfg)``
answer without loading any data, so the CLI can fail fast with a one-line :class:`UserError`.
``cfg`` may be an omegaconf DictConfig or the data set's schema in :mod:`dlcomm.config.schema`
(e.g. :class:`~dlcomm.config.schema.CifarConfig`): only attribute access is used, and only of the
knobs the chosen data set's schema has.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

from dlcomm.data import cifar, folder, mnist, synthetic
from dlcomm.data.base import ImageClassificationData, InMemoryImageData
from dlcomm.data.partition import epoch_partition, epoch_permutation
from dlcomm.errors import UserError

DATASET_NAMES = ("fashion_mnist", "mnist", "cifar10", "cifar100", "imagefolder", "synthetic")

__all__ = [
    "DATASET_NAMES",
    "ImageClassificationData",
    "InMemoryImageData",
    "build_dataset",
    "check_dataset",
    "dataset_shape",
    "epoch_partition",
    "epoch_permutation",
]


def _name(cfg: Any) -> str:
    """``cfg.name`` after checking it is a known data set; :class:`UserError` otherwise."""
    name = str(cfg.name)
    if name not in DATASET_NAMES:
        raise UserError(f"dataset.name={name} is unknown: choose one of {', '.join(DATASET_NAMES)}")
    return name


def _root(cfg: Any) -> str:
    return str(cfg.root or "")


def _synthetic_args(cfg: Any) -> Tuple[Tuple[int, int, int], int, int, int]:
    shape = synthetic.parse_shape(list(cfg.shape))
    synthetic.check_sizes(int(cfg.num_classes), int(cfg.train_size), int(cfg.test_size))
    return shape, int(cfg.num_classes), int(cfg.train_size), int(cfg.test_size)


def check_dataset(cfg: Any) -> None:
    """Return when ``cfg`` names a known data set whose files are where it says (or, for
    ``synthetic``, whose sizes make sense); else raise a one-line :class:`UserError` naming the
    config key, the path and how to get the data. Lists files and folders and reads headers,
    sizes and label files (MNIST-like sets: :func:`dlcomm.data.mnist.check`) and one image
    header per class folder (:func:`dlcomm.data.folder.check_images`), never pixels."""
    name = _name(cfg)
    if name in mnist.SOURCES:
        mnist.check(mnist.SOURCES[name], _root(cfg))
    elif name in cifar.SOURCES:
        cifar.check(cifar.SOURCES[name], _root(cfg))
    elif name == "imagefolder":
        folder.check(_root(cfg), str(cfg.train_dir), str(cfg.val_dir))
        folder.check_images(_root(cfg), str(cfg.train_dir), str(cfg.val_dir))
    else:
        _synthetic_args(cfg)


def dataset_shape(cfg: Any) -> Tuple[Tuple[int, int, int], int]:
    """``(input_shape (C,H,W), num_classes)`` of the data set ``cfg`` describes, without loading
    it (``imagefolder`` counts the class folders of ``root/train_dir``). Raises
    :class:`UserError` as :func:`check_dataset` does, for the unknown names and missing folders
    on which the answer depends."""
    name = _name(cfg)
    if name in mnist.SOURCES:
        return (1, 28, 28), 10
    if name in cifar.SOURCES:
        return cifar.shape(cifar.SOURCES[name])
    if name == "imagefolder":
        folder.check(_root(cfg), str(cfg.train_dir), str(cfg.val_dir))
        return folder.shape(_root(cfg), str(cfg.train_dir), int(cfg.image_size))
    shape, num_classes, _, _ = _synthetic_args(cfg)
    return shape, num_classes


def dataset_sizes(cfg: Any) -> Optional[Tuple[int, int]]:
    """``(training images, test images)`` of the data set ``cfg`` describes, without loading it;
    None for ``imagefolder`` (counting a large tree's files is not free: its ranks check)."""
    name = _name(cfg)
    if name in mnist.SOURCES:
        return mnist.sizes(mnist.SOURCES[name], _root(cfg))
    if name in cifar.SOURCES:
        source = cifar.SOURCES[name]
        return source.train_size, source.test_size
    if name == "imagefolder":
        return None
    _, _, train_size, test_size = _synthetic_args(cfg)
    return train_size, test_size


def build_dataset(cfg: Any) -> ImageClassificationData:
    """The data set ``cfg`` describes, after :func:`check_dataset`; in-memory sets hold uint8
    pixels and normalise each batch as it is produced."""
    check_dataset(cfg)
    name = _name(cfg)
    if name in mnist.SOURCES:
        return mnist.load(mnist.SOURCES[name], _root(cfg))
    if name in cifar.SOURCES:
        return cifar.load(cifar.SOURCES[name], _root(cfg), bool(cfg.augment))
    if name == "imagefolder":
        from dlcomm.data.imagefolder import ImageFolderData  # torchvision: imported only when used

        return ImageFolderData(
            _root(cfg),
            str(cfg.train_dir),
            str(cfg.val_dir),
            int(cfg.image_size),
            bool(cfg.augment),
            int(cfg.loader_workers),
        )
    shape, num_classes, train_size, test_size = _synthetic_args(cfg)
    return synthetic.SyntheticData(shape, num_classes, train_size, test_size)
