"""Checking a sweep costs what differs between its elements, not their number (issue 57, item 7):
``dlcomm train -m dataset=synthetic train.max_steps=3 model=mlp,vgg16 'seed=range(0,300)'`` was
still checking after 150 s (its bad element is number 301), as every element was composed by Hydra,
twice, and its model built, before the model checks began. Counted here, not timed: Hydra's
compositions and the models built, through the real entry points."""

from __future__ import annotations

import time

import pytest

import dlcomm.compose
import dlcomm.models.check
from dlcomm.compose import compose

SEEDS = ["dataset=synthetic", "train.max_steps=3", "model=mlp", "launcher=threads", "nodes=2"]


@pytest.fixture
def counted(monkeypatch):
    """``{"hydra": compositions by Hydra, "models": models built}`` from here on."""
    counts = {"hydra": 0, "models": 0}
    hydra, build = dlcomm.compose._hydra_compose, dlcomm.models.check.build_model

    def composing(overrides):
        counts["hydra"] += 1
        return hydra(overrides)

    def building(*args, **kwargs):
        counts["models"] += 1
        return build(*args, **kwargs)

    monkeypatch.setattr(dlcomm.compose, "_hydra_compose", composing)
    monkeypatch.setattr(dlcomm.models.check, "build_model", building)
    return counts


def test_a_sweep_of_40_seeds_composes_and_builds_once_per_distinct_choice(home, monkeypatch, counted) -> None:
    from dlcomm.run import prepare_sweep

    monkeypatch.setenv("DLCOMM_HOME", str(home))
    specs, overrides = prepare_sweep([*SEEDS, "seed=range(0,40)"])
    assert len(specs) == 40
    assert counted["models"] == 1, counted  # was 40: every element's model
    assert counted["hydra"] <= 2, counted  # was one per element and pass (as written, then with a network added)
    added = overrides[len(SEEDS) + 1 :]  # the comparison's network, where the ranks share this machine
    for seed, spec in enumerate(specs):  # what the shortcut composed is what Hydra composes for each alone
        assert spec.cfg() == compose([*SEEDS, f"seed={seed}", *added]), seed


def test_a_large_sweep_refuses_its_one_bad_value_in_seconds(home, cli_here, counted) -> None:
    start = time.perf_counter()
    result = cli_here(home, "train", "-m", *SEEDS[:2], "model=mlp,vgg16", "seed=range(0,300)")
    seconds = time.perf_counter() - start
    errors = [line for line in result.stderr.splitlines() if line.startswith("dlcomm: error: ")]
    assert result.returncode == 2 and len(errors) == 1, result.stderr
    assert errors[0].startswith("dlcomm: error: sweep element [dataset=synthetic train.max_steps=3 model=vgg16 seed=0]")
    assert "model=vgg16 cannot take dataset=synthetic input of shape 1x28x28" in errors[0]
    assert counted["hydra"] <= 3 and counted["models"] <= 2, counted  # the leads: mlp seed 0, vgg16, mlp seed 1
    assert seconds < 30, f"refused after {seconds:.0f} s"
    assert not (home / "results" / "mlflow.db").exists()


@pytest.mark.parametrize(
    "overrides",
    [
        ["seed=3"],
        ["model=vgg16", "seed=4"],
        ["experiment=wan_compare", "seed=2", "algo=diloco", "algo.period=50"],
        ["model=mlp", "model.hidden=[8,8]", "optim.lr=0.1", "optim=adam"],
        ["dataset=synthetic", "dataset.shape=[3,8,8]", "train.max_steps=3"],
        ["network=eth_10g", "network.inter.latency_ms=3", "train.batch_size=32", "train.batch_size=16"],
    ],
    ids=lambda overrides: " ".join(overrides),
)
def test_a_remembered_composition_is_hydras(overrides) -> None:
    """Files chosen by Hydra once, plain values set on a copy in their order: the same configuration."""
    from dlcomm.checked import remembering

    alone = compose(overrides)
    with remembering():
        compose(["seed=9"])
        assert compose(overrides) == alone
        assert compose(overrides) == alone  # from the remembered composition


