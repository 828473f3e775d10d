"""Evaluation across workers.

* ``test_acc_mean``: every worker evaluates its own replica on the whole test set; the mean of
  the accuracies over workers.
* ``test_acc_avg_model``: the averaged model ``x_bar = (1/n) sum_i x_i`` (parameters and
  floating-point buffers such as BatchNorm statistics), evaluated on the test set split in
  ``n`` interleaved shards, one per worker, correct counts summed.
* ``consensus_distance``: ``(1/n) sum_i ||x_i - x_bar||^2`` over the parameters.

"The test set" is its first ``eval_size`` images when ``train.eval_size`` > 0 (large models on
a CPU: a ResNet-50 pass over 10,000 images takes minutes), else all of it.

When every replica equals the average exactly (parameters and buffers: AllReduce-SGD), every
replica's accuracy is the averaged model's, so the full per-replica pass is skipped.

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
def evaluate(
    model: torch.nn.Module, data: Any, channel: Channel, batch_size: int, device: torch.device, eval_size: int = 0,
) -> EvalResult:
    rank, world = channel.cluster.rank, channel.cluster.world_size
    size = min(eval_size, data.test_size) if eval_size > 0 else data.test_size
    with channel.phase("metrics"):
        averaged = copy.deepcopy(model)
        params = list(averaged.parameters())
        buffers = [b for b in averaged.buffers() if b.is_floating_point()]
        flat = torch.cat([t.detach().reshape(-1) for t in params + buffers])
        channel.allreduce(flat, average=True)
        param_distance, buffer_distance = _replace_by_mean(params, buffers, flat)
        distances = torch.tensor([param_distance, buffer_distance], dtype=torch.float64, device=flat.device)
        channel.allreduce(distances, average=False)
        replicas_identical = float(distances.sum()) == 0.0

        shard = torch.arange(rank, size, world)
        avg_correct, avg_total = count_correct(averaged, data.test_batches(batch_size, shard), device)
        own_accuracy = 0.0
        if not replicas_identical:
            whole = None if size == data.test_size else torch.arange(size)
            correct, total = count_correct(model, data.test_batches(batch_size, whole), device)
            own_accuracy = correct / total
        sums = torch.tensor([own_accuracy, avg_correct, avg_total], dtype=torch.float64, device=flat.device)
        channel.allreduce(sums, average=False)
    avg_accuracy = float(sums[1] / sums[2])
    return EvalResult(
        test_acc_mean=avg_accuracy if replicas_identical else float(sums[0]) / world,
        test_acc_avg_model=avg_accuracy,
        consensus_distance=float(distances[0]) / world,
    )


def _replace_by_mean(params: list[torch.Tensor], buffers: list[torch.Tensor], flat_mean: torch.Tensor) -> tuple[float, float]:
    """Copy the means into ``params`` and ``buffers``; return this replica's squared distances
    ``||x_i - x_bar||^2`` over the parameters and over the buffers."""
    distances = [0.0, 0.0]
    offset = 0
    for kind, tensors in enumerate((params, buffers)):
        for tensor in tensors:
            mean = flat_mean[offset : offset + tensor.numel()].view_as(tensor)
            distances[kind] += float((tensor.double() - mean.double()).pow(2).sum())
            tensor.copy_(mean)
            offset += tensor.numel()
    return distances[0], distances[1]
