"""Evaluation across workers.

* ``test_acc_avg_model``: the averaged model ``x_bar = (1/n) sum_i x_i`` (parameters and
  floating-point buffers such as BatchNorm statistics), evaluated on the test set split in
  ``n`` interleaved shards, one per worker, correct counts summed. Exact.
* ``consensus_distance``: ``(1/n) sum_i ||x_i - x_bar||^2`` over the parameters of all ``n``
  replicas. Exact.
* ``test_acc_mean``: the mean test accuracy of the replicas, ``(1/k) sum_{i in S} acc(x_i)``
  over a fixed sample ``S`` of ``k = min(n, train.eval_replicas)`` workers, each evaluating its
  own replica on the whole test set. Exact (``S`` = every worker) when
  ``n <= train.eval_replicas`` or ``train.eval_replicas`` = 0; otherwise a sample estimate over
  the evenly spaced ranks ``floor(i * n / k)``, ``i = 0 .. k-1`` (rank 0 always among them, the
  same ranks at every evaluation, :func:`sampled_ranks`); the other workers skip the
  per-replica pass, which would otherwise cost ``n`` full test passes per evaluation.

"The test set" is its first ``eval_size`` images when ``train.eval_size`` > 0 (large models on
a CPU: a ResNet-50 pass over 10,000 images takes minutes), else all of it.

When every replica equals the average exactly (parameters and buffers: AllReduce-SGD), every
replica's accuracy is the averaged model's, so the per-replica pass is skipped on every worker
and ``test_acc_mean`` = ``test_acc_avg_model`` (exact).

The rule depends on the rank and world size alone, so it is the same under every launcher. All
reductions go through the Channel in its ``metrics`` phase, outside any iteration.
"""

from __future__ import annotations

import copy
import math
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Iterable, Protocol

import torch

from dlcomm.comm.channel import Channel
from dlcomm.config.schema import TrainConfig


@dataclass(frozen=True)
class EvalResult:
    test_acc_mean: float
    test_acc_avg_model: float
    consensus_distance: float


class Progress(Protocol):
    """Told of every test batch evaluated (rank 0's bar: :class:`dlcomm.tracking.reporter.EvaluationBar`)."""

    def advance(self) -> None: ...


class _Silent:
    def advance(self) -> None:
        pass


ProgressFactory = Callable[[int, str], ContextManager[Progress]]
"""``(test batches this rank evaluates, what is evaluated) -> a context of a Progress``."""


def silent_progress(batches: int, what: str) -> ContextManager[Progress]:
    return nullcontext(_Silent())


@torch.no_grad()
def count_correct(
    model: torch.nn.Module,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    device: torch.device,
    progress: Progress = _Silent(),
) -> tuple[int, int]:
    was_training = model.training
    model.eval()
    correct = total = 0
    for inputs, labels in batches:
        logits = model(inputs.to(device, non_blocking=True))
        correct += int((logits.argmax(dim=1).cpu() == labels).sum())
        total += labels.numel()
        progress.advance()
    model.train(was_training)
    return correct, total


def sampled_ranks(world: int, eval_replicas: int) -> list[int]:
    """The ranks whose replicas ``test_acc_mean`` averages: all of ``range(world)`` when
    ``world <= eval_replicas`` or ``eval_replicas`` = 0, else the ``k = eval_replicas`` evenly
    spaced ranks ``floor(i * world / k)`` for ``i = 0 .. k-1`` (distinct, rank 0 first)."""
    if eval_replicas <= 0 or world <= eval_replicas:
        return list(range(world))
    return [i * world // eval_replicas for i in range(eval_replicas)]


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    data: Any,
    channel: Channel,
    batch_size: int,
    device: torch.device,
    eval_size: int = 0,
    eval_replicas: int = TrainConfig.eval_replicas,
    progress: ProgressFactory = silent_progress,
) -> EvalResult:
    """``progress`` is told of every batch this rank evaluates (rank 0: its bar)."""
    rank, world = channel.cluster.rank, channel.cluster.world_size
    size = min(eval_size, data.test_size) if eval_size > 0 else data.test_size
    with channel.phase("metrics"):
        averaged = copy.deepcopy(model)
        params: list[torch.Tensor] = list(averaged.parameters())
        buffers = [b for b in averaged.buffers() if b.is_floating_point()]
        flat = torch.cat([t.detach().reshape(-1) for t in params + buffers])
        channel.allreduce(flat, average=True)
        param_distance, buffer_distance = _replace_by_mean(params, buffers, flat)
        distances = torch.tensor([param_distance, buffer_distance], dtype=torch.float64, device=flat.device)
        channel.allreduce(distances, average=False)
        replicas_identical = float(distances.sum()) == 0.0

        shard = torch.arange(rank, size, world)
        alone = channel.transport.alone  # ranks that are threads evaluate one at a time: one batch's activations
        sampled_here = not replicas_identical and rank in sampled_ranks(world, eval_replicas)
        batches = math.ceil(len(shard) / batch_size) + (math.ceil(size / batch_size) if sampled_here else 0)
        replicas = (
            "the averaged model"
            if replicas_identical
            else (f"the averaged model and {len(sampled_ranks(world, eval_replicas))} of {world} replicas")
        )
        with progress(batches, replicas) as bar:
            with alone():
                avg_correct, avg_total = count_correct(averaged, data.test_batches(batch_size, shard), device, bar)
            own_accuracy = sampled = 0.0
            if sampled_here:
                whole = None if size == data.test_size else torch.arange(size)
                with alone():
                    correct, total = count_correct(model, data.test_batches(batch_size, whole), device, bar)
                own_accuracy, sampled = correct / total, 1.0
        sums = torch.tensor([own_accuracy, sampled, avg_correct, avg_total], dtype=torch.float64, device=flat.device)
        channel.allreduce(sums, average=False)
    avg_accuracy = float(sums[2] / sums[3])
    return EvalResult(
        test_acc_mean=avg_accuracy if replicas_identical else float(sums[0] / sums[1]),
        test_acc_avg_model=avg_accuracy,
        consensus_distance=float(distances[0]) / world,
    )


def _replace_by_mean(
    params: list[torch.Tensor], buffers: list[torch.Tensor], flat_mean: torch.Tensor
) -> tuple[float, float]:
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
