"""Streaming DiLoCo: DiLoCo synchronised a fragment of the model at a time, the exchange
overlapped with inner steps (Douillard et al., "Streaming DiLoCo with overlapping communication:
Towards a Distributed Free Lunch", arXiv 2501.18512).

The parameters are split into ``P = fragments`` fragments of layers (a layer: a module owning
parameters, in registration order): strided, fragment ``p`` holding layers ``p, p + P, ...`` (the
paper's default), or sequential, contiguous runs of about equal parameter counts. Fragment
``p`` has the offset ``o_p = floor(p H / P)`` (``H = period``); counting inner steps ``t = 1, 2,
...`` (iteration ``step`` is ``t = step + 1``), after inner step ``t``, on every worker::

    (t - o_p) mod H == 0, t - o_p >= H:
                                 delta_p <- theta_p - x_{i,p}          # this replica's outer gradient
                                 start averaging delta_p over the workers (one allreduce per bucket)
    (t - o_p - tau) mod H == 0:  delta_p <- the average (waited for: it had tau inner steps to travel)
                                 theta_p <- OuterSGD(theta_p, delta_p)  # dlcomm.algorithms.outer (DiLoCo's)
                                 x_{i,p} <- alpha x_{i,p} + (1 - alpha) theta_p   # the merge; alpha = 0: replace

``tau = overlap_steps``, ``alpha`` the mixing factor. With one fragment, ``tau = 0`` and
``alpha = 0`` it is DiLoCo (``algo=diloco``), bit for bit. Every fragment takes ``H`` inner
steps before its first exchange (the paper's Sec. 2.2: with ``H = 100``, ``P = 2`` the second
fragment synchronises at ``t = 150, 250, ...``). The outer gradient is formed against
``theta_p``, the global parameters of the fragment's last outer step (the same on every worker), so
the replicas need not send ``theta``. ``tau * P < H``: at most one fragment's exchange is in
flight, and each fragment's has arrived before it sends again. docs/algorithms.md has the rule
with the paper's notation and what was resolved where the text leaves a choice.

Every fragment keeps ``theta`` and the outer momentum per bucket; both, and an exchange in flight
(its average, waited for at the checkpoint: a resumed run applies it at the same step), are in
:meth:`state_dict`. With ``compress=<name>`` the outer gradients are averaged through the
compressor (``compress=lowbit``: the paper's 4-bit floats, docs/compression.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dlcomm.algorithms.base import Algorithm
from dlcomm.algorithms.buckets import Bucket, make_buckets
from dlcomm.algorithms.diloco import OuterLoopConfig
from dlcomm.algorithms.outer import Averaging, OuterSGD
from dlcomm.algorithms.registry import register
from dlcomm.config.schema import domain
from dlcomm.config.validate import require
from dlcomm.errors import UserError

if TYPE_CHECKING:
    import torch


@dataclass
class StreamingDiLoCoConfig(OuterLoopConfig):
    """``algo=streaming_diloco``, Streaming DiLoCo (Douillard et al. 2025, arXiv 2501.18512): DiLoCo
    whose parameters are split into ``fragments`` (strided over the layers by default), each synchronised every
    ``period`` inner steps at its own offset floor(p period / fragments); a fragment's averaged outer
    gradient arrives ``overlap_steps`` inner steps after it was sent, drives DiLoCo's outer Nesterov
    SGD, and is mixed into the local fragment: x <- alpha x + (1 - alpha) theta. With fragments=1,
    overlap_steps=0, alpha=0 it is algo=diloco."""

    name: str = "streaming_diloco"
    fragments: int = field(
        default=2,
        metadata=domain(
            low=1,
            means="P, the number of fragments synchronised in turn,",
            doc="groups of layers (how they are grouped: pattern)",
        ),
    )
    pattern: str = field(
        default="strided",
        metadata=domain(
            one_of=("strided", "sequential"),
            means="how the layers are grouped into fragments",
            doc='strided: fragment p holds layers p, p + P, p + 2P, ... (the paper\'s default, "interleaved"); sequential: P contiguous runs of layers of about equal parameter counts',
        ),
    )
    overlap_steps: int = field(
        default=1,
        metadata=domain(
            low=0,
            means="tau, the inner steps a fragment's exchange overlaps,",
            doc="overlap_steps * fragments < period; 0: each fragment's exchange blocks, as DiLoCo's",
        ),
    )
    outer_lr: float = field(
        default=0.4,
        metadata=domain(
            above=0,
            means="the outer SGD's learning rate",
            doc="the Streaming DiLoCo paper's, tuned once and kept for DiLoCo and Streaming DiLoCo at every scale",
        ),
    )
    alpha: float = field(
        default=0.5,
        metadata=domain(
            low=0,
            high=1,
            means="the mixing factor of the local parameters",
            doc="x <- alpha x + (1 - alpha) theta; the paper states no default (its Figs. 8 and 10: 0.5); 0 replaces the fragment by theta (DiLoCo's restart)",
        ),
    )


def fragment_offsets(period: int, fragments: int) -> list[int]:
    """``o_p = floor(p H / P)``: the inner step (mod ``H``) after which fragment ``p`` sends."""
    return [p * period // fragments for p in range(fragments)]


def split_layers(model: torch.nn.Module, fragments: int, pattern: str = "sequential") -> list[list[torch.nn.Parameter]]:
    """The trainable parameters of the layers (modules owning parameters, in registration order)
    in ``fragments`` groups. ``strided``: fragment ``p`` holds layers ``p, p + P, p + 2P, ...``
    (the paper's default). ``sequential``: contiguous runs of about equal parameter counts,
    fragment ``k`` ending after the first layer where the running count reaches ``(k + 1) / P``
    of the total, each keeping at least one layer. ``UserError`` when the model has fewer layers
    than fragments."""
    layers: list[list[torch.nn.Parameter]] = []
    seen: set[int] = set()
    for _, module in model.named_modules():
        own = [p for p in module.parameters(recurse=False) if p.requires_grad and id(p) not in seen]
        seen.update(id(p) for p in own)
        if own:
            layers.append(own)
    if len(layers) < fragments:
        raise UserError(
            f"algo.fragments={fragments} is invalid: the model has {len(layers)} layers with parameters; "
            f"pass algo.fragments={max(1, len(layers))} or less"
        )
    if pattern == "strided":
        return [[p for layer in layers[start::fragments] for p in layer] for start in range(fragments)]
    counts = [sum(p.numel() for p in layer) for layer in layers]
    total, running = sum(counts), 0
    cuts: list[int] = []
    for index, count in enumerate(counts):
        running += count
        k = len(cuts) + 1  # the fragment boundary sought next
        left = len(layers) - index - 1  # layers after this one
        if k < fragments and (running * fragments >= k * total or left == fragments - k):
            cuts.append(index + 1)
    bounds = [0, *cuts, len(layers)]
    return [[p for layer in layers[a:b] for p in layer] for a, b in zip(bounds, bounds[1:])]


@register
class StreamingDiLoCo(Algorithm[StreamingDiLoCoConfig]):
    display_name = "Streaming DiLoCo"
    Config = StreamingDiLoCoConfig
    point_to_point = False  # collectives only (launch/gpus.py: gloo carries them on CUDA)
    compression = ("tensor",)  # the outer gradients, averaged through the compressor

    @classmethod
    def check_config(cls, cfg: StreamingDiLoCoConfig) -> None:
        require(
            cfg.fragments <= cfg.period,
            "algo.fragments",
            cfg.fragments,
            f"each fragment needs its own step of the period: pass at most algo.period={cfg.period}",
        )
        require(
            cfg.overlap_steps * cfg.fragments < cfg.period,
            "algo.overlap_steps",
            cfg.overlap_steps,
            f"tau * fragments must be below the period (at most one fragment's exchange in flight): with "
            f"algo.period={cfg.period} and algo.fragments={cfg.fragments} pass at most "
            f"{(cfg.period - 1) // cfg.fragments}",
        )

    @classmethod
    def check_model(cls, cfg: StreamingDiLoCoConfig, model: torch.nn.Module) -> None:
        split_layers(model, cfg.fragments, cfg.pattern)  # a fragment per layer at most: setup's own rule

    @classmethod
    def plan_notes(cls, cfg: StreamingDiLoCoConfig, steps_per_epoch: int, total_steps: int) -> list[str]:
        tau, period = cfg.overlap_steps, cfg.period
        last = range(max(1, total_steps - tau + 1), total_steps + 1)  # inner steps whose sends arrive too late
        late = [
            p
            for p, o in enumerate(fragment_offsets(period, cfg.fragments))
            if any((t - o) % period == 0 and t - o >= period for t in last)
        ]
        if not late:
            return []
        return [
            f"fragment {late[0]}'s exchange starts in the run's last {tau} of {total_steps} iterations and is due "
            f"after them (algo.overlap_steps={tau}): it is applied after the last iteration, before the final "
            "evaluation, to the parameters as they are"
        ]

    def setup(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        super().setup(model, optimizer)
        bucket_bytes = int(self.cfg.bucket_mb * 2**20)
        self.buckets: list[Bucket] = []
        self.members: list[list[int]] = []  # members[p]: fragment p's bucket indices
        for params in split_layers(model, self.cfg.fragments, self.cfg.pattern):
            fragment = make_buckets(params, bucket_bytes)
            self.members.append(list(range(len(self.buckets), len(self.buckets) + len(fragment))))
            self.buckets += fragment
        self.buffers = [bucket.bind_params() for bucket in self.buckets]
        self.outer = OuterSGD(self.cfg, self.buffers, self.buckets, self.channel, self.compressor)
        self.offsets = fragment_offsets(self.cfg.period, self.cfg.fragments)
        self.in_flight: tuple[int, Averaging] | None = None  # (fragment, its outer gradients being averaged)

    @property
    def theta(self) -> list[torch.Tensor]:
        return self.outer.theta

    def after_step(self, step: int) -> None:
        t, period, tau = step + 1, self.cfg.period, self.cfg.overlap_steps
        if tau > 0 and self.in_flight is not None:
            fragment = self.in_flight[0]
            if (t - self.offsets[fragment] - tau) % period == 0:
                self._merge()
        for fragment, offset in enumerate(self.offsets):
            if (t - offset) % period == 0 and t - offset >= period:  # H inner steps before the first
                self._send(fragment, step)
                if tau == 0:
                    self._merge()

    def _send(self, fragment: int, step: int) -> None:
        import torch

        assert self.in_flight is None, "tau * fragments < period keeps one exchange in flight"
        indices = self.members[fragment]
        with torch.no_grad():
            deltas = [self.outer.gradient(index) for index in indices]
        self.in_flight = (fragment, self.outer.average(indices, deltas, step))

    def _merge(self) -> None:
        """The in-flight fragment's average has arrived: the outer step, then the merge."""
        import torch

        assert self.in_flight is not None
        fragment, averaging = self.in_flight
        self.in_flight = None
        alpha = self.cfg.alpha
        with torch.no_grad():
            for index, delta in zip(self.members[fragment], averaging.wait()):
                theta, local = self.outer.step(index, delta), self.buffers[index]
                if alpha == 0:
                    local.copy_(theta)
                else:
                    local.mul_(alpha).add_(theta, alpha=1 - alpha)

    def finish(self) -> None:
        """An exchange still in flight after the last iteration is applied now (the parameters as
        they are), so that every outer gradient sent reaches the model evaluated at the end."""
        if self.in_flight is not None:
            self._merge()

    def state_dict(self) -> dict:
        state = self.outer.state_dict()
        if self.in_flight is not None:  # waited for here: the resumed run applies the same average when due
            fragment, averaging = self.in_flight
            state["in_flight"] = {"fragment": fragment, "delta": [d.clone() for d in averaging.wait()]}
        return state

    def load_state_dict(self, state: dict) -> None:
        """The outer state, and an exchange in flight checked against this run's fragments (its index,
        its buckets' shapes) before any of it is used (:mod:`dlcomm.saved`)."""
        from dlcomm.saved import copy_into, entry, index

        in_flight, deltas = None, []
        if "in_flight" in state:
            saved = entry(state, "in_flight", "the algorithm's state")
            fragment = index(
                entry(saved, "fragment", "the exchange in flight"), len(self.members), "in-flight fragment"
            )
            deltas = [self.buffers[bucket].new_empty(self.buffers[bucket].shape) for bucket in self.members[fragment]]
            copy_into(deltas, entry(saved, "delta", "the exchange in flight"), f"fragment {fragment}'s outer gradient")
            in_flight = fragment
        self.outer.load_state_dict(state)
        self.in_flight = None if in_flight is None else (in_flight, Averaging(deltas, []))
