"""How much memory a job will take on this machine, estimated before it starts, and the one-line
refusal of a job that would not fit (``launcher=threads`` and ``launcher=local``).

Threads: every rank holds its model, gradients, optimizer state and the algorithm's copies (gossip
buffers, the evaluation's averaged model): about :data:`COPIES` times its parameters, plus
:data:`RANK_OVERHEAD_MIB` of Python objects and allocator slack. Activations live while a rank
computes: for one rank at a time under ``launcher.compute=serial``, for all at once under
``parallel`` (evaluation passes run one rank at a time under both); they are measured as the
outputs of every module in one forward pass of the larger of the training and evaluation
batches, times :data:`ACTIVATION_FACTOR` (the gradients of the backward). The data set is held
once. Checked against measured peaks in docs/benchmarks.md (64 and 256 workers).

Processes (``launcher=local``): every rank is an interpreter with torch loaded
(:data:`PROCESS_OVERHEAD_MIB` of memory of its own once the shared library pages are split
among the ranks), its own copy of the data set, its model's copies and its activations, all at
once; the driver is this process.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Optional, Tuple

import torch

from dlcomm.config.schema import RunConfig
from dlcomm.errors import UserError
from dlcomm.memory import MIB, available_mib

COPIES = 6  # parameters, gradients, momentum (Adam: two moments), algorithm buffers, evaluation copy
RANK_OVERHEAD_MIB = 16.0  # measured: 256 ranks of the default job took 25 MiB each (6 x 1.6 MiB of parameters + 16)
ACTIVATION_FACTOR = 2.0
PROCESS_OVERHEAD_MIB = (
    450.0  # measured: 16 ranks of the default job summed 8,811 MiB PSS (551 each, less data and model)
)
USABLE = 0.9  # of what the kernel reports available (plus what this process holds)


@dataclass(frozen=True)
class ShapeOnly:
    """The data's shape without the data (:class:`dlcomm.tasks.base.DataShape`): what a probe model is built from."""

    input_shape: Tuple[int, int, int]
    num_classes: int
    pixel_mean: Optional[Tuple[float, ...]] = None
    pixel_std: Optional[Tuple[float, ...]] = None