@pytest.mark.parametrize(
    "overrides,expected",
    [
        (["seed=2", "train.max_stepz=3"], "no key train.max_stepz in the config: did you mean train.max_steps"),
        (["seed=2", "model.embed_dim=3"], "model.embed_dim is not a knob of model=small_cnn"),
        (["seed=2", "+frob=1"], "frob is not a dlcomm setting"),
    ],
)
def test_a_remembered_composition_refuses_in_hydras_words(overrides, expected) -> None:
    from dlcomm.checked import remembering
    from dlcomm.errors import UserError

    with pytest.raises(UserError) as alone:
        compose(overrides)
    with remembering(), pytest.raises(UserError) as remembered:
        compose(["seed=9"])
        compose(overrides)
    assert str(remembered.value) == str(alone.value) and expected in str(alone.value)


# issue 59, item 3: each check once per element, in one pass; counted through the real entry points
LR = [*SEEDS, "optim=adam", "optim.lr=0.001,0.002,0.003"]


@pytest.fixture
def work(monkeypatch):
    """``{"optimizers": optimizers built, "checked": compositions checked (validate_run), "launcher":
    the threads launcher's checks, "store": store probes}`` from here on."""
    import dlcomm.config.validate
    import dlcomm.tracking.store
    import dlcomm.train.optim
    from dlcomm.launch.threads import ThreadsLauncher

    counts = {"optimizers": 0, "checked": 0, "launcher": 0, "store": 0}

    def counting(module, name, key):
        original = getattr(module, name)

        def counted(*args, **kwargs):
            counts[key] += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)

    counting(dlcomm.train.optim, "build_optimizer", "optimizers")
    counting(dlcomm.config.validate, "validate_run", "checked")
    counting(dlcomm.tracking.store, "probe", "store")
    check = ThreadsLauncher.check.__func__

    def launcher_check(cls, *args):
        counts["launcher"] += 1
        return check(cls, *args)

    monkeypatch.setattr(ThreadsLauncher, "check", classmethod(launcher_check))
    return counts


def test_a_sweep_builds_each_element_s_optimizer_once(home, monkeypatch, work) -> None:
    from dlcomm.run import prepare_sweep

    monkeypatch.setenv("DLCOMM_HOME", str(home))
    specs, _ = prepare_sweep(LR, compare_here=False)
    assert [spec.cfg().optim.lr for spec in specs] == [0.001, 0.002, 0.003]
    assert work["optimizers"] == 3, work  # was 9: over no parameter to order them, before the data, with the plan
    assert work["checked"] == 3 and work["launcher"] == 3 and work["store"] == 1, work


def test_the_comparison_s_network_is_added_without_composing_or_checking_the_sweep_again(
    home, monkeypatch, work
) -> None:
    """launcher.compute=serial: the ranks take turns on this machine's cores, so the sweep compares on
    the simulated clock of a network it adds; that used to compose and check the whole sweep again."""
    from dlcomm.run import prepare_sweep
    from dlcomm.sweep import COMPARISON_NETWORK

    monkeypatch.setenv("DLCOMM_HOME", str(home))
    specs, overrides = prepare_sweep([*LR, "launcher.compute=serial"])
    added = f"network={COMPARISON_NETWORK}"
    assert overrides == [*LR, "launcher.compute=serial", added]
    assert all(spec.overrides[-1] == added for spec in specs), [spec.overrides for spec in specs]
    # each element composed and checked once, and the network's own section once (was 6: the sweep twice)
    assert work["checked"] == 3 + 1, work
    assert work["launcher"] == 3 and work["optimizers"] == 3 and work["store"] == 1, work  # launcher was 5
    for spec, lr in zip(specs, ["0.001", "0.002", "0.003"]):  # what Hydra composes for each element alone
        assert spec.cfg() == compose([*SEEDS, "optim=adam", f"optim.lr={lr}", "launcher.compute=serial", added])


@pytest.mark.parametrize(
    "element",
    [
        ["seed=1"],
        ["model=mlp", "nodes=3", "workers_per_node=2", "algo=diloco", "launcher=threads"],
        ["algo=dpsgd", "compress=topk", "dataset=synthetic", "task=gan"],
        ["launcher=slurm", "optim=lars", "train.amp=true"],
    ],
    ids=" ".join,
)
def test_the_comparison_s_network_set_on_an_element_is_what_hydra_composes(element) -> None:
    """:func:`dlcomm.sweep.with_network` sets the preset's section on an element composed without it."""
    from dlcomm.sweep import COMPARISON_NETWORK, with_network

    added = f"network={COMPARISON_NETWORK}"
    assert with_network(compose(element), compose([added]).network) == compose([*element, added])
