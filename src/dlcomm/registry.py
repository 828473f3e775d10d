"""One registration pattern for the choices of a config group (algorithms, data sets, optimizers,
models, tasks, launchers).

A choice is a class with a ``name`` (the ``group=<name>`` choice) and a ``Config`` dataclass,
decorated with its group's :meth:`Registry.register` in its own module. :meth:`Registry.all`
imports the group's modules once (every module of its package, or those ``modules()`` names), so
a new choice needs nothing but its file and its YAML, then adds the installed plugins'
(:mod:`dlcomm.plugins`, one entry point group per registry). :meth:`Registry.get` of a name whose
module is named after it imports that module alone first (asking for one launcher does not load
the others' machinery). Those modules load without torch: composing a configuration imports them.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Callable, Generic, Optional, TypeVar

from dlcomm.errors import UserError

T = TypeVar("T")


class Registry(Generic[T]):
    """The classes of one group by name. ``what`` names a choice in messages ("algorithm");
    ``key`` is its config key ("algo.name"); ``package`` the package whose modules register
    (None: they register on their own import); ``plugins`` adds the installed plugins' classes
    to a name -> class dict (refusing taken names); ``modules``, when given, names the modules of
    ``package`` that hold choices (the others are not imported: a package that also holds the
    choices' machinery, such as ``dlcomm.launch``)."""

    def __init__(
        self,
        what: str,
        key: str,
        package: str | None,
        plugins: Callable[[dict[str, T]], None],
        modules: Optional[Callable[[], list[str]]] = None,
    ) -> None:
        self.what, self.key, self.package, self.plugins, self.modules = what, key, package, plugins, modules
        self._classes: dict[str, T] = {}
        self._discovered = False

    def register(self, cls: T) -> T:
        """Decorator: ``cls`` under its ``name`` (two classes under one name is a programming error)."""
        name = cls.name  # type: ignore[attr-defined]
        if name in self._classes and self._classes[name] is not cls:
            raise ValueError(f"two {self.what}s are registered as {name!r}")
        self._classes[name] = cls
        return cls

    def _module_names(self) -> list[str]:
        if self.package is None:
            return []
        if self.modules is not None:
            return self.modules()
        package = importlib.import_module(self.package)
        return [module.name for module in pkgutil.iter_modules(package.__path__)]

    def all(self) -> dict[str, T]:
        """Every class by name: the package's (its modules imported once) and the plugins'."""
        if not self._discovered:
            for module in self._module_names():
                importlib.import_module(f"{self.package}.{module}")
            self.plugins(self._classes)
            self._discovered = True
        return dict(self._classes)

    def get(self, name: str) -> T:
        """The class of ``name``; a one-line :class:`UserError` listing the names otherwise."""
        if name not in self._classes and not self._discovered and name in self._module_names():
            importlib.import_module(f"{self.package}.{name}")  # this choice's module alone
        if name in self._classes:
            return self._classes[name]
        classes = self.all()
        if name not in classes:
            raise UserError(f"{self.key}={name} is unknown: choose one of {', '.join(sorted(classes))}")
        return classes[name]

    def find(self, name: str) -> Optional[T]:
        """Like :meth:`get`, but None for a name no class has (e.g. an old run's tag)."""
        try:
            return self.get(name)
        except UserError:
            return None
