"""DeMo: Decoupled Momentum Optimization (Peng, Quesnelle, Kingma, arXiv 2411.19870), as the
authors' ``DeMo`` optimizer (bloc97/DeMo, ``demo.py``, ``DeMo.step``) computes it.

Every worker keeps its own momentum ``m`` for each parameter ``p`` (from 0), and at every step,
with the optimizer's learning rate ``lr`` (``optim.lr``, its schedule) and decoupled weight decay
``wd`` (``optim.weight_decay``)::

    p  <- p (1 - lr wd)                                  # decoupled weight decay (skipped at 0)
    m  <- beta m + lr g                                  # beta = algo.decay; lr inside the momentum
    q  = top-k per chunk of DCT(m)                       # (indices, values) per chunk: algo.chunk, algo.topk
    m  <- m - IDCT(scatter(q))                           # what is sent leaves the momentum
    Q  = all-gather(q)                                   # every worker's payload
    p  <- p - lr sign(IDCT(scatter-mean(Q)))             # an entry several workers sent: their mean

``sign(0) = 0``. The chunks, the DCT and the top-k are :mod:`dlcomm.algorithms.chunks`'. The
reference is a ``torch.optim.SGD`` whose momentum and weight decay it fixes at 0; here the
algorithm takes the step itself in :meth:`reduce_gradients` and clears the gradients, so the
configured optimizer (``optim=sgd``, the only one accepted) only holds the learning rate and its
schedule: its ``momentum`` and ``nesterov`` are not used. The momenta are the algorithm's state
(in the checkpoint). One all-gather a parameter tensor, of its packed values and indices.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dlcomm.algorithms.base import Algorithm
from dlcomm.algorithms.chunks import Chunks, check_knobs, scatter_mean, top_k
from dlcomm.algorithms.registry import register
from dlcomm.compress.base import pack, unpack
from dlcomm.config.schema import AlgoConfig, OptimConfig, domain
from dlcomm.errors import UserError

if TYPE_CHECKING:
    import torch


@dataclass
class DeMoConfig(AlgoConfig):
    """``algo=demo``, DeMo (Peng et al. 2024, arXiv 2411.19870; the authors' ``DeMo`` optimizer):
    each worker's own momentum, its DCT top-k per chunk sent and removed from it, every worker's
    all-gathered, and a signed step on their decoded aggregate at optim.lr (optim=sgd)."""

    name: str = "demo"
    decay: float = field(
        default=0.999,
        metadata=domain(
            low=0,
            below=1,
            means="beta, the momentum's decay (compression_decay),",
            doc="the reference's compression_decay (default 0.999)",
        ),
    )
    topk: int = field(
        default=32,
        metadata=domain(
            low=1,
            means="the entries sent per chunk (compression_topk)",
            doc="the reference's compression_topk (default 32); clamped to a chunk's entries, as there",
        ),
    )
    chunk: int = field(
        default=64,
        metadata=domain(
            low=1,
            means="the target chunk edge (compression_chunk)",
            doc="a dimension n is cut into its largest divisor <= chunk (the reference's compression_chunk, 64)",
        ),
    )


@register
class DeMo(Algorithm[DeMoConfig]):
    display_name = "DeMo"
    Config = DeMoConfig
    point_to_point = False  # all-gathers only
    takes_own_step = True  # the signed step, in reduce_gradients (fp16 loss scaling refused)

    @classmethod
    def check_optimizer(cls, cfg: DeMoConfig, optim: OptimConfig) -> None:
        if optim.name != "sgd":
            raise UserError(
                f"optim={optim.name} cannot train algo=demo: DeMo takes its own signed step at the optimizer's "
                "learning rate (the reference is a torch SGD without momentum); pass optim=sgd"
            )

    @classmethod
    def check_model(cls, cfg: DeMoConfig, model: torch.nn.Module) -> None:
        check_knobs(cfg.chunk, cfg.topk, model)

    def setup(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        import torch

        super().setup(model, optimizer)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.chunks = [Chunks(p.shape, self.cfg.chunk, True, p.dtype, p.device) for p in self.params]
        self.momenta = [torch.zeros_like(p) for p in self.params]
        groups = {id(p): group for group in optimizer.param_groups for p in group["params"]}
        self.groups = [groups[id(p)] for p in self.params]

    def reduce_gradients(self, step: int) -> None:
        import torch

        with torch.no_grad():
            pending = []
            for p, momentum, chunks, group in zip(self.params, self.momenta, self.chunks, self.groups):
                lr, wd = group["lr"], group.get("weight_decay", 0.0)
                if wd != 0.0:
                    p.mul_(1.0 - lr * wd)
                if self.cfg.decay != 1:
                    momentum.mul_(self.cfg.decay)
                if p.grad is not None:
                    momentum.add_(p.grad, alpha=lr)
                encoded = chunks.encode(momentum)
                indices, values = top_k(encoded, chunks.kept(self.cfg.topk))
                momentum.sub_(chunks.decode(scatter_mean(encoded, [indices], [values])))
                payload = [values, indices.to(chunks.index_dtype())]
                pending.append((payload, encoded, self.channel.allgather(pack(payload), async_op=True)))
            for p, chunks, group, (payload, encoded, handle) in zip(self.params, self.chunks, self.groups, pending):
                gathered = [unpack(message, payload) for message in handle.wait()]
                aggregate = scatter_mean(encoded, [i for _, i in gathered], [v for v, _ in gathered])
                p.sub_(torch.sign(chunks.decode(aggregate)), alpha=group["lr"])
                p.grad = None  # the step is taken: the configured optimizer skips p

    def state_dict(self) -> dict:
        return {"momenta": [m.clone() for m in self.momenta]}

    def load_state_dict(self, state: dict) -> None:
        from dlcomm.saved import copy_into, entry

        copy_into(self.momenta, entry(state, "momenta", "the algorithm's state"), "DeMo's momenta")
