"""The samples one rank consumes per optimizer step, ``train.batch_size * train.comm_interval``, are
computed by one function (:func:`dlcomm.metrics.batch.step_batch`; on the typed configuration
:func:`dlcomm.train.plan.step_batch`) wherever the code needs them: the plan, the rank's reporter,
the compute profile's batches, the report's global mini-batch and samples per second, the
benchmarks (issue 59, item 3: it was written five ways). Read from the source: a product of a
``batch_size`` with a ``comm_interval`` (an attribute, a recorded parameter's key such as
``"params.train.comm_interval"``, or a name bound to either) anywhere else is a second way."""

from __future__ import annotations

import ast
from pathlib import Path

import dlcomm

SOURCE = Path(dlcomm.__file__).parent
SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
KINDS = ("batch_size", "comm_interval")


def _kinds(node: ast.AST, bound: dict[str, set[str]]) -> set[str]:
    """Which of :data:`KINDS` the expression ``node`` reads: ``x.batch_size``, ``run["params.train.batch_size"]``,
    ``train.get("comm_interval", 1)``, or a name ``bound`` to such an expression; what a call of
    ``step_batch`` reads is that function's business."""
    if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "step_batch":
        return set()
    if isinstance(node, ast.Attribute) and node.attr in KINDS:
        return {node.attr}
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.split(".")[-1] in KINDS:
        return {node.value.split(".")[-1]}
    if isinstance(node, ast.Name):
        return set(bound.get(node.id, set()))
    return set().union(*(_kinds(child, bound) for child in ast.iter_child_nodes(node)))


def _factors(node: ast.AST) -> list[ast.AST]:
    """The operands of a chain of multiplications (``a * b * c``: a, b, c)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return _factors(node.left) + _factors(node.right)
    return [node]


def _products(tree: ast.AST) -> list[int]:
    """Lines where one factor of a product reads a ``batch_size`` and another a ``comm_interval``."""
    bound: dict[str, set[str]] = {}
    for node in ast.walk(tree):  # names bound to what reads either (in source order is enough here)
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    bound[target.id] = bound.get(target.id, set()) | _kinds(node.value, bound)
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            kinds = [_kinds(factor, bound) for factor in _factors(node)]
            if any(
                "batch_size" in a and "comm_interval" in b
                for i, a in enumerate(kinds)
                for j, b in enumerate(kinds)
                if i != j
            ):
                lines.append(node.lineno)
    return lines


def test_the_step_batch_is_computed_in_one_place() -> None:
    found = []
    for root in (SOURCE, SCRIPTS):
        for path in sorted(root.rglob("*.py")):
            if path == SOURCE / "metrics" / "batch.py":
                continue
            tree = ast.parse(path.read_text(), str(path))
            for function in ast.walk(tree):
                if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found += [f"{path.relative_to(root.parent)}:{line}" for line in _products(function)]
    assert sorted(set(found)) == [], "use dlcomm.metrics.batch.step_batch (dlcomm.train.plan.step_batch(cfg.train))"


def test_the_reader_finds_the_ways_it_was_written() -> None:
    written = """
def a(train):
    return train.batch_size * train.comm_interval
def b(cfg):
    x = cfg.train.comm_interval
    return f(cfg.train.batch_size * x)
def c(cfg):
    return cfg.train.comm_interval * cfg.train.batch_size
def d(run):
    return float(run["tags.world_size"]) * float(run["params.train.batch_size"]) * float(run.get("params.train.comm_interval", 1) or 1)
def e(runs):
    interval = runs.get("params.train.comm_interval", 1).astype(float)
    return runs["world"] * runs["params.train.batch_size"].astype(float) * interval
def f(train):
    return train["batch_size"] * train.get("comm_interval", 1)
def fine(train, world_size, eval_batch_size, runs):
    runs = runs.assign(global_batch=runs["world"] * step_batch(runs["params.train.batch_size"], interval))
    return train.batch_size * world_size, train.comm_interval * 2, eval_batch_size * train.comm_interval, runs["world"] * 2
"""
    tree = ast.parse(written)
    assert [len(_products(function)) > 0 for function in tree.body] == [True] * 6 + [False]
