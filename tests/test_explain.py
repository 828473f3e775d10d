"""``dlcomm config --explain <group>``: every knob with its type, value, default and the comment
written beside it in its schema."""

from __future__ import annotations

import pytest

from dlcomm.compose import compose
from dlcomm.config.explain import doc_of, explain, rows
from dlcomm.config.schema import ReportConfig, TrainConfig
from dlcomm.errors import UserError


def test_a_knob_s_doc_is_the_comment_beside_or_above_its_field() -> None:
    assert doc_of(TrainConfig, "max_steps") == "total optimizer steps after which training stops; -1: no cap"
    assert doc_of(ReportConfig, "baseline").startswith("The method speedups and MA-acceleration are measured against")


def test_every_knob_of_the_chosen_algorithm_with_its_value_and_default() -> None:
    table = {
        key: (kind, value, default, doc)
        for key, kind, value, default, doc in rows(compose(["algo=crossover", "algo.segments=3"]).algo, "algo")
    }
    assert table["algo.segments"] == (
        "int",
        "3",
        "0",
        "0: the model's top-level blocks (ResNet: stem, stages, FC); k: k balanced runs of layers",
    )
    assert set(table) == {"algo.name", "algo.segments", "algo.segmentwise", "algo.fair", "algo.gamma"}


@pytest.mark.parametrize(
    ("choice", "head", "knob", "doc"),
    [
        ("algo=allreduce", "``algo=allreduce``, AllReduce-SGD: the mean gradient", "algo.overlap", "as DDP does"),
        ("compress=topk", "``compress=topk``: top-k sparsification", "compress.ratio", "fraction of the entries"),
        ("model=resnet18", "resnet18, resnet34, resnet50, resnet101", "model.cifar_stem", "3x3 stride-1"),
        ("launcher=srun", "``launcher=srun``: inside a SLURM allocation", "launcher.partition", "SLURM partition"),
        ("optim=adam", "adam, adamw (torch)", "optim.betas", "the moments' decay rates"),
    ],
)
def test_a_stored_choice_is_explained_by_its_config(choice: str, head: str, knob: str, doc: str) -> None:
    """A choice without a YAML file (stored from its class) is documented where its Config is: the
    docstring heads the table, each knob's comment fills its row."""
    group = choice.split("=")[0]
    cfg = compose([choice])
    shown = explain(cfg, group).splitlines()
    assert shown[1].startswith(head), shown[:2]
    table = {row[0]: row for row in rows(getattr(cfg, group), group)}
    assert doc in table[knob][4], table[knob]


def test_nested_sections_are_listed_under_their_parent() -> None:
    keys = [row[0] for row in rows(compose(["network=eth_1g"]).network, "network")]
    assert keys.index("network.inter") < keys.index("network.inter.bandwidth_gbps") < keys.index("network.wide_workers")
    table = {row[0]: row for row in rows(compose(["network=eth_1g"]).network, "network")}
    assert table["network.intra.bandwidth_gbps"][3] == "800.0"  # what NetworkConfig builds intra with
    assert table["network.inter.bandwidth_gbps"][2:4] == ("1.0", "10.0")  # eth_1g's value, the default
    shown = explain(compose(["network=eth_1g"]), "network")
    assert shown.startswith("network=eth_1g (NetworkConfig)") and "network.inter.bandwidth_gbps" in shown


def test_an_unknown_group_is_refused_with_the_sections() -> None:
    with pytest.raises(UserError, match=r"--explain trian is invalid: .*pass one of algo, .*train"):
        explain(compose([]), "trian")


def test_a_false_is_shown_false() -> None:
    """(tabulate's own cell wrapping prints the text "False" as True)"""
    line = next(
        line
        for line in explain(compose(["launcher=slurm"]), "launcher").splitlines()
        if line.startswith("launcher.wait ")
    )
    assert line.split()[1:4] == ["bool", "False", "False"]
