"""Bad input: one line naming the key and the fix, exit code 2, no traceback, no run recorded."""

from __future__ import annotations

import pytest

from conftest import ALGORITHMS, run_cli

CASES = [
    (["algo=nope"], f"Available options in 'algo': {', '.join(ALGORITHMS)}"),
    (["nodes=0"], "nodes=0 is invalid"),
    (["workers_per_node=0"], "workers_per_node=0 is invalid"),
    (["train.batch_size=0"], "train.batch_size=0 is invalid"),
    (["algo=local_sgd", "algo.period=0"], "algo.period=0 is invalid"),
    (["dataset.root=/no/such/folder"], "dataset.root=/no/such/folder does not exist"),
    (["model=vgg16"], "model=vgg16 cannot take dataset input of shape 1x28x28"),
    (["train.epoch=3"], "Could not override 'train.epoch'"),
    (["nodes=four"], "nodes=four"),
    (["tracking.uri=nonsense://x"], "tracking.uri=nonsense://x cannot be used"),
    (["network=nope"], "Available options in 'network': eth_10g, eth_1g, eth_56g, ib_100g, lat_0.1ms, lat_5ms, off, wan_hetero"),
    (["network=eth_1g", "network.inter.bandwidth_gbps=-1"], "network.inter.bandwidth_gbps=-1.0 is invalid: a bandwidth must be positive"),
    (["network=eth_1g", "network.intra.latency_ms=-0.5"], "network.intra.latency_ms=-0.5 is invalid: a latency cannot be negative"),
    (["network=wan_hetero", "nodes=8", "network.wide_workers=9"], "network.wide_workers=9 is invalid: the job has 8 workers"),
    (["network=eth_1g", "network.worker_bandwidth_gbps=[1,10]"], "give one Gb/s value per worker (4 values"),
    (["network=eth_1g", "network.mode=fast"], "network.mode=fast is invalid: use off, emulate or simulate"),
    (["train.target_acc=85"], "train.target_acc=85.0 is invalid"),
    (["algo=gossip_pull", "algo.period=0"], "algo.period=0 is invalid: T is the number of local steps per window"),
    (["algo=gossip_pull", "algo.overlap=late"], "algo.overlap=late is invalid: use none, naive or scheduled"),
    (["algo=ps_layerdrop", "algo.ratio=1.0"], "algo.ratio=1.0 is invalid: R is the fraction of gradient entries dropped"),
    (["algo=ps_layerdrop", "algo.ratio=-0.1"], "algo.ratio=-0.1 is invalid"),
    (["algo=ps", "nodes=1"], "nodes=1 is invalid: a parameter server with one worker is plain SGD"),
    (["algo=ps", "launcher=srun"], "launcher=srun is invalid for algo=ps: it needs the service process(es) server"),
    (["train.time_budget_s=-5"], "train.time_budget_s=-5.0 is invalid"),
    (["train.eval_size=-1"], "train.eval_size=-1 is invalid"),
    (["train.eval_replicas=-1"], "train.eval_replicas=-1 is invalid: pass 0 (every replica)"),
    # another choice's knob: one line naming the choices that have it
    (["model.embed_dim=8"], "model.embed_dim is not a knob of model=small_cnn; it belongs to model=vit_b, vit_s"),
    (["+model.embed_dim=8"], "model.embed_dim is not a knob of model=small_cnn; it belongs to model=vit_b, vit_s"),
    (["optim.betas=[0.5,0.9]"], "optim.betas is not a knob of optim=sgd; it belongs to optim=adabelief, adam, adamw, angulargrad"),
    (["optim=adam", "optim.momentum=0.5"], "optim.momentum is not a knob of optim=adam; it belongs to optim=lars, sgd"),
    (["dataset.shape=[1,8,8]"], "dataset.shape is not a knob of dataset=fashion_mnist; it belongs to dataset=synthetic"),
    (["optim=nope"], "Available options in 'optim': adabelief, adam, adamw, angulargrad, lars, sgd"),
]


@pytest.mark.parametrize("overrides,expected", CASES, ids=[" ".join(c[0]) for c in CASES])
def test_bad_input_exits_2_with_one_line(home, overrides, expected) -> None:
    result = run_cli(home, "train", *overrides, timeout=120)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("dlcomm: error: ")
    assert expected in lines[0]
    assert "Traceback" not in result.stderr + result.stdout
    assert not (home / "results" / "mlflow.db").exists(), "a run was recorded for bad input"


def test_help_lists_subcommands(home) -> None:
    result = run_cli(home, "--help")
    assert result.returncode == 0
    assert "train" in result.stdout and "config" in result.stdout


def test_config_composes_from_any_directory(home) -> None:
    result = run_cli(home, "config", "algo=local_sgd", "algo.period=4", "nodes=8")
    assert result.returncode == 0, result.stderr
    assert "period: 4" in result.stdout and "nodes: 8" in result.stdout
    assert "root: /usr/share/datasets/fashion-mnist" in result.stdout


def test_config_shows_the_chosen_model_optimizer_and_dataset_knobs_only(home) -> None:
    result = run_cli(home, "config")
    assert result.returncode == 0, result.stderr
    sections = {}
    for block in result.stdout.split("\n"):
        if block and not block.startswith(" "):
            current = sections.setdefault(block.rstrip(":"), [])
        elif block.strip():
            current.append(block.strip().split(":")[0])
    assert sections["model"] == ["name"]
    assert sections["optim"] == ["name", "lr", "weight_decay", "schedule", "milestones", "gamma", "warmup_epochs",
                                 "min_lr", "momentum", "nesterov"]
    assert sections["dataset"] == ["name", "root"]
