"""One registration pattern, and one way to find a choice, for every config group (algorithms,
compressors, data sets, optimizers, models, tasks, launchers).

A choice is a class with a ``Config`` dataclass beside it, decorated with its group's
:meth:`Registry.register` in its own module. Its name (the ``group=<name>`` choice) is written
once (:func:`choice_name`): a class whose ``Config`` is its own takes it from that ``Config``'s
``name`` default (``AllreduceConfig.name = "allreduce"``); a class whose ``Config`` several choices
share (``ResNetConfig``: resnet18 ... resnet101) sets ``name`` itself. A class that states both a
``name`` and a ``Config`` whose ``name`` default differs is refused when it registers.

How a group finds its choices, the same for every group: :meth:`Registry.all` imports the group's
``home`` once (a module: that module; a package: each of its modules that holds a choice, i.e.
decorates a class with ``@register`` at its top level, read from its source, so that a package
that also holds the group's machinery, as :mod:`dlcomm.launch` does, loads none of it), then adds
the installed plugins' classes (:mod:`dlcomm.plugins`, one entry point group per registry). Composing
stores each choice it names in Hydra's ConfigStore as ``<group>/<name>`` (its ``Config`` with
``name`` set, :func:`dlcomm.catalog.stored_choices`; found by :meth:`Registry.own`, which imports
as few modules as tell), so a new choice needs nothing but its class; a YAML
file ``configs/<group>/<name>.yaml`` exists only for a choice that sets values its schema does not
(a preset: vit_s's sizes, a data set's root, task=gan's settings) and then wins over the stored
node. :func:`dlcomm.catalog.choices` lists the union. :meth:`Registry.get` of a name whose module
is named after it imports that module alone first (asking for one launcher does not load the
others' machinery). Those modules load without torch: composing a configuration imports them.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import re
from typing import Any, Generic, Optional, TypeVar

from dlcomm.config.schema import GROUPS
from dlcomm.errors import UserError
from dlcomm.groups import MISSING, Group, choice_name, config_name

__all__ = ["MISSING", "Registry", "choice_name", "config_name", "registry_of"]

T = TypeVar("T")

_REGISTERS = re.compile(r"^@register\b", re.MULTILINE)  # a module that holds a choice: `@register` on a top-level class


def _source(module: str) -> str:
    """The source text of ``module``, found and read without importing it ("" where there is none)."""
    spec = importlib.util.find_spec(module)
    get_source = getattr(spec.loader, "get_source", None) if spec is not None else None
    text = get_source(module) if get_source is not None else None
    return text if isinstance(text, str) else ""


class Registry(Generic[T]):
    """The classes of one group by name, as the group's record (:class:`dlcomm.groups.Group`)
    says: ``what`` names a choice in messages ("algorithm"); ``key`` is its config key
    ("algo.name"); ``home`` the package or module whose import registers the group's own choices (a
    package: each of its modules that holds one, imported once: :meth:`choice_modules`); the
    installed plugins' classes of its entry-point group join them (:func:`dlcomm.plugins.register_plugins`,
    refusing taken names). One per group: :func:`registry_of`."""

    def __init__(self, group: Group) -> None:
        self.group = group
        self.what, self.key, self.home = group.what, f"{group.config_group}.name", group.home
        self._classes: dict[str, T] = {}
        self._discovered = False  # every class: the home's and the plugins'
        self._imported = False  # the home's own modules, every one
        self._modules: Optional[list[str]] = None

    def register(self, cls: T) -> T:
        """Decorator: ``cls`` under its name (:func:`choice_name`, set as ``cls.name``); two classes
        under one name, or a class whose name and Config disagree, is a programming error."""
        name = choice_name(cls)  # type: ignore[arg-type]
        if name in self._classes and self._classes[name] is not cls:
            raise ValueError(f"two {self.what}s are registered as {name!r}")
        cls.name = name  # type: ignore[attr-defined]
        self._classes[name] = cls
        return cls

    def choice_modules(self) -> list[str]:
        """The modules of the package ``home`` that hold choices: those whose source decorates a
        class with ``@register`` at its top level ([] for a module ``home``: importing it registers
        them). Read, not imported: the others (a base class, the machinery) load only when used."""
        if self._modules is None:
            home = importlib.import_module(self.home)
            path = getattr(home, "__path__", None)
            found = []
            for module in pkgutil.iter_modules(path) if path is not None else []:
                if _REGISTERS.search(_source(f"{self.home}.{module.name}")):
                    found.append(module.name)
            self._modules = found
        return list(self._modules)

    def _import_own(self) -> None:
        if not self._imported:
            importlib.import_module(self.home)
            for module in self.choice_modules():
                importlib.import_module(f"{self.home}.{module}")
            self._imported = True

    def all(self) -> dict[str, T]:
        """Every class by name: the home's (its modules imported once) and the plugins'."""
        if not self._discovered:
            from dlcomm.plugins import register_plugins  # deferred: it reads the entry points

            self._import_own()
            register_plugins(self.group, self._classes)
            self._discovered = True
        return dict(self._classes)

    def own(self, name: str) -> Optional[T]:
        """The class of ``name`` among the home's own choices (or one already known), importing
        as little as tells: the module named after it alone, else those whose source writes the
        name in quotes, else every module of the home; None for a name none of them registers.
        The plugins are not loaded (:meth:`all` adds them): composing asks this of a group that no
        installed plugin adds to."""
        if name not in self._classes and name in self.choice_modules():
            importlib.import_module(f"{self.home}.{name}")
        quoted = (f'"{name}"', f"'{name}'")  # a module that writes the name (a class's `name`, a Config's default)
        for module in self.choice_modules():
            if name in self._classes:
                break
            if any(text in _source(f"{self.home}.{module}") for text in quoted):
                importlib.import_module(f"{self.home}.{module}")
        if name not in self._classes:
            self._import_own()
        return self._classes.get(name)

    def get(self, name: str) -> T:
        """The class of ``name``; a one-line :class:`UserError` listing the names otherwise."""
        if name not in self._classes and not self._discovered and name in self.choice_modules():
            importlib.import_module(f"{self.home}.{name}")  # this choice's module alone
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


_ONE: dict[str, Registry[Any]] = {}  # the Registry of each group, made when first asked for


def registry_of(group: str) -> Registry[Any]:
    """The one :class:`Registry` of config group ``group`` (a key of :data:`dlcomm.config.schema.GROUPS`),
    made from its record the first time it is asked for. A group's choice modules register with
    it (``register = registry_of("algo").register``; the packages name it with its class's type:
    ``ALGORITHMS: Registry[type[Algorithm]] = registry_of("algo")``); a new group needs no
    registry module of its own."""
    found = _ONE.get(group)
    if found is None:
        found = _ONE[group] = Registry(GROUPS[group])
    return found
