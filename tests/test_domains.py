"""Every knob declares the values it takes (issue 49): a walk over every field of every schema
(each group's, each choice's, the installed plugins' included) finds none without a domain, and
each declared domain refuses a value just outside it in one line that names the key.

A domain is declared with :func:`dlcomm.config.schema.domain` (a range, an allowed set, a pattern, a
length, or ``anything=`` with the reason every value is fine). Booleans and :class:`Choice` enums are
closed by their type, nested schemas are walked, and a ``name`` field is the choice itself, which
Hydra's defaults list and the group's registry refuse when unknown.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import re
import typing

import pytest
from omegaconf import OmegaConf

from dlcomm.compose import all_schemas
from dlcomm.config.validate import check_value, check_values
from dlcomm.errors import UserError

CLOSED_BY_TYPE = (bool,)


def _walk(schema: type, prefix: str, seen: set[type], found: list[tuple[str, type, dataclasses.Field, object]]) -> None:
    hints = typing.get_type_hints(schema)
    for item in dataclasses.fields(schema):
        kind = hints[item.name]
        if dataclasses.is_dataclass(kind):
            if kind not in seen:
                seen.add(kind)
                _walk(kind, f"{prefix}{item.name}.", seen, found)
            continue
        found.append((f"{prefix}{item.name}", schema, item, kind))


def _fields() -> list[tuple[str, type, dataclasses.Field, object]]:
    found: list[tuple[str, type, dataclasses.Field, object]] = []
    seen: set[type] = set()
    for group, _, schema in all_schemas():
        if schema not in seen:
            seen.add(schema)
            _walk(schema, f"{group}." if group else "", seen, found)
    return found


FIELDS = _fields()


def _needs_a_domain(item: dataclasses.Field, kind: object) -> bool:
    if item.name == "name" or kind in CLOSED_BY_TYPE:
        return False
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return False
    # RunConfig.algo: a group, walked as each algorithm's Config
    return not (item.name == "algo" and kind is typing.Any)


def test_every_field_of_every_schema_declares_its_domain() -> None:
    missing = [
        f"{key} ({schema.__module__}.{schema.__qualname__})"
        for key, schema, item, kind in FIELDS
        if _needs_a_domain(item, kind) and "limits" not in item.metadata
    ]
    assert len(FIELDS) > 200  # the walk reached every group's schemas
    assert not missing, f"{len(missing)} fields without a declared domain:\n" + "\n".join(missing)


def _outside(rules: dict, kind: object) -> list[object]:
    """Values of the field's type just outside its declared domain."""
    element = typing.get_args(kind)[0] if typing.get_origin(kind) in (list, typing.List) else kind
    values: list[object] = []
    if element is int:
        if rules.get("low") is not None:
            values.append(int(math.ceil(rules["low"])) - 1)
        if rules.get("high") is not None:
            values.append(int(math.floor(rules["high"])) + 1)
        if rules.get("below") is not None:
            values.append(int(math.ceil(rules["below"])))
        if rules.get("above") is not None:
            values.append(int(math.floor(rules["above"])))
        if rules.get("one_of"):  # a set of numbers: a gap between its members (5 of 4 or 8), else past it
            allowed = rules["one_of"]
            values.append(next((v for v in range(min(allowed), max(allowed)) if v not in allowed), max(allowed) + 1))
    elif element is float:
        for bound, step in (("low", -1), ("high", 1)):
            if rules.get(bound) is not None:
                values.append(float(rules[bound]) + step * max(1e-3, abs(float(rules[bound])) * 1e-3))
        for bound in ("below", "above"):  # an open bound refuses itself
            if rules.get(bound) is not None:
                values.append(float(rules[bound]))
    elif element is str:
        if rules.get("one_of"):
            values.append("not-" + rules["one_of"][0])
        if rules.get("max_chars") is not None:
            values.append("x" * (rules["max_chars"] + 1))
        if rules.get("pattern"):
            values += [
                text for text in ("", " ", "a b", "../up", "x" * 300) if not re.fullmatch(rules["pattern"], text)
            ][:1]
    return values


def _cases() -> list[tuple[str, type, str, object]]:
    cases = []
    for key, schema, item, kind in FIELDS:
        rules = item.metadata.get("limits")
        if rules:
            cases += [(key, schema, item.name, value) for value in _outside(rules, kind)]
    return cases


CASES = _cases()


def test_the_generated_cases_reach_most_fields() -> None:
    assert len({key for key, *_ in CASES}) >= 100


@pytest.mark.parametrize("key,schema,field_name,value", CASES, ids=[f"{k}={str(v)[:20]}" for k, _, _, v in CASES])
def test_a_value_just_outside_a_declared_domain_is_refused_naming_the_key(key, schema, field_name, value) -> None:
    node = OmegaConf.structured(schema)
    # a field without a default (optim.lr in the optimizers' base) reads as missing, not as a list
    listed = not OmegaConf.is_missing(node, field_name) and OmegaConf.is_list(node[field_name])
    field = {item.name: item for item in dataclasses.fields(schema)}[field_name]
    with pytest.raises(UserError, match=rf"^{re.escape(key)}=.* is invalid: "):
        check_value(key, [value] if listed else value, field)


@pytest.mark.parametrize(
    "rules,value,words",
    [
        ({"low": 0, "high": 1}, 2, "must be from 0 to 1"),
        ({"low": 0.0, "below": 1.0}, 1.0, "must be in [0.0, 1.0)"),
        ({"above": 0.0}, 0.0, "must be above 0.0"),
        ({"above": 0.0, "high": 1.0}, 0.0, "must be in (0.0, 1.0]"),
        ({"above": 0.0, "high": 1.0, "means": "the step size"}, 1.5, "the step size must be in (0.0, 1.0]"),
        ({"one_of": (4, 8)}, 5, "must be 4 or 8"),  # a set, never the range around it ("from 4 to 8")
    ],
)
def test_each_bound_is_worded_and_an_open_bound_refuses_itself(rules, value, words) -> None:
    from dlcomm.config.validate import _check_number

    full = {"low": None, "above": None, "high": None, "below": None, **rules}
    with pytest.raises(UserError, match=rf"^k={re.escape(str(value))} is invalid: {re.escape(words)}$"):
        _check_number("k", value, value, full, "", None)
    inside = (full["above"] or full["low"] or 0) + 0.5 if full["above"] is not None else full["low"]
    inside = full["one_of"][0] if full.get("one_of") else inside
    _check_number("k", inside, inside, full, "", None)


def test_the_walk_over_a_composed_run_reaches_nested_sections_and_list_elements() -> None:
    """check_values walks the typed run (dataclasses, lists, mappings) with each key's dotted name."""
    from dlcomm.compose import compose

    cfg = compose(["network=eth_1g"])
    cfg.network.inter.bandwidth_gbps = 0.0  # a nested section's field
    with pytest.raises(UserError, match=r"^network\.inter\.bandwidth_gbps=0\.0 is invalid: "):
        check_values(cfg)
    cfg = compose(["network=eth_1g"])
    cfg.network.worker_bandwidth_gbps = [10.0, math.nan]  # a list's element
    with pytest.raises(UserError, match=r"^network\.worker_bandwidth_gbps=\[10\.0, nan\] is invalid: "):
        check_values(cfg)
    check_values(compose(["network=eth_1g"]))  # a composed run passes
