"""Evaluation across workers.

* ``test_acc_mean``: every worker evaluates its own replica on the whole test set; the mean of
  the accuracies over workers.
* ``test_acc_avg_model``: the averaged model ``x_bar = (1/n) sum_i x_i`` (parameters and
  floating-point buffers such as BatchNorm statistics), evaluated on the test set split in
  ``n`` interleaved shards, one per worker, correct counts summed.
* ``consensus_distance``: ``(1/n) sum_i ||x_i - x_bar||^2`` over the parameters.

All reductions go through the Channel in its ``metrics`` phase, outside any iteration.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Iterable

import torch

from dlcomm.comm.channel import Channel


@dataclass(frozen=True)
class EvalResult:
    test_acc_mean: float
    test_acc_avg_model: float
    consensus_distance: float


@torch.no_grad()
def count_correct(model: torch.nn.Module, batches: Iterable[tuple[torch.Tensor, torch.Tensor]], device: torch.device) -> tuple[int, int]:
    was_training = model.training
    model.eval()
    correct = total = 0
    for inputs, labels in batches:
        logits = model(inputs.to(device, non_blocking=True))
        correct += int((logits.argmax(dim=1).cpu() == labels).sum())
        total += labels.numel()
    model.train(was_training)
    return correct, total


@torch.no_grad()
def evaluate(model: torch.nn.Module, data: Any, channel: Channel, batch_size: int, device: torch.device) -> EvalResult:
    rank, world = channel.cluster.rank, channel.cluster.world_size
    with channel.phase("metrics"):
        correct, total = count_correct(model, data.test_batches(batch_size), device)

        averaged = copy.deepcopy(model)
        params = [p for p in averaged.parameters()]
        floats = params + [b for b in averaged.buffers() if b.is_floating_point()]
        flat = torch.cat([t.detach().reshape(-1) for t in floats])
        channel.allreduce(flat, average=True)
        param_elements = sum(p.numel() for p in params)
        offset = 0
        squared_distance = torch.zeros((), dtype=torch.float64, device=flat.device)
        for tensor in floats:
            mean = flat[offset : offset + tensor.numel()].view_as(tensor)
            if offset < param_elements:
                squared_distance += (tensor.double() - mean.double()).pow(2).sum()
            tensor.copy_(mean)
            offset += tensor.numel()

        shard = torch.arange(rank, data.test_size, world)
        avg_correct, avg_total = count_correct(averaged, data.test_batches(batch_size, shard), device)
        sums = torch.tensor(
            [correct / total, avg_correct, avg_total, float(squared_distance)], dtype=torch.float64, device=flat.device
        )
        channel.allreduce(sums, average=False)
    return EvalResult(
        test_acc_mean=float(sums[0]) / world,
        test_acc_avg_model=float(sums[1] / sums[2]),
        consensus_distance=float(sums[3]) / world,
    )
