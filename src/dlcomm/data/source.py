"""What a data set is to dlcomm: a registered source that checks, measures and builds it.

A subclass names its choice (``name``: ``dataset=<name>``, stored as Hydra's ``dataset/<name>``) and
its schema (``Config``: a dataclass subclassing :class:`~dlcomm.config.schema.DatasetConfig`;
several names may share one; ``class Cifar(DataSource[CifarConfig])``), and answers these
questions about the ``cfg`` it is given (an instance of ``Config``):

- :meth:`DataSource.check`: return when the data is where ``cfg`` says, else raise a one-line
  :class:`~dlcomm.errors.UserError` naming the key, the path and the fix; reads no pixels;
- :meth:`DataSource.shape`: ``((C, H, W), classes)`` without loading the data;
- :meth:`DataSource.sizes`: ``(training images, test images)`` without loading it, or None when
  that is not cheap to know (the ranks check then);
- :meth:`DataSource.classes`: the number of classes from ``cfg`` alone, reading nothing, or None
  (the default) when only the data can tell; a report draws the chance level from it, also from a
  run's recorded parameters (strings) on a machine without the data;
- :meth:`DataSource.build`: the :class:`~dlcomm.data.base.ImageClassificationData`, after ``check``.

Sources are registered by name (:mod:`dlcomm.data.registry`): dlcomm's own in
``dlcomm/data/`` (one module a family, its ``Config`` and sources beside its loading code),
installed packages' through the ``dlcomm.datasets`` entry points
(:mod:`dlcomm.plugins`). Composing a configuration imports every source's module to register its
``Config``, so a source's module loads without torch: it imports torch (and a loader whose classes need torch at import, such as ``data/_imagefolder_data.py``) inside
``build`` (and ``check``/``shape``/``sizes`` where they need it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Generic, Optional, Protocol, Tuple, TypeVar

from dlcomm.config.schema import DatasetConfig

if TYPE_CHECKING:
    from dlcomm.data.base import ImageClassificationData


C = TypeVar("C", bound=DatasetConfig)  # the source's own ``Config``


class DataSource(Generic[C]):
    """A data set by name; see the module's docstring. Classmethods only: a source holds no state."""

    name: ClassVar[str]
    Config: ClassVar[type[DatasetConfig]] = DatasetConfig

    @classmethod
    def check(cls, cfg: C) -> None:
        """Return when the data ``cfg`` describes is there (default: nothing to check)."""

    @classmethod
    def shape(cls, cfg: C) -> Tuple[Tuple[int, int, int], int]:
        """``(input_shape (C, H, W), num_classes)``, without loading the data."""
        raise NotImplementedError(f"data source {cls.name} lacks shape()")

    @classmethod
    def sizes(cls, cfg: C) -> Optional[Tuple[int, int]]:
        """``(training images, test images)`` without loading the data; None when unknown."""
        return None

    @classmethod
    def classes(cls, cfg: C) -> Optional[int]:
        """The number of classes from ``cfg`` alone, reading no file (a report asks it of the
        ``Config`` rebuilt from a run's recorded parameters); None when only the data can tell (the default)."""
        return None

    @classmethod
    def build(cls, cfg: C) -> "ImageClassificationData":
        """The data set; called after :meth:`check`."""
        raise NotImplementedError(f"data source {cls.name} lacks build()")


class _Rooted(Protocol):
    root: str


def root(cfg: _Rooted) -> str:
    """``cfg.root`` as a string ('' when unset)."""
    return str(cfg.root or "")