@dataclass(frozen=True)
class Footprint:
    ranks: int
    per_rank_mib: float  # the model's copies and overhead, every rank
    activations_mib: float  # one rank's activations while it computes
    at_once: int  # how many ranks compute at a time
    shared_mib: float  # the data set and this process as it stands

    @property
    def total_mib(self) -> float:
        return self.shared_mib + self.ranks * self.per_rank_mib + self.at_once * self.activations_mib

    def most_ranks(self, available_mib: float) -> int:
        """The most ranks that fit in ``available_mib``, the rest of the job unchanged."""
        per_rank = self.per_rank_mib + (self.activations_mib if self.at_once > 1 else 0.0)
        fixed = self.shared_mib + (0.0 if self.at_once > 1 else self.activations_mib)
        return max(0, int((available_mib - fixed) // per_rank))


_PROBES: dict[str, tuple[torch.nn.Module, tuple[int, int, int]]] = {}


def probe_model(cfg: RunConfig) -> tuple[torch.nn.Module, tuple[int, int, int]]:
    """The run's model, built on the CPU from the data set's shape (no data loaded), and that
    shape; built once per model, data set and task (the launcher's checks ask more than once)."""
    from dlcomm.config.typed import plain
    from dlcomm.data import dataset_shape
    from dlcomm.tasks import build_task

    key = json.dumps(plain({"model": cfg.model, "dataset": cfg.dataset, "task": cfg.task}), sort_keys=True)
    if key not in _PROBES:
        shape, classes = dataset_shape(cfg.dataset)
        data = ShapeOnly(shape, classes)
        model = build_task(cfg).build_model(cfg.model, data)
        _PROBES[key] = model, shape
    return _PROBES[key]


def estimate(cfg: RunConfig, ranks: int, serial: bool) -> Footprint:
    """The footprint of ``ranks`` threads running ``cfg``."""
    from dlcomm.train.memory import peak_rss_mib

    model, shape = probe_model(cfg)
    return Footprint(
        ranks=ranks,
        per_rank_mib=COPIES * _param_mib(model) + RANK_OVERHEAD_MIB,
        activations_mib=_activations(cfg, model, shape),
        at_once=1 if serial else ranks,
        shared_mib=peak_rss_mib() + _data_mib(cfg, shape),
    )


def estimate_processes(cfg: RunConfig, ranks: int) -> Footprint:
    """The footprint of ``ranks`` processes running ``cfg`` (and this process, their driver)."""
    from dlcomm.train.memory import peak_rss_mib

    model, shape = probe_model(cfg)
    return Footprint(
        ranks=ranks,
        per_rank_mib=PROCESS_OVERHEAD_MIB + COPIES * _param_mib(model) + _data_mib(cfg, shape),
        activations_mib=_activations(cfg, model, shape),
        at_once=ranks,
        shared_mib=peak_rss_mib(),
    )


def check_fits(cfg: RunConfig, footprint: Footprint, services: int, launcher: str, kind: str, elsewhere: str) -> None:
    """Refuse, in one line with the estimate and the limit, a job that would not fit in this
    machine's memory; ``services``: how many of the footprint's ranks are not workers; the
    launcher names itself, what its ranks are (``kind``) and where else the job could run."""
    from dlcomm.train.memory import peak_rss_mib

    budget = USABLE * (available_mib() + peak_rss_mib())
    if footprint.total_mib <= budget:
        return
    workers = cfg.nodes * cfg.workers_per_node
    most = max(0, footprint.most_ranks(budget) - services)
    raise UserError(
        f"nodes*workers_per_node={workers} is invalid with launcher={launcher} on this machine: the job needs "
        f"about {footprint.total_mib / 1024:.1f} GiB ({footprint.ranks} {kind} x {footprint.per_rank_mib:.0f} MiB, "
        f"activations {footprint.activations_mib:.0f} MiB x {footprint.at_once}, {footprint.shared_mib:.0f} MiB "
        f"shared) and {budget / 1024:.1f} GiB can be used; use at most {most} workers, a smaller model or "
        f"train.batch_size, {elsewhere}"
    )


def _param_mib(model: torch.nn.Module) -> float:
    return sum(p.numel() * p.element_size() for p in model.parameters()) / MIB


def _data_mib(cfg: RunConfig, shape: tuple[int, int, int]) -> float:
    """The data set in memory (uint8 pixels); 0 when its size is not known without loading it."""
    from dlcomm.data import dataset_sizes

    sizes = dataset_sizes(cfg.dataset)
    return sum(sizes) * math.prod(shape) / MIB if sizes else 0.0


def _activations(cfg: RunConfig, model: torch.nn.Module, shape: tuple[int, int, int]) -> float:
    return ACTIVATION_FACTOR * _activation_mib(model, shape, max(cfg.train.batch_size, cfg.train.eval_batch_size))


def _activation_mib(model: torch.nn.Module, shape: tuple[int, ...], batch: int) -> float:
    """The bytes of every module's output in a forward pass of one sample, times ``batch``."""
    total = 0

    def count(module: torch.nn.Module, inputs: Any, output: Any) -> None:
        nonlocal total
        if isinstance(output, torch.Tensor):
            total += output.numel() * output.element_size()

    hooks = [module.register_forward_hook(count) for module in model.modules()]
    try:
        with torch.no_grad():
            model.eval()
            model(torch.zeros(1, *shape))
    except Exception:  # noqa: BLE001 - a model with inputs of its own (a GAN): no estimate of activations
        total = 0
    finally:
        for hook in hooks:
            hook.remove()
    return total * batch / MIB
