"""The composed configuration reaches every check and every rank as the schemas' dataclasses
(issue 37: one form, typed at run time), and closed knobs refuse other values with their list."""

from __future__ import annotations

import pickle

import pytest
from omegaconf import OmegaConf

from dlcomm.algorithms.registry import ALGORITHMS
from dlcomm.compose import _hydra_compose, compose
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
from dlcomm.config.typed import plain
from dlcomm.errors import UserError
from dlcomm.spec import RunSpec

from conftest import FAST


@pytest.mark.parametrize("name", sorted(ALGORITHMS.all()))
def test_each_section_is_the_dataclass_it_was_composed_with(name: str) -> None:
    # lars (its schedule cosine); demo takes its own step and refuses every optimizer but sgd
    optim = ["optim=sgd", "optim.schedule=cosine"] if name == "demo" else ["optim=lars"]
    overrides = [f"algo={name}", "network=eth_1g", *optim]
    run = compose(overrides)  # converted once, right after Hydra
    cfg = _hydra_compose(overrides)  # what Hydra composed
    OmegaConf.resolve(cfg)
    assert isinstance(run, RunConfig)
    assert type(run.algo) is ALGORITHMS.all()[name].Config  # e.g. DPSGDConfig, not a DictConfig
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
    run = compose(["network=eth_1g", "network.mode=off", "train.device=auto", "launcher.backend=gloo"])
    assert run.network.mode is NetworkMode.off and run.train.device is Device.auto
    assert RunSpec.from_config(compose(["network.mode=emulate"]), "x").config["network"]["mode"] == "emulate"


def test_a_sweep_converts_validates_and_checks_each_element_once(monkeypatch, tmp_path) -> None:
    """Issue 52: the composition becomes the typed run once, right after Hydra, and every check reads
    that: per element one conversion, one ``validate_run`` and one task check (there were 3, 2 and 2)."""
    import dlcomm.config.typed
    import dlcomm.config.validate
    import dlcomm.tasks
    from dlcomm.run import prepare_sweep

    calls = {"to_run_config": 0, "validate_run": 0, "check_task": 0}

    def counted(module, name):
        original = getattr(module, name)

        def wrapper(*args, **kwargs):
            calls[name] += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapper)

    counted(dlcomm.config.typed, "to_run_config")
    counted(dlcomm.config.validate, "validate_run")
    counted(dlcomm.tasks, "check_task")
    monkeypatch.setenv("DLCOMM_HOME", str(tmp_path))
    specs, _ = prepare_sweep([*FAST, "model=mlp", "nodes=2", "seed=1,2"], compare_here=False)
    assert [spec.cfg().seed for spec in specs] == [1, 2]
    assert calls == {"to_run_config": 2, "validate_run": 2, "check_task": 2}
    assert all(isinstance(spec.cfg(), RunConfig) and spec.config == plain(spec.cfg()) for spec in specs)
