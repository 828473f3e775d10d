"""PowerSGD (Vogels, Karimireddy, Jaggi, NeurIPS 2019) with the algorithm of torch's DDP hook
``powerSGD_hook`` (``torch/distributed/algorithms/ddp_comm_hooks/powerSGD_hook.py``), applied to
each bucket of gradients, the bucket's tensors laid out as its parameters:

1. Steps ``t < start_iter`` (``start_powerSGD_iter``): a plain mean, ``x <- sum_j (x_j / W)``.
2. Error feedback: ``x <- x + e`` (no error before the first compressed step); ``c`` = a copy.
3. Each tensor is viewed as a matrix ``M`` of ``n = shape[0]`` rows and ``m = numel / n``
   columns with rank ``r = min(n, m, rank)``; it is compressed when
   ``(n + m) r * min_compression_rate < n m`` (so vectors never are), the others travel
   uncompressed in one flat buffer: ``u <- sum_j u_j / W``.
4. ``Q``: at the first compressed step (and every step without ``warm_start``) drawn from
   ``torch.manual_seed(rng.randint(1e9))`` (``rng = numpy.random.RandomState(random_seed)``, one
   draw per bucket and step, the same on every rank) as ``randn`` on the CPU, matrix by matrix in
   the order of their shapes' first appearance, each orthogonalised; with ``warm_start`` the
   previous step's ``Q``, orthogonalised again.
5. ``P = M Q``; ``P <- sum_j P_j`` (an allreduce; no division, ``P`` is orthogonalised next);
   ``P <- orth(P)``; ``Q = M^T P``; ``Q <- sum_j Q_j / W``; ``M <- P Q^T``.
6. ``e <- c - x`` over the whole bucket (the uncompressed tensors' error too: the local value
   less the mean, as the hook keeps it).

``orth`` is Gram-Schmidt column by column (``col /= ||col||``, then the later columns lose their
projection on it) for ``r <= 2`` or half precision, else ``torch.linalg.qr``'s Q, as the hook's
``_orthogonalize``. ``tests/test_compression_references.py`` holds it to DDP with the hook to 1e-5.
On the wire: the P and Q factors and the uncompressed tensors, three allreduces per bucket.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Hashable, Sequence, cast

from dlcomm.compress.base import Compressor
from dlcomm.compress.registry import register
from dlcomm.config.schema import SEED_MAX, CompressConfig, doc, domain

if TYPE_CHECKING:
    import torch

    from dlcomm.comm.channel import Channel


@dataclass
class PowerSGDConfig(CompressConfig):
    """``compress=powersgd``: PowerSGD (Vogels et al. 2019), the algorithm of torch's DDP
    powerSGD_hook, per bucket."""

    name: str = "powersgd"
    rank: int = field(
        default=1,
        metadata=domain(
            low=1, means="r, the rank of each approximation,", doc="torch's matrix_approximation_rank, of P Q^T"
        ),
    )
    start_iter: int = field(
        default=10,
        metadata=domain(
            low=0,
            means="the number of plain steps before compression begins",
            doc="start_powerSGD_iter: steps of the plain mean (> 1 with warm start or error feedback)",
        ),
    )
    min_compression_rate: float = field(
        default=2.0,
        metadata=domain(
            above=0, means="the minimum compression rate", doc="compress a matrix only when n m > (n + m) r times this"
        ),
    )
    error_feedback: bool = field(
        default=True, metadata=doc("use_error_feedback: add the last step's compression error to the tensor")
    )
    warm_start: bool = field(
        default=True, metadata=doc("reuse the last step's Q (orthogonalised again) instead of drawing a new one")
    )
    random_seed: int = field(
        default=0,
        metadata=domain(
            low=0,
            high=SEED_MAX,
            doc="seeds the numpy generator whose draws seed each new Q (the same on every rank; numpy takes 0 to 2**32 - 1)",
        ),
    )


def should_compress(n: int, m: int, rank: int, min_rate: float) -> bool:
    """Whether an ``n x m`` matrix is worth a rank-``rank`` approximation (the hook's rule)."""
    return (n + m) * rank * min_rate < n * m


def useful_rank(n: int, m: int, min_rate: float) -> int:
    """The largest rank at which an ``n x m`` matrix is compressed (:func:`should_compress`); 0: none."""
    import math

    best = max(0, min(n, m, math.ceil(n * m / ((n + m) * min_rate))))  # the bound, then exact by the rule
    while best > 0 and not should_compress(n, m, best, min_rate):
        best -= 1
    return best


def orthogonalise(matrices: "torch.Tensor") -> None:
    """In place, the columns of each matrix of a batch ``(b, n, r)`` orthonormal (see the module)."""
    import torch

    rank = matrices.shape[2]
    if rank > 2 and matrices.dtype not in (torch.float16, torch.bfloat16):
        scratch = torch.empty(matrices.shape[0], rank, rank, device=matrices.device, dtype=matrices.dtype)
        torch.linalg.qr(matrices, out=(matrices, scratch))
        return
    for i in range(rank):
        col = matrices[:, :, i : i + 1]
        col /= torch.linalg.vector_norm(col, dim=1, keepdim=True)
        if i + 1 < rank:
            rest = matrices[:, :, i + 1 :]
            rest -= torch.sum(col * rest, dim=1, keepdim=True) * col


@register
class PowerSGD(Compressor[PowerSGDConfig]):
    display_name = "PowerSGD"
    Config = PowerSGDConfig
    summable = True
    kinds = ("tensor",)  # its factors are summed as they are computed: no message a peer decompresses alone

    @classmethod
    def check_model(cls, cfg: PowerSGDConfig, model) -> None:
        """A rank at which none of the model's matrices is compressed makes PowerSGD a plain mean
        without a word: refused where a smaller rank would compress some (a model none of whose
        tensors is worth compressing at any rank is left to the mean, as the hook leaves it)."""
        from dlcomm.errors import UserError

        rate = cfg.min_compression_rate
        rows = [p.shape[0] if p.dim() else 1 for p in model.parameters() if p.requires_grad and p.numel()]
        sizes = [p.numel() for p in model.parameters() if p.requires_grad and p.numel()]
        matrices = [(n, size // n) for n, size in zip(rows, sizes)]  # each tensor as the hook views it
        most = max((useful_rank(n, m, rate) for n, m in matrices), default=0)
        if most and not any(should_compress(n, m, min(n, m, cfg.rank), rate) for n, m in matrices):
            raise UserError(
                f"compress.rank={cfg.rank} is invalid: at that rank none of the model's matrices is compressed "
                f"(compress.min_compression_rate={cfg.min_compression_rate:g}), so PowerSGD would send them whole; "
                f"pass compress.rank={most} or less"
            )

    @classmethod
    def check(cls, cfg: PowerSGDConfig) -> None:
        from dlcomm.config.validate import require

        require(
            cfg.start_iter > 1 or not (cfg.error_feedback or cfg.warm_start),
            "compress.start_iter",
            cfg.start_iter,
            "with error feedback or warm start PowerSGD needs at least 2 plain steps first (torch's rule); pass 2 or more",
        )

    def __init__(self, cfg: PowerSGDConfig, seed: int = 0) -> None:
        import numpy as np

        super().__init__(cfg, seed)
        self.rng = np.random.RandomState(cfg.random_seed)
        self.errors: dict[Hashable, torch.Tensor] = {}
        self.qs: dict[Hashable, torch.Tensor] = {}

    def start(
        self,
        tensor: "torch.Tensor",
        key: Hashable,
        step: int,
        channel: "Channel",
        group: str,
        shapes: Sequence["torch.Size"] | None = None,
    ):
        size = channel.group_size(group)
        if step < self.cfg.start_iter:
            tensor.div_(size)
            return _Done(tensor, channel.allreduce(tensor, group=group, average=False, async_op=True))
        return _Round(self, tensor, key, shapes or [tensor.shape], channel, group)

    def state_dict(self) -> dict:
        """The errors, the warm-start Qs and the numpy generator's state (as tensors and numbers:
        checkpoints load with ``weights_only=True``)."""
        import torch

        # get_state(legacy=True), the default: the tuple ("MT19937", keys, pos, has_gauss, cached_gaussian)
        _, keys, position, has_gauss, cached = cast("tuple[str, Any, int, int, float]", self.rng.get_state())
        return {
            "rng": {
                "keys": torch.from_numpy(keys.astype("int64")),
                "pos": int(position),
                "gauss": [int(has_gauss), float(cached)],
            },
            "errors": {key: value.clone() for key, value in self.errors.items()},
            "qs": {key: value.clone() for key, value in self.qs.items()},
        }

    def load_state_dict(self, state: dict) -> None:
        if "rng" in state:
            saved = state["rng"]
            keys = saved["keys"].numpy().astype("uint32")
            self.rng.set_state(("MT19937", keys, saved["pos"], saved["gauss"][0], saved["gauss"][1]))
        self.errors = {key: value.clone() for key, value in state.get("errors", {}).items()}
        self.qs = {key: value.clone() for key, value in state.get("qs", {}).items()}


class _Done:
    def __init__(self, tensor: "torch.Tensor", handle: Any) -> None:
        self.tensor, self.handle = tensor, handle

    def wait(self) -> "torch.Tensor":
        self.handle.wait()
        return self.tensor


class _Round:
    """One compressed step of one bucket: steps 2-4 and ``P = M Q`` at once, the rest in ``wait``."""

    def __init__(self, owner: PowerSGD, tensor, key, shapes, channel: "Channel", group: str) -> None:
        self.owner, self.tensor, self.key, self.channel, self.group = owner, tensor, key, channel, group
        self.size = channel.group_size(group)
        with owner.computing():  # steps 2-4 and P = M Q: the compressor's own compute
            self._start(owner, tensor, key, shapes)
        # every member has the same layout: an empty part is skipped by all (the hook allreduces it anyway)
        self.u_handle = _allreduce_sum(channel, self.flat_uncompressed, group)
        self.p_handle = _allreduce_sum(channel, self.p_memory, group)

    def _start(self, owner: PowerSGD, tensor, key, shapes) -> None:
        import torch

        cfg = owner.cfg
        if cfg.error_feedback:
            if key in owner.errors:
                tensor.add_(owner.errors[key])
            self.copy = tensor.detach().clone()
        views, offset = [], 0
        for shape in shapes:
            numel = shape.numel()
            views.append(tensor[offset : offset + numel].view(shape))
            offset += numel
        matrices, self.uncompressed, p_total, q_total = [], [], 0, 0
        for view in views:
            matrix = view.view(view.shape[0], -1) if view.dim() > 0 else view.view(1, 1)
            n, m = matrix.shape
            rank = min(n, m, cfg.rank)
            if should_compress(n, m, rank, cfg.min_compression_rate):
                matrices.append(matrix)
                p_total, q_total = p_total + n * rank, q_total + m * rank
            else:
                self.uncompressed.append(view)
        flat = [t.reshape(-1) for t in self.uncompressed]
        self.flat_uncompressed = torch.cat(flat) if flat else tensor.new_empty(0)
        fresh = not cfg.warm_start or key not in owner.qs
        if fresh:
            owner.qs[key] = tensor.new_empty(q_total)
        self.p_memory = tensor.new_empty(p_total)
        by_shape: dict[Any, list] = defaultdict(list)
        for matrix in matrices:
            by_shape[matrix.shape].append(matrix)
        self.batches, self.ps, self.qs = [], [], []
        p_at = q_at = 0
        for group_of_shape in by_shape.values():
            for matrix in group_of_shape:
                n, m = matrix.shape
                rank = min(n, m, cfg.rank)
                self.batches.append(matrix.unsqueeze(0))
                self.ps.append(self.p_memory[p_at : p_at + n * rank].view(1, n, rank))
                self.qs.append(owner.qs[key][q_at : q_at + m * rank].view(1, m, rank))
                p_at, q_at = p_at + n * rank, q_at + m * rank
        if fresh:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(owner.rng.randint(1_000_000_000))
                for q in self.qs:
                    q.copy_(torch.randn(*q.shape, device="cpu", dtype=tensor.dtype))
                    orthogonalise(q)
        else:
            for q in self.qs:
                orthogonalise(q)
        for matrix, q, p in zip(self.batches, self.qs, self.ps):
            torch.bmm(matrix, q, out=p)

    def wait(self) -> "torch.Tensor":
        import torch

        owner, cfg = self.owner, self.owner.cfg
        self.u_handle.wait()
        self.flat_uncompressed.div_(self.size)
        offset = 0
        for view in self.uncompressed:
            view.copy_(self.flat_uncompressed[offset : offset + view.numel()].view_as(view))
            offset += view.numel()
        self.p_handle.wait()
        with owner.computing():
            for p in self.ps:
                orthogonalise(p)
            for matrix, p, q in zip(self.batches, self.ps, self.qs):
                torch.bmm(matrix.transpose(1, 2), p, out=q)
        _allreduce_sum(self.channel, owner.qs[self.key], self.group).wait()
        with owner.computing():
            owner.qs[self.key].div_(self.size)
            for p, q, matrix in zip(self.ps, self.qs, self.batches):
                torch.bmm(p, q.transpose(1, 2), out=matrix)
            if cfg.error_feedback:
                owner.errors[self.key] = self.copy - self.tensor
        if not cfg.warm_start:
            owner.qs.pop(self.key, None)
        return self.tensor


class _Nothing:
    def wait(self) -> None:
        return None


def _allreduce_sum(channel: "Channel", tensor: "torch.Tensor", group: str):
    if tensor.numel() == 0:
        return _Nothing()
    return channel.allreduce(tensor, group=group, average=False, async_op=True)
