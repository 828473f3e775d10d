"""``dlcomm config --explain <group>``: every knob with its type, value, default and its words,
written once in its field's metadata (``means``, the phrase a refusal uses, and ``doc``)."""

from __future__ import annotations

import dataclasses

import pytest

from dlcomm.compose import compose
from dlcomm.config.explain import doc_of, explain, rows
from dlcomm.config.schema import OptimConfig, ReportConfig, TrainConfig, doc, domain
from dlcomm.config.validate import check_value
from dlcomm.errors import UserError
from dlcomm.train.optim import SGDConfig


def test_a_knob_s_words_are_its_field_s_means_and_doc_and_a_refusal_reads_the_same() -> None:
    assert doc_of(TrainConfig, "max_steps") == (
        "the cap on optimizer steps (-1: no cap); training stops after this many optimizer steps"
    )
    assert doc_of(ReportConfig, "baseline").startswith("The method speedups and MA-acceleration are measured against")
    assert doc_of(TrainConfig, "amp").startswith("mixed precision")  # a knob without a domain: doc= alone
    # sgd redeclares lr for its default: its words stay its base's
    assert (
        doc_of(SGDConfig, "lr")
        == doc_of(OptimConfig, "lr")
        == ("the learning rate; applied to the global (all-worker) mean gradient")
    )
    field = next(item for item in dataclasses.fields(TrainConfig) if item.name == "max_steps")
    with pytest.raises(
        UserError, match=r"^train.max_steps=-2 is invalid: the cap on optimizer steps \(-1: no cap\) must"
    ):
        check_value("train.max_steps", -2, field)


def test_explain_reads_the_field_not_its_source() -> None:
    """A comment is nobody's copy: what --explain shows is the metadata, even for a dataclass with no
    source file (one made at run time), and a comment beside a field shows nowhere."""
    made = dataclasses.make_dataclass(
        "Made",
        [
            ("depth", int, dataclasses.field(default=2, metadata=domain(low=1, means="the depth", doc="in blocks"))),
            ("fast", bool, dataclasses.field(default=False, metadata=doc("skip the checks"))),
            ("plain", int, dataclasses.field(default=0)),
        ],
    )
    assert [row[4] for row in rows(made(), "made")] == ["the depth; in blocks", "skip the checks", ""]


def test_every_knob_of_the_chosen_algorithm_with_its_value_and_default() -> None:
    table = {
        key: (kind, value, default, doc)
        for key, kind, value, default, doc in rows(compose(["algo=crossover", "algo.segments=3"]).algo, "algo")
    }
    assert table["algo.segments"] == (
        "int",
        "3",
        "0",
        "the number of segments (0: the model's top-level blocks); ResNet's: stem, stages, FC; k: k balanced runs of layers",
    )
    assert set(table) == {"algo.name", "algo.segments", "algo.segmentwise", "algo.fair", "algo.gamma"}


@pytest.mark.parametrize(
    ("choice", "head", "knob", "doc"),
    [
        ("algo=allreduce", "``algo=allreduce``, AllReduce-SGD: the mean gradient", "algo.overlap", "as DDP does"),
        (
            "compress=topk",
            "``compress=topk``: top-k sparsification",
            "compress.ratio",
            "the fraction of entries sent; k =",
        ),
        ("model=resnet18", "resnet18, resnet34, resnet50, resnet101", "model.cifar_stem", "3x3 stride-1"),
        ("launcher=srun", "``launcher=srun``: inside a SLURM allocation", "launcher.partition", "sbatch's --partition"),
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
