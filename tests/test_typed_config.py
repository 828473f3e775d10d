"""The composed configuration reaches every check and every rank as the schemas' dataclasses
(issue 37: one form, typed at run time), and closed knobs refuse other values with their list."""

from __future__ import annotations

import pickle

import pytest
from omegaconf import OmegaConf

from dlcomm.algorithms.registry import all_algorithms
from dlcomm.compose import compose, compose_run
from dlcomm.config.schema import (
    Choice,
    Device,
    LinkConfig,
    NetworkConfig,
    NetworkMode,
    ProcessLauncherConfig,
    RunConfig,
    Schedule,
    TrainConfig,
)
from dlcomm.config.typed import plain, to_run_config
from dlcomm.errors import UserError
from dlcomm.spec import RunSpec

from conftest import FAST


@pytest.mark.parametrize("name", sorted(all_algorithms()))
def test_each_section_is_the_dataclass_it_was_composed_with(name: str) -> None:
    cfg = compose([f"algo={name}", "network=eth_1g", "optim=lars"])
    run = to_run_config(cfg)
    assert isinstance(run, RunConfig)
    assert type(run.algo) is all_algorithms()[name].Config  # e.g. DPSGDConfig, not a DictConfig
    for section in ("model", "dataset", "optim", "task", "network", "launcher", "train"):
        assert type(getattr(run, section)) is OmegaConf.get_type(cfg[section]), section
    assert isinstance(run.network.inter, LinkConfig)
    assert run.network.mode is NetworkMode.simulate and run.optim.schedule is Schedule.cosine
    assert plain(run) == OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)  # the same values


def test_a_rank_gets_the_typed_objects_through_the_pickle_the_launchers_send(monkeypatch) -> None:
    """``launcher=local`` pickles the spec into each rank's process; the rank's ``spec.cfg()`` is
    the typed config (stopped where the rank first reads the layout from it)."""
    from dlcomm.launch import rank

    spec = RunSpec.from_config(compose([*FAST, "algo=dpsgd"]), "sqlite:///unused.db")
    seen = []

    class Stop(Exception):
        pass

    def layout(cfg):
        seen.append(cfg)
        raise Stop

    monkeypatch.setattr(rank, "job_layout", layout)
    with pytest.raises(Stop):
        rank.run_rank(pickle.loads(pickle.dumps(spec)), 0, "127.0.0.1", 1, 0, 1)
    (cfg,) = seen
    assert type(cfg.algo).__name__ == "DPSGDConfig" and isinstance(cfg.launcher, ProcessLauncherConfig)
    assert cfg == spec.cfg() and plain(cfg) == spec.config
    assert isinstance(cfg.train.device, Device) and cfg.train.device == "cpu"


def test_a_choice_is_its_word_in_comparisons_formats_and_logged_params() -> None:
    assert Device.cuda == "cuda" and f"{Device.cuda}" == "cuda" and str(Device.cuda) == "cuda"
    assert {"cuda": 1}[Device.cuda] == 1
    assert plain(TrainConfig(device=Device.auto))["device"] == "auto"
    assert plain(NetworkConfig())["mode"] == "off" and type(plain(NetworkConfig())["mode"]) is str
    assert issubclass(Device, Choice) and Device.words() == ["cpu", "cuda", "auto"]


@pytest.mark.parametrize(
    "override, message",
    [
        ("train.device=tpu", "train.device=tpu is invalid: use cpu, cuda or auto"),
        ("train.amp_dtype=fp8", "train.amp_dtype=fp8 is invalid: use auto, bf16 or fp16"),
        ("optim.schedule=linear", "optim.schedule=linear is invalid: use constant, cosine or multistep"),
        ("network.mode=fast", "network.mode=fast is invalid: use off, emulate or simulate"),
        ("network.compute=guess", "network.compute=guess is invalid: use profile or measured"),
        ("network.collectives=mpi", "network.collectives=mpi is invalid: use nccl or textbook"),
        ("launcher.backend=mpi", "launcher.backend=mpi is invalid: use auto, gloo or nccl"),
        (
            "network.mode=false",
            "network.mode=False is invalid: use off, emulate or simulate (a bare word was read as the boolean false: "
            "quote it)",
        ),
    ],
)
def test_a_closed_knob_refuses_another_value_with_its_words(override: str, message: str) -> None:
    with pytest.raises(UserError) as error:
        compose([override])
    assert str(error.value) == message


def test_the_words_of_a_closed_knob_are_accepted_and_kept() -> None:
    run = compose_run(["network=eth_1g", "network.mode=off", "train.device=auto", "launcher.backend=gloo"])
    assert run.network.mode is NetworkMode.off and run.train.device is Device.auto
    assert RunSpec.from_config(compose(["network.mode=emulate"]), "x").config["network"]["mode"] == "emulate"
