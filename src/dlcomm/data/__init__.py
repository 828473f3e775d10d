"""Data sets and their per-rank partition.

Every data set is a registered :class:`~dlcomm.data.source.DataSource` (dlcomm's own in
:mod:`dlcomm.data`'s family modules, installed plugins' through the ``dlcomm.datasets`` entry points;
:mod:`dlcomm.data.registry`). ``build_dataset(cfg)`` gives an :class:`ImageClassificationData`
for the ``dataset`` config group (``cfg.name`` a registered name); ``check_dataset(cfg)``,
``dataset_shape(cfg)`` and ``dataset_sizes(cfg)`` answer without loading any data, so the CLI can
fail fast with a one-line :class:`~dlcomm.errors.UserError`. ``cfg`` is the data set's schema
(e.g. :class:`~dlcomm.data.cifar.CifarConfig`, or a plugin's ``Config``).

Importing this package imports no torch (composing a configuration imports the registry): the
torch-backed names below are loaded on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Tuple

from dlcomm.data.registry import SOURCES
from dlcomm.errors import UserError

if TYPE_CHECKING:
    from dlcomm.config.schema import DatasetConfig
    from dlcomm.data.base import ImageClassificationData, InMemoryImageData
    from dlcomm.data.partition import epoch_partition, epoch_permutation

__all__ = [
    "ImageClassificationData",
    "InMemoryImageData",
    "build_dataset",
    "check_dataset",
    "dataset_shape",
    "dataset_sizes",
    "epoch_partition",
    "epoch_permutation",
]

_LAZY = {
    "ImageClassificationData": "dlcomm.data.base",
    "InMemoryImageData": "dlcomm.data.base",
    "epoch_partition": "dlcomm.data.partition",
    "epoch_permutation": "dlcomm.data.partition",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def check_dataset(cfg: DatasetConfig) -> None:
    """Return when ``cfg`` names a known data set whose files are where it says (or, for
    ``synthetic``, whose sizes make sense); else raise a one-line :class:`UserError` naming the
    config key, the path and how to get the data. Lists files and folders and reads headers,
    sizes and label files (MNIST-like sets: :func:`dlcomm.data.mnist.check`) and one image
    header per class folder (:func:`dlcomm.data.folder.check_images`), never pixels."""
    SOURCES.get(str(cfg.name)).check(cfg)


def dataset_shape(cfg: DatasetConfig) -> Tuple[Tuple[int, int, int], int]:
    """``(input_shape (C,H,W), num_classes)`` of the data set ``cfg`` describes, without loading
    it (``imagefolder`` counts the class folders of ``root/train_dir``). Raises
    :class:`UserError` as :func:`check_dataset` does, for the unknown names and missing folders
    on which the answer depends, and for fewer than 2 classes."""
    shape, classes = SOURCES.get(str(cfg.name)).shape(cfg)
    if int(classes) < 2:  # any source's, a plugin's included: one class trains to 100% accuracy, meaning nothing
        raise UserError(
            f"dataset={cfg.name} has {int(classes)} class{'' if int(classes) == 1 else 'es'}, and a classifier of fewer "
            "than 2 is right by construction (its accuracy says nothing): give it data of at least 2 classes"
        )
    return shape, classes


def dataset_sizes(cfg: DatasetConfig) -> Optional[Tuple[int, int]]:
    """``(training images, test images)`` of the data set ``cfg`` describes, without loading it;
    None where that is not cheap (``imagefolder``: counting a large tree's files is not free, its
    ranks check)."""
    return SOURCES.get(str(cfg.name)).sizes(cfg)


def build_dataset(cfg: DatasetConfig) -> "ImageClassificationData":
    """The data set ``cfg`` describes, after :func:`check_dataset`; in-memory sets hold uint8
    pixels and normalise each batch as it is produced."""
    source = SOURCES.get(str(cfg.name))
    source.check(cfg)
    return source.build(cfg)
