"""Every tensor an algorithm hands to the network is on the cluster's device (NCCL carries CUDA
tensors only: a tensor created without ``device=`` would be a CPU tensor sent over NCCL).

On this CPU-only machine the cluster's device is the CPU, so a forgotten ``device=`` would go
unnoticed; the test makes it visible: every algorithm hook runs with torch's default device set
to ``meta`` (thread-local, so only the hook's own factory calls are affected), and the transport
refuses any tensor that is not on the cluster's device. The control plane is exempt: it is gloo
on every cluster and its tensors say ``device="cpu"`` explicitly.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch

from dlcomm.algorithms.base import Algorithm
from dlcomm.algorithms.registry import ALGORITHMS as REGISTERED
from dlcomm.comm.inprocess import ThreadTransport
from dlcomm.compose import compose
from dlcomm.data import build_dataset
from dlcomm.launch.harness import run_ranks
from dlcomm.spec import RunSpec
from test_nccl_semantics import ALGORITHMS, _overrides

import rank_programs

HOOKS = ("setup", "before_step", "reduce_gradients", "after_step", "end_epoch", "finish", "serve")
OPERATIONS = {"all_reduce": 0, "broadcast": 0, "reduce": 0, "all_gather": 1}  # the tensor argument's position


def _algorithm_classes() -> set[type]:
    found, todo = set(), [Algorithm]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            if sub not in found:
                found.add(sub)
                todo.append(sub)
    return found | {Algorithm}


def _on_meta(hook):
    @functools.wraps(hook)
    def wrapped(*args, **kwargs):
        with torch.device("meta"):
            return hook(*args, **kwargs)

    return wrapped


def _checked(operation, position):
    @functools.wraps(operation)
    def wrapped(self, *args, **kwargs):
        group = args[-1] if operation.__name__ != "all_reduce" else args[1]
        tensor = args[position]
        device = torch.device("cpu")  # the cluster's device in these runs
        if group != "control" and tensor.device != device:
            raise AssertionError(
                f"{operation.__name__} on {group} carries a tensor on {tensor.device}, not the cluster's {device}"
            )
        return operation(self, *args, **kwargs)

    return wrapped


def _checked_batch(batch):
    @functools.wraps(batch)
    def wrapped(self, ops, group):
        for op in ops:
            if group != "control" and op.tensor.device != torch.device("cpu"):
                raise AssertionError(
                    f"a {'send to' if op.send else 'receive from'} rank {op.peer} on {group} "
                    f"({op.what}) is on {op.tensor.device}, not the cluster's cpu"
                )
        return batch(self, ops, group)

    return wrapped


@pytest.fixture
def strict_devices(monkeypatch):
    for cls in _algorithm_classes():
        for hook in HOOKS:
            if hook in vars(cls):
                monkeypatch.setattr(cls, hook, _on_meta(vars(cls)[hook]))
    for name, position in OPERATIONS.items():
        monkeypatch.setattr(ThreadTransport, name, _checked(getattr(ThreadTransport, name), position))
    monkeypatch.setattr(ThreadTransport, "batch", _checked_batch(ThreadTransport.batch))


def test_the_check_catches_a_tensor_created_without_the_device(strict_devices, monkeypatch, tmp_path: Path) -> None:
    from dlcomm.algorithms import sgp

    def after_step_without_device(self, step):  # what ps's _flat([]) did before this issue
        self.channel.exchange(
            [(torch.zeros(1), (self.cluster.rank + 1) % 2)], [(torch.zeros(1), (self.cluster.rank + 1) % 2)]
        ).wait()

    monkeypatch.setattr(sgp.SGP, "after_step", _on_meta(after_step_without_device))
    with pytest.raises(RuntimeError, match="a send to rank 1 on world \\(payload\\) is on meta, not the cluster's cpu"):
        _run(_overrides("sgp", 2, 1, "off"), tmp_path)


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_tensor_an_algorithm_sends_is_on_the_clusters_device(strict_devices, name: str, tmp_path: Path) -> None:
    for network in ("off", "simulate"):
        results = _run(_overrides(name, 2, 2, network), tmp_path / network)
        assert all(result["params"] for result in results[:4]), name


def _run(overrides: list[str], run_dir: Path) -> list[dict]:
    cfg = compose(overrides)
    spec = RunSpec.from_config(cfg, tracking_uri="").with_run("test", run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    roles = REGISTERED.get(cfg.algo.name).roles(cfg.algo)
    return run_ranks(
        rank_programs.train_untracked,
        cfg.nodes * cfg.workers_per_node,
        spec,
        build_dataset(cfg.dataset),
        nodes=cfg.nodes,
        services=tuple(roles),
        in_process="serial",
        semantics="nccl",
        timeout=120,
    )
