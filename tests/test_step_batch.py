"""The samples one rank consumes per optimizer step, ``train.batch_size * train.comm_interval``, are
computed by one function (:func:`dlcomm.train.plan.step_batch`) wherever the code needs them: the
plan, the rank's reporter and the compute profile's batches (issue 59, item 3: it was written three
ways). Read from the source: a product of a ``batch_size`` with a ``comm_interval`` (or a name bound
to one) anywhere else is a second way."""

from __future__ import annotations

import ast
from pathlib import Path

import dlcomm

SOURCE = Path(dlcomm.__file__).parent


def _products(tree: ast.AST) -> list[int]:
    """Lines of ``*.batch_size * *.comm_interval`` (either order, or through a local name)."""
    intervals = {
        target.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Attribute) and node.value.attr == "comm_interval"
        for target in node.targets
        if isinstance(target, ast.Name)
    }

    def kind(node: ast.AST) -> str:
        if isinstance(node, ast.Attribute) and node.attr in ("batch_size", "comm_interval"):
            return node.attr
        return "comm_interval" if isinstance(node, ast.Name) and node.id in intervals else ""

    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.BinOp)
        and isinstance(node.op, ast.Mult)
        and {kind(node.left), kind(node.right)} == {"batch_size", "comm_interval"}
    ]


def test_the_step_batch_is_computed_in_one_place() -> None:
    found = []
    for path in sorted(SOURCE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for function in ast.walk(tree):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if path.name == "plan.py" and function.name == "step_batch":
                    continue
                found += [f"{path.relative_to(SOURCE)}:{line}" for line in _products(function)]
    assert sorted(set(found)) == [], "use dlcomm.train.plan.step_batch(cfg.train)"


def test_the_reader_finds_the_three_ways_it_was_written() -> None:
    written = """
def a(train):
    return train.batch_size * train.comm_interval
def b(cfg):
    x = cfg.train.comm_interval
    return f(cfg.train.batch_size * x)
def c(cfg):
    return cfg.train.comm_interval * cfg.train.batch_size
"""
    assert len(_products(ast.parse(written))) == 3
