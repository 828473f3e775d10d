"""Algorithms by name.

Every module of this package that defines an algorithm decorates its class with
:func:`register`; :meth:`ALGORITHMS.all <dlcomm.registry.Registry.all>` imports the package's modules once so that a new
algorithm needs nothing but its own file (its ``Config`` is stored as Hydra's ``algo/<name>``;
the one pattern: :mod:`dlcomm.registry`).

Composing a configuration imports the chosen algorithm's module (its ``Config`` goes into Hydra's
ConfigStore, its checks run), and a refusal that lists the algorithms imports every one, as does
every ``dlcomm --help`` of ``train``: an algorithm's module therefore loads without torch. It imports torch (and the comm layer's
runtime) inside the methods that run on a rank, and for annotations under ``TYPE_CHECKING``;
``tests/test_light_commands.py`` holds every algorithm and launcher to it (torch alone costs
1.5-2 s before the first line).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dlcomm.registry import Registry, registry_of

if TYPE_CHECKING:
    from dlcomm.algorithms.base import Algorithm


ALGORITHMS: Registry[type["Algorithm"]] = registry_of("algo")
register = ALGORITHMS.register
