"""The outer loop DiLoCo and Streaming DiLoCo share: global parameters ``theta`` beside flat
parameter buckets, the outer gradient ``theta - x_i`` averaged over the workers through the
Channel (or through the compressor of ``compress=<name>``), and the outer SGD with Nesterov
momentum (torch.optim.SGD's form) that every worker applies alike::

    delta = (1/n) * sum_i (theta - x_i)              # one allreduce (mean) per bucket, or the compressor's mean
    v     = mu * v + delta                           # outer momentum (v starts at 0)
    theta = theta - lr_outer * (delta + mu * v)      # nesterov=true
    theta = theta - lr_outer * v                     # nesterov=false (heavy ball); mu = 0: theta - lr delta

What the replicas do with the new ``theta`` (restart from it, or mix it in) is the algorithm's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    import torch

    from dlcomm.algorithms.buckets import Bucket
    from dlcomm.comm.channel import Channel
    from dlcomm.compress.base import Compressor


class Averaging:
    """Outer gradients being averaged over ``world``: :meth:`wait` (any number of times) leaves the
    mean in each tensor, as the Channel's allreduce or the compressor's aggregate gives it."""

    def __init__(self, tensors: list[torch.Tensor], handles: list) -> None:
        self.tensors, self.handles = tensors, handles

    def wait(self) -> list[torch.Tensor]:
        for handle in self.handles:
            handle.wait()
        self.handles = []  # a compressor's pending divides on every wait: once only
        return self.tensors


class OuterSGD:
    """``theta`` and ``v`` for each of ``buffers`` (flat parameter buckets: ``buckets[k]``'s view),
    the averaging of outer gradients and the outer step. ``keys[k]`` names bucket ``k`` to the
    compressor across steps (its memory, its draws)."""

    def __init__(
        self,
        cfg,
        buffers: list[torch.Tensor],
        buckets: list[Bucket],
        channel: Channel,
        compressor: Compressor,
    ) -> None:
        import torch

        self.cfg, self.buffers, self.buckets = cfg, buffers, buckets
        self.channel, self.compressor = channel, compressor
        self.theta = [buffer.clone() for buffer in buffers]  # the global parameters
        self.momentum = [torch.zeros_like(buffer) for buffer in buffers]

    def gradient(self, index: int, out: torch.Tensor | None = None) -> torch.Tensor:
        """This replica's outer gradient ``theta - x_i`` of bucket ``index`` (into ``out`` if given)."""
        import torch

        if out is None:
            return torch.sub(self.theta[index], self.buffers[index])
        return torch.sub(self.theta[index], self.buffers[index], out=out)

    def average(self, indices: Sequence[int], deltas: list[torch.Tensor], step: int) -> Averaging:
        """Start averaging ``deltas`` (the outer gradients of buckets ``indices``) over ``world``."""
        if self.compressor.identity:
            handles = [self.channel.allreduce(delta, average=True, async_op=True) for delta in deltas]
        else:
            handles = [
                self.compressor.start(
                    delta, index, step, self.channel, "world", [p.shape for p in self.buckets[index].params]
                )
                for index, delta in zip(indices, deltas)
            ]
        return Averaging(deltas, handles)

    def step(self, index: int, delta: torch.Tensor) -> torch.Tensor:
        """The outer SGD step of bucket ``index`` with the averaged ``delta``; the new ``theta``."""
        lr, mu = self.cfg.outer_lr, self.cfg.outer_momentum
        theta, velocity = self.theta[index], self.momentum[index]
        if mu == 0:
            theta.sub_(delta, alpha=lr)
        else:
            velocity.mul_(mu).add_(delta)
            theta.sub_(delta.add(velocity, alpha=mu) if self.cfg.nesterov else velocity, alpha=lr)
        return theta

    def state_dict(self) -> dict:
        state: dict[str, Any] = {
            "theta": [t.clone() for t in self.theta],
            "momentum": [v.clone() for v in self.momentum],
        }
        if not self.compressor.identity:
            state["compressor"] = self.compressor.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        """Every saved bucket checked against this run's before any is copied: a checkpoint of other
        buckets (another model or bucket_mb) is refused (:class:`~dlcomm.saved.StateMismatch`), not half loaded."""
        from dlcomm.saved import copy_into, entry, tensors

        where = "the algorithm's state"
        theta = tensors(entry(state, "theta", where), self.theta, "the algorithm's theta")
        momentum = tensors(entry(state, "momentum", where), self.momentum, "the algorithm's outer momentum")
        compressor = None if self.compressor.identity else entry(state, "compressor", where)
        copy_into(self.theta, theta, "the algorithm's theta")
        copy_into(self.momentum, momentum, "the algorithm's outer momentum")
        if compressor is not None:
            self.compressor.load_state_dict(compressor)
