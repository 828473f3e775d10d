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


#: Strings tried against a declared pattern: blank, whitespace, path separators and dots, every kind of
#: control character (a line break, a tab, NUL, DEL), and a long one. Each the pattern refuses is a case.
PATTERN_PROBES = (
    "",
    " ",
    "a b",
    ".hidden",
    "../up",
    "a/b",
    "a\\b",
    "a\nb",
    "a\rb",
    "a\tb",
    "a\x00b",
    "a\x7fb",
    "x" * 300,
)

#: The rules of a domain (dlcomm.config.schema.domain) that refuse values; ``anything`` refuses none.
RULES = ("low", "above", "high", "below", "length", "one_of", "pattern", "max_chars")

#: (key, rule) pairs with no value of the field's type outside that rule, and why. Empty: every
#: declared rule of every field has one (a new entry needs its reason).
NONE_OUTSIDE: dict[tuple[str, str], str] = {}


def _outside(rules: dict, kind: object, default: object) -> list[tuple[str, object, bool]]:
    """``(rule, value, whole)`` for each declared rule: a value of the field's type just outside that
    rule and inside the others where they allow (``whole``: the value is the whole list, not one
    element); for a pattern, every probe of :data:`PATTERN_PROBES` it refuses."""
    listed = typing.get_origin(kind) in (list, typing.List)
    element = typing.get_args(kind)[0] if listed else kind
    values: list[tuple[str, object, bool]] = []
    if element is int:
        if rules.get("low") is not None:
            values.append(("low", int(math.ceil(rules["low"])) - 1, False))
        if rules.get("high") is not None:
            values.append(("high", int(math.floor(rules["high"])) + 1, False))
        if rules.get("below") is not None:
            values.append(("below", int(math.ceil(rules["below"])), False))
        if rules.get("above") is not None:
            values.append(("above", int(math.floor(rules["above"])), False))
        if rules.get("one_of"):  # a set of numbers: a gap between its members (5 of 4 or 8), else past it
            allowed = rules["one_of"]
            gap = next((v for v in range(min(allowed), max(allowed)) if v not in allowed), max(allowed) + 1)
            values.append(("one_of", gap, False))
    elif element is float:
        for bound, step in (("low", -1), ("high", 1)):
            if rules.get(bound) is not None:
                values.append((bound, float(rules[bound]) + step * max(1e-3, abs(float(rules[bound])) * 1e-3), False))
        for bound in ("below", "above"):  # an open bound refuses itself
            if rules.get(bound) is not None:
                values.append((bound, float(rules[bound]), False))
    elif element is str:
        if rules.get("one_of"):
            values.append(("one_of", "not-" + rules["one_of"][0], False))
        if rules.get("max_chars") is not None:
            values.append(("max_chars", "x" * (rules["max_chars"] + 1), False))
        if rules.get("pattern"):
            fits = [text for text in PATTERN_PROBES if len(text) <= (rules.get("max_chars") or len(text))]
            values += [("pattern", text, False) for text in fits if not re.fullmatch(rules["pattern"], text)]
    if listed and rules.get("length") is not None and isinstance(default, list) and default:
        values.append(("length", [*default, default[0]], True))  # one element more, each inside the rest
    return values


def _default(item: dataclasses.Field) -> object:
    if item.default is not dataclasses.MISSING:
        return item.default
    return item.default_factory() if item.default_factory is not dataclasses.MISSING else None


def _cases() -> list[tuple[str, type, str, str, object, bool]]:
    cases = []
    for key, schema, item, kind in FIELDS:
        rules = item.metadata.get("limits")
        if rules:
            cases += [(key, schema, item.name, *case) for case in _outside(rules, kind, _default(item))]
    return cases


CASES = _cases()


def test_the_generated_cases_reach_most_fields() -> None:
    assert len({key for key, *_ in CASES}) >= 100


def test_every_declared_rule_of_every_field_has_a_value_outside_it() -> None:
    """Before: a pattern-checked field (launcher.partition, .account, .qos, .constraint of both SLURM
    launchers, tracking.run_name's control characters) got no case, its probes all matching the
    one-line pattern, and no list got one of another length."""
    covered = {(key, rule) for key, _, _, rule, _, _ in CASES}
    declared = {
        (key, rule)
        for key, _, item, _ in FIELDS
        for rule in RULES
        if item.metadata.get("limits", {}).get(rule) is not None
    }
    missing = sorted(declared - covered - set(NONE_OUTSIDE))
    assert not missing, f"{len(missing)} declared rules without a value outside them: {missing}"
    assert not set(NONE_OUTSIDE) - declared, "NONE_OUTSIDE names a rule no field declares"


def test_a_one_line_field_refuses_every_control_character_and_takes_any_other() -> None:
    """The fields whose value must stay one line (an #SBATCH line, a run's name, an experiment's
    folder) refuse each control character anywhere in it, and take printable text of any script."""
    one_line = [
        (key, item)
        for key, _, item, _ in FIELDS
        if "control character" in (item.metadata.get("limits") or {}).get("means", "")
    ]
    assert len({key for key, _ in one_line}) >= 6  # the SLURM launchers' four, run_name, experiment
    for key, item in one_line:
        for code in [*range(0x20), 0x7F]:
            with pytest.raises(UserError, match=rf"^{re.escape(key)}=.* is invalid: .*must match "):
                check_value(key, f"gpu{chr(code)}x", item)
        check_value(key, "gpu-a100 node_1 élan 計算", item)


#: The words of each rule's refusal (dlcomm.config.validate), for the rule the case is outside.
RULE_WORDS = {"pattern": "must match ", "max_chars": "characters (it has ", "one_of": "must be ", "length": "give "}


@pytest.mark.parametrize(
    "key,schema,field_name,rule,value,whole",
    CASES,
    ids=[f"{k}={ascii(v)[:20]}" for k, _, _, _, v, _ in CASES],
)
def test_a_value_just_outside_a_declared_domain_is_refused_naming_the_key(
    key, schema, field_name, rule, value, whole
) -> None:
    node = OmegaConf.structured(schema)
    # a field without a default (optim.lr in the optimizers' base) reads as missing, not as a list
    listed = not OmegaConf.is_missing(node, field_name) and OmegaConf.is_list(node[field_name])
    field = {item.name: item for item in dataclasses.fields(schema)}[field_name]
    with pytest.raises(UserError, match=rf"^{re.escape(key)}=.* is invalid: ") as refused:
        check_value(key, [value] if listed and not whole else value, field)
    assert "\n" not in str(refused.value) and RULE_WORDS.get(rule, "") in str(refused.value)


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
