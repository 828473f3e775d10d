"""The layering of ``src/dlcomm`` is the one docs/architecture.md draws, edge for edge.

The rule lives in one place, the table of docs/architecture.md's "Layering" section: one row per
unit (a subpackage ``train/``, a top-level module ``run.py``, or the package's own
``__init__.py``), listed from the top of the stack down, each with the units it imports. This
test reads that table and the code's imports and fails, one line each, on

- an import the table does not list (``file:line: a imports b``, and the rule it breaks),
- a listed import nothing makes any more (the table would be claiming a dependency that is gone),
- a listed import that points up the table without being among the section's declared
  exceptions, or an exception that does not point up,
- a unit with no row, or a row naming no unit.

What counts as ``a`` importing ``b``, wherever it sits in ``a``'s files: a statement at the
module's top; one inside a function (deferred for its cost, torch's for instance: still a
dependency); one under ``if TYPE_CHECKING:`` (the types ``a`` is written against: a dependency
that costs nothing at run time); and a ``"dlcomm.b.module:attribute"`` string, which importlib
resolves at run time (``plugins.py``, ``catalog.py``). Reading a package's files
(``importlib.resources``) and a subprocess's command line are not imports. Imports within a unit
are its own business and not checked. Pure ``ast``: no module of dlcomm is imported here.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, NamedTuple

REPO = Path(__file__).resolve().parents[1]
ROOT = REPO / "src" / "dlcomm"
DOC = REPO / "docs" / "architecture.md"
SECTION = "## Layering"

MODULE_LEVEL = "imports"
IN_FUNCTION = "imports (in a function)"
FOR_TYPES = "imports (for types)"
BY_NAME = "names (a string importlib resolves)"

_NAMED = re.compile(r"dlcomm((?:\.\w+)+):\w*")  # "dlcomm.train.optim:OPTIMIZERS"
_UNIT = re.compile(r"`([^`]+)`")


class Site(NamedTuple):
    """One import of another unit: where it is and how it imports."""

    path: str  # relative to the repository
    line: int
    how: str


# --- the code's imports -------------------------------------------------------------------------


def unit_of_file(parts: tuple[str, ...]) -> str:
    """The unit a file under ``src/dlcomm`` belongs to, from its path's parts."""
    return f"{parts[0]}/" if len(parts) > 1 else parts[0]


def unit_of_module(name: str, root: Path = ROOT) -> str | None:
    """The unit of the dotted module ``name`` (``dlcomm.train.loop`` -> ``train/``); ``__init__.py``
    for ``dlcomm`` itself; None outside dlcomm or for a name that is no module of it."""
    words = name.split(".")
    if words[0] != "dlcomm":
        return None
    if len(words) == 1:
        return "__init__.py"
    if (root / words[1] / "__init__.py").is_file():
        return f"{words[1]}/"
    if (root / f"{words[1]}.py").is_file():
        return f"{words[1]}.py"
    return None


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _nodes(node: ast.AST, how: str = MODULE_LEVEL) -> Iterator[tuple[ast.AST, str]]:
    """Every node below ``node`` with how an import there would import: a function's body is
    deferred, a ``TYPE_CHECKING`` block's is for types (its ``else`` runs)."""
    for child in ast.iter_child_nodes(node):
        inner = how
        if how == MODULE_LEVEL and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            inner = IN_FUNCTION
        if isinstance(child, ast.If) and _type_checking(child):
            yield child.test, how
            for statement in child.body:
                yield statement, FOR_TYPES
                yield from _nodes(statement, FOR_TYPES)
            for statement in child.orelse:
                yield statement, how
                yield from _nodes(statement, how)
            continue
        yield child, inner
        yield from _nodes(child, inner)


