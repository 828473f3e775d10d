"""The synchronous parameter server (the layer-dropping paper's baseline;
docs/algorithms.md, "Parameter server").

One ``server`` service process holds the master parameters and the optimizer; every iteration
each worker sends its gradients, the server waits for all ``n``, averages,

    g_l = (1/n) sum_i g_l^i,    x <- optimizer step of x with g

and sends the parameters back; the workers overwrite theirs (their own optimizer never steps).

The communicator is written once for both variants: what a worker sends for layer ``l`` is
decided by a compressor over the output of a memory (``dlcomm.compress``): ``ps`` sends every
layer's gradient as it is; ``ps_layerdrop`` sends a placeholder for the layers it drops.
Messages: a header ``[lr, keep_1 .. keep_L]`` then the kept layers in one flat payload (a
dropped layer costs nothing but its header slot, the paper's size-one ``[0]``); the server
expands placeholders to zeros, and a layer no worker sent is *unchanged*: the optimizer skips it
(no momentum, no weight decay), and the answer ``[server compute s, changed_1 .. changed_L]``
carries only the changed layers, which the workers overwrite.

Statistics (:meth:`ParameterServer.take_metrics`, docs/metrics.md): per iteration, the fraction
of gradient entries in the layers a worker dropped, ``sum_{l dropped} |g_l| / sum_l |g_l|``
(``|g_l|`` the layer's entry count; 0 for ``ps``), and the server's compute time (reported in the
answer's header).

The learning rate travels in the header (the workers run the schedule; the server applies
worker 0's value), and rank 0 hands the server its initial parameters.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, TypeVar

from dlcomm.algorithms.base import Algorithm
from dlcomm.algorithms.registry import register
from dlcomm.compress import KeepAll
from dlcomm.config.schema import AlgoConfig
from dlcomm.config.validate import require
from dlcomm.metrics import names
from dlcomm.metrics.stats import Mean, Stat

if TYPE_CHECKING:
    import torch

DONE = -1.0  # a header whose lr is DONE: the worker is finished


@dataclass
class PSConfig(AlgoConfig):
    """``algo=ps``, the synchronous parameter server (the layer-dropping paper's baseline): one extra
    ``server`` process holds the parameters and the optimizer; workers send gradients and get the
    parameters back. No knobs."""

    name: str = "ps"


@dataclass
class PSStats:
    """Per iteration, on a worker: the server's compute time, bytes each way, dropped fraction."""

    server_compute_s: list[float] = field(default_factory=list)
    bytes_up: list[int] = field(default_factory=list)
    bytes_down: list[int] = field(default_factory=list)
    dropped: list[float] = field(default_factory=list)
    sent: list[list[bool]] = field(default_factory=list)  # which layers this worker sent
    changed: list[list[bool]] = field(default_factory=list)  # which layers the server sent back


def _flat(tensors: list[torch.Tensor], device: torch.device) -> torch.Tensor:
    """The tensors in one flat buffer; one zero when there are none (gloo sends no empty message),
    on ``device`` (the backend's device: NCCL carries only CUDA tensors)."""
    import torch

    return torch.cat([t.reshape(-1) for t in tensors]) if tensors else torch.zeros(1, device=device)


C = TypeVar("C", bound=AlgoConfig)  # ps reads no knob of its own; ps_layerdrop's Config is its own


@register
class ParameterServer(Algorithm[C]):
    display_name = "parameter server"
    Config: ClassVar[type[AlgoConfig]] = PSConfig
    compression: ClassVar[tuple[str, ...]] = ("layers",)  # compress=layerdrop: which layers a worker sends

    @classmethod
    def roles(cls, cfg: AlgoConfig) -> tuple[str, ...]:
        return ("server",)

    @classmethod
    def check_world(cls, cfg: AlgoConfig, nodes: int, workers_per_node: int) -> None:
        require(
            nodes * workers_per_node >= 2,
            "nodes",
            nodes,
            "a parameter server with one worker is plain SGD; pass nodes=2 or more (the paper: 4 and 8)",
        )

    def layer_selector(self):
        """Which layers a worker sends: all (``ps``), or the layer-dropping compressor's choice
        (``compress=layerdrop``, or ``algo=ps_layerdrop``)."""
        if "layers" in self.compressor.kinds:
            return self.compressor.selector()
        return KeepAll()

    def layer_memory(self, params: list[torch.Tensor]):
        """What a worker keeps of the layers it did not send (the compressor's residual memory)."""
        if "layers" in self.compressor.kinds:
            return self.compressor.memory_for([p.shape for p in params], self.cluster.device)
        return None

    # ---- worker ----------------------------------------------------------------------
    def setup(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        super().setup(model, optimizer)
        self.params: list[torch.Tensor] = list(model.parameters())
        self.server = self.cluster.layout.service_rank("server")
        self.compress = self.layer_selector()
        self.residual = self.layer_memory(self.params)
        self.stats = PSStats()
        self.taken = 0  # iterations of self.stats already handed to take_metrics
        if self.cluster.rank == 0:
            initial = _flat([p.detach() for p in self.params], self.cluster.device)
            self.channel.exchange(sends=[(initial, self.server)], group="job").wait()

    def reduce_gradients(self, step: int) -> None:
        import torch

        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        tensors = self.residual.compensate(grads) if self.residual is not None else grads
        keep = self.compress.select(tensors, step)
        assert self.optimizer is not None  # set by setup()
        lr = self.optimizer.param_groups[0]["lr"]
        header = torch.tensor([lr, *map(float, keep)], dtype=torch.float32, device=self.cluster.device)
        payload = _flat([t for t, k in zip(tensors, keep) if k], self.cluster.device)
        # between this worker and the server, messages match in order: header, payload up; reply, fresh down
        sends = self.channel.exchange([(header, self.server), (payload, self.server)], group="job")
        reply = torch.empty(len(self.params) + 1, dtype=torch.float32, device=self.cluster.device)
        self.channel.exchange(recvs=[(reply, self.server)], group="job").wait()
        changed = [bool(c) for c in reply[1:].tolist()]
        fresh = torch.empty(
            max(1, sum(p.numel() for p, c in zip(self.params, changed) if c)), device=self.cluster.device
        )
        self.channel.exchange(recvs=[(fresh, self.server)], group="job").wait()
        sends.wait()
        if self.residual is not None:
            self.residual.update(keep)
        with torch.no_grad():
            offset = 0
            for param, is_changed in zip(self.params, changed):
                if is_changed:
                    param.copy_(fresh[offset : offset + param.numel()].view_as(param))
                    offset += param.numel()
        for param in self.params:
            param.grad = None  # the server stepped: the workers' own optimizer must not
        stats = self.stats
        stats.server_compute_s.append(float(reply[0]))
        stats.bytes_up.append((header.numel() + (payload.numel() if any(keep) else 0)) * 4)
        stats.bytes_down.append((reply.numel() + (fresh.numel() if any(changed) else 0)) * 4)
        stats.dropped.append(getattr(self.compress, "last_dropped_fraction", 0.0))
        stats.sent.append(keep)
        stats.changed.append(changed)

    def take_metrics(self) -> dict[str, Stat]:
        """The dropped fraction and the server's compute time of the iterations since the last call."""
        new = slice(self.taken, len(self.stats.dropped))
        self.taken = new.stop
        return {
            names.PS_DROPPED_FRACTION: Mean(self.stats.dropped[new]),
            names.PS_SERVER_COMPUTE: Mean(self.stats.server_compute_s[new]),
        }

    def finish(self) -> None:
        """Tell the server this worker is done (inside an iteration, so that it is modelled as
        the server's receives expect)."""
        import torch

        done = torch.full((len(self.params) + 1,), DONE, dtype=torch.float32, device=self.cluster.device)
        self.channel.begin_iteration()
        self.channel.exchange(sends=[(done, self.server)], group="job").wait()
        self.channel.end_iteration()

    def state_dict(self) -> dict:
        return {"memory": self.residual.state_dict()} if self.residual is not None else {}

    def load_state_dict(self, state: dict) -> None:
        if self.residual is not None and "memory" in state:
            self.residual.load_state_dict(state["memory"])

    # ---- server ----------------------------------------------------------------------
    def serve(self, role: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        import torch

        channel, device = self.channel, self.cluster.device
        params: list[torch.Tensor] = list(model.parameters())
        workers = list(range(self.cluster.world_size))
        initial = _flat([p.detach() for p in params], device).clone()
        channel.exchange(recvs=[(initial, 0)], group="job").wait()
        with torch.no_grad():
            offset = 0
            for param in params:
                param.copy_(initial[offset : offset + param.numel()].view_as(param))
                offset += param.numel()
        for iteration in itertools.count():
            channel.begin_iteration()
            headers = [torch.empty(len(params) + 1, dtype=torch.float32, device=device) for _ in workers]
            channel.exchange(recvs=list(zip(headers, workers)), group="job", incast=True).wait()
            if float(headers[0][0]) == DONE:
                channel.end_iteration()
                return
            keeps = [[bool(k) for k in header[1:].tolist()] for header in headers]
            payloads = [
                torch.empty(max(1, sum(p.numel() for p, k in zip(params, keep) if k)), device=device) for keep in keeps
            ]
            channel.exchange(recvs=list(zip(payloads, workers)), group="job", incast=True).wait()
            started = channel.clock.now()
            channel.compute_meter.step_begins(iteration)  # under the profile: the update costs an optimizer step
            changed = self._apply(params, optimizer, keeps, payloads, float(headers[0][0]))
            channel.compute_meter.step_ends()
            fresh = _flat([p.detach() for p, c in zip(params, changed) if c], device)
            reply = torch.tensor(
                [channel.clock.now() - started, *map(float, changed)], dtype=torch.float32, device=device
            )
            channel.exchange(
                [message for worker in workers for message in ((reply, worker), (fresh, worker))], group="job"
            ).wait()
            channel.end_iteration()

    @staticmethod
    def _apply(
        params: list[torch.Tensor],
        optimizer: torch.optim.Optimizer,
        keeps: list[list[bool]],
        payloads: list[torch.Tensor],
        lr: float,
    ) -> list[bool]:
        """Placeholders as zeros, the mean over workers, one optimizer step on the layers that
        some worker sent; which layers changed."""
        import torch

        n = len(keeps)
        sums = [torch.zeros_like(p) for p in params]
        for keep, payload in zip(keeps, payloads):
            offset = 0
            for total, kept in zip(sums, keep):
                if kept:
                    total.add_(payload[offset : offset + total.numel()].view_as(total))
                    offset += total.numel()
        changed = [any(keep[layer] for keep in keeps) for layer in range(len(params))]
        for param, total, is_changed in zip(params, sums, changed):
            param.grad = total.div_(n) if is_changed else None
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.step()
        return changed