def _targets(
    node: ast.Import | ast.ImportFrom | ast.Constant, package: tuple[str, ...], root: Path
) -> list[str | None]:
    """The units an import node (or a string) names; ``package``: the dotted parts of the package
    the file is in (``("dlcomm", "train")``), for relative imports."""
    if isinstance(node, ast.Import):
        return [unit_of_module(alias.name, root) for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        if node.level == 0:
            base = node.module or ""
        else:  # ``.`` is the file's own package, each further dot one level up
            base = ".".join((*package[: len(package) - node.level + 1], *([node.module] if node.module else [])))
        if base != "dlcomm":
            return [unit_of_module(base, root)]
        # ``from dlcomm import progress, __version__``: a module of its own, or the package's attribute
        return [unit_of_module(f"dlcomm.{alias.name}", root) or "__init__.py" for alias in node.names]
    found = _NAMED.fullmatch(node.value) if isinstance(node.value, str) else None
    return [unit_of_module(f"dlcomm{found.group(1)}", root)] if found else []


def references(source: str, parts: tuple[str, ...], root: Path = ROOT) -> list[tuple[str, int, str]]:
    """``(unit, line, how)`` for each import in ``source`` of a unit other than its own; ``parts``:
    the file's path below ``dlcomm``."""
    own = unit_of_file(parts)
    package = ("dlcomm", *parts[:-1])
    found = []
    for node, how in _nodes(ast.parse(source)):
        if not isinstance(node, (ast.Import, ast.ImportFrom, ast.Constant)):
            continue
        for unit in dict.fromkeys(_targets(node, package, root)):
            if unit is not None and unit != own:
                found.append((unit, node.lineno, BY_NAME if isinstance(node, ast.Constant) else how))
    return found


def import_graph(root: Path = ROOT) -> dict[tuple[str, str], list[Site]]:
    """``{(importer, imported): [sites]}`` over every file of the package under ``root``."""
    graph: dict[tuple[str, str], list[Site]] = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts
        shown = str(path.relative_to(root.parents[1]))
        for unit, line, how in references(path.read_text(), parts, root):
            graph.setdefault((unit_of_file(parts), unit), []).append(Site(shown, line, how))
    return graph


def units(root: Path = ROOT) -> set[str]:
    found = {f"{path.name}/" for path in root.iterdir() if (path / "__init__.py").is_file()}
    return found | {path.name for path in root.glob("*.py")}


# --- the documented layering ---------------------------------------------------------------------


@dataclass
class Layering:
    """docs/architecture.md's table: the units top down, each with the units it imports, and the
    edges that point up the table on purpose."""

    order: list[str] = field(default_factory=list)
    imports: dict[str, set[str]] = field(default_factory=dict)
    exceptions: set[tuple[str, str]] = field(default_factory=set)


def documented(text: str) -> Layering:
    """The layering section's table (``| floor | unit | imports | why |``, a row a unit, top down)
    and its exceptions (``- `a` -> `b`, `c`: why``)."""
    section = text.split(f"\n{SECTION}\n", 1)[1].split("\n## ", 1)[0]
    layering = Layering()
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 4 and (unit := _UNIT.fullmatch(cells[1])):
            layering.order.append(unit.group(1))
            layering.imports[unit.group(1)] = set(_UNIT.findall(cells[2]))
        elif line.startswith("- `") and " -> " in line:
            source, targets = line[2:].split(":", 1)[0].split(" -> ", 1)
            if importer := _UNIT.fullmatch(source.strip()):
                layering.exceptions |= {(importer.group(1), target) for target in _UNIT.findall(targets)}
    return layering


# --- the check -----------------------------------------------------------------------------------


WHERE = "docs/architecture.md's layering"


def problems(graph: dict[tuple[str, str], list[Site]], layering: Layering, present: set[str]) -> list[str]:
    """One line per way the code and the documented layering disagree (empty: they agree)."""
    return _rows(layering, present) + _imports(graph, layering) + _claims(graph, layering)


def _up(layering: Layering, source: str, target: str) -> bool:
    """Whether ``source`` importing ``target`` points up the table without being an exception."""
    order = layering.order
    return (
        source in order
        and target in order
        and order.index(target) < order.index(source)
        and (source, target) not in layering.exceptions
    )


def _rows(layering: Layering, present: set[str]) -> list[str]:
    """A unit without a row, a row without a unit, a unit with two."""
    rows = set(layering.order)
    return (
        [
            f"{unit} has no row in {WHERE}: add one where it sits, with what it imports and why"
            for unit in sorted(present - rows)
        ]
        + [
            f"{WHERE} has a row for {unit}, no module or package of src/dlcomm: remove it"
            for unit in sorted(rows - present)
        ]
        + [f"{WHERE} has two rows for {unit}: keep one" for unit in sorted(rows) if layering.order.count(unit) > 1]
    )


def _imports(graph: dict[tuple[str, str], list[Site]], layering: Layering) -> list[str]:
    """Each import the table does not allow, at its first site."""
    found = []
    for (source, target), sites in sorted(graph.items()):
        allowed = layering.imports.get(source, set())
        if target in allowed:
            continue
        site, more = sites[0], f" (and {len(sites) - 1} more)" if len(sites) > 1 else ""
        said = f"{site.path}:{site.line}: {source} {site.how} {target}{more}"
        listed = ", ".join(sorted(allowed)) or "none"
        if _up(layering, source, target):
            found.append(
                f"{said}, against the layering: {target} sits above {source} in {WHERE} ({source} may import: {listed})"
            )
        else:
            found.append(
                f"{said}, which {WHERE} does not list ({source} may import: {listed}): remove it, or add it with why"
            )
    return found


def _claims(graph: dict[tuple[str, str], list[Site]], layering: Layering) -> list[str]:
    """What the table claims beyond the code, or against its own order."""
    found, order = [], layering.order
    for source in order:
        for target in sorted(layering.imports[source]):
            if (source, target) not in graph:
                found.append(
                    f"{WHERE} lets {source} import {target}, but nothing in {source} does: remove it from the row"
                )
            elif _up(layering, source, target):
                found.append(
                    f"{WHERE} lets {source} import {target}, which sits above it: move a row, or declare the exception"
                )
    for source, target in sorted(layering.exceptions):
        if target not in layering.imports.get(source, set()):
            found.append(f"{WHERE} declares the exception {source} -> {target}, which {source}'s row does not list")
        elif {source, target} <= set(order) and order.index(target) > order.index(source):
            found.append(f"{WHERE} declares the exception {source} -> {target}, which points down the table: drop it")
        for site in graph.get((source, target), []):  # a statement up the table would close an import cycle
            if site.how in (MODULE_LEVEL, IN_FUNCTION):
                found.append(
                    f"{site.path}:{site.line}: {source} {site.how} {target}, up the table: an exception may only "
                    "name (a string) or type its target; move the code, or a row"
                )
    return found


def test_the_documented_layering_is_the_real_one() -> None:
    graph = import_graph()
    assert ("launch/", "train/") in graph and ("train/", "algorithms/") in graph, "the walk found no imports"
    found = problems(graph, documented(DOC.read_text()), units())
    assert not found, "\n".join(found)


CHOICES = {"algorithms/", "tasks/", "compress/", "models/", "data/"}
RUN = {"launch/", "tracking/", "train/", "compose.py", "catalog.py", "run.py", "cli.py"}
RULES = {  # docs/architecture.md's rules under the table: unit -> what sits above it and it may not import
    "config/": RUN | CHOICES | {"comm/", "topology/", "metrics/", "spec.py"},
    "comm/": RUN | CHOICES,
    "topology/": RUN | CHOICES | {"comm/"},
    "metrics/": RUN | CHOICES | {"comm/"},
    **{choice: RUN for choice in CHOICES},
    "train/": {"launch/", "tracking/", "compose.py", "catalog.py", "run.py", "cli.py"},
}


def test_the_documented_layering_keeps_its_rules() -> None:
    """The table itself, not only its agreement with the code: moving a row to let an import
    through may not break a rule the section states; a rule's unit reaches a floor above it only
    through a declared exception that names its target in a string (``config/``'s group records),
    never an import, not even for types."""
    layering = documented(DOC.read_text())
    above = {unit: set(layering.order[: layering.order.index(unit)]) for unit in layering.order}
    broken = [(unit, upper) for unit, uppers in RULES.items() for upper in sorted(uppers - above[unit])]
    assert not broken, f"rows moved against the stated rules (unit, what must sit above it): {broken}"
    graph = import_graph()
    reached = {(unit, upper) for unit, uppers in RULES.items() for upper in layering.imports[unit] & uppers}
    by_name_only = {
        edge for edge in reached if edge in layering.exceptions and all(site.how == BY_NAME for site in graph[edge])
    }
    assert reached == by_name_only, (
        f"a rule's unit reaches above it other than by a string: {sorted(reached - by_name_only)}"
    )


# --- the checker's own cases ---------------------------------------------------------------------


def test_every_kind_of_import_is_an_edge(tmp_path: Path) -> None:
    root = tmp_path / "src" / "dlcomm"
    for package in ("config", "train", "comm", "algorithms"):
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text("")
    for module in ("__init__", "errors", "progress"):
        (root / f"{module}.py").write_text("")
    source = (
        "from typing import TYPE_CHECKING\n"
        "import dlcomm.errors\n"
        "from dlcomm import progress, __version__\n"
        "from ..comm import channel\n"
        "from .base import Algorithm\n"
        "if TYPE_CHECKING:\n"
        "    from dlcomm.train.loop import TrainLoop\n"
        "def f():\n"
        "    from dlcomm.config.schema import RunConfig\n"
        "GROUP = 'dlcomm.train.optim:OPTIMIZERS'\n"
        "import numpy\n"
    )
    assert references(source, ("algorithms", "x.py"), root) == [
        ("errors.py", 2, MODULE_LEVEL),
        ("progress.py", 3, MODULE_LEVEL),
        ("__init__.py", 3, MODULE_LEVEL),
        ("comm/", 4, MODULE_LEVEL),
        ("train/", 7, FOR_TYPES),
        ("config/", 9, IN_FUNCTION),
        ("train/", 10, BY_NAME),
    ]


def test_a_forbidden_import_fails_in_one_line_naming_it() -> None:
    layering = Layering(["train/", "config/"], {"train/": {"config/"}, "config/": set()})
    graph = {
        ("train/", "config/"): [Site("src/dlcomm/train/loop.py", 3, MODULE_LEVEL)],
        ("config/", "train/"): [Site("src/dlcomm/config/validate.py", 12, IN_FUNCTION)],
    }
    assert problems(graph, layering, {"train/", "config/"}) == [
        "src/dlcomm/config/validate.py:12: config/ imports (in a function) train/, against the layering: "
        "train/ sits above config/ in docs/architecture.md's layering (config/ may import: none)"
    ]


def test_the_table_cannot_claim_more_than_the_code() -> None:
    layering = Layering(
        ["run.py", "train/", "config/"], {"run.py": {"config/"}, "train/": {"run.py"}, "config/": set()}
    )
    found = problems({}, layering, {"run.py", "train/", "config/", "cli.py"})
    assert found == [
        "cli.py has no row in docs/architecture.md's layering: add one where it sits, with what it imports and why",
        "docs/architecture.md's layering lets run.py import config/, but nothing in run.py does: remove it from the row",
        "docs/architecture.md's layering lets train/ import run.py, but nothing in train/ does: remove it from the row",
    ]
