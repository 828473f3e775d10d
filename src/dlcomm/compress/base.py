"""The compressor interface, split as GRACE splits it (``grace_dl/dist``): a compressor
(``compress`` / ``decompress`` / ``aggregate``), a memory (error feedback,
:class:`ErrorFeedback`) and the communication that carries the payload, apart from who talks to
whom (the algorithm).

Averaging a tensor ``x_i`` over the ``W`` members of a group with compression is, on each rank::

    c_i = memory.compensate(x_i)                  # x_i + e_i (error feedback), or x_i
    payload_i, ctx = compress(c_i)
    e_i <- c_i - decompress(payload_i, ctx)       # memory.update, before any communication
    summable:      x <- decompress(sum_j payload_j / W, ctx)        (one allreduce per payload tensor)
    otherwise:     x <- aggregate([decompress(payload_j, ctx) for j])  (one all-gather of every payload)

``aggregate`` is the mean by default (signSGD's majority vote is not). A payload that is not
summable (sparse values with their indices, quantised levels with their norms, packed signs)
travels as one all-gather of its bytes: every payload tensor of a rank packed into one ``uint8``
message, so the bytes on the wire, ``bytes_sent`` and the modelled time are exactly the
payload's (values + indices + scales). Each rank decompresses the others' payloads with its own
``ctx`` (the shape), as GRACE does: payload sizes never depend on the data.

Compressor modules load without torch (composing a configuration imports them): torch is
imported inside the methods.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Generic, Hashable, Iterator, Protocol, Sequence, TypeVar

from dlcomm.config.schema import CompressConfig

if TYPE_CHECKING:
    import torch

    from dlcomm.comm.channel import Channel
    from dlcomm.compress.layerdrop import LayerDrop
    from dlcomm.compress.memory import ResidualMemory


class Pending(Protocol):
    def wait(self) -> Any: ...


C = TypeVar("C", bound=CompressConfig)  # the compressor's own ``Config``: ``class TopK(Compressor[TopKConfig])``


class Compressor(Generic[C]):
    """One choice of ``compress=<name>``; see the module's docstring."""

    name: ClassVar[str]
    display_name: ClassVar[str] = ""
    Config: ClassVar[type] = CompressConfig
    summable: ClassVar[bool] = False
    """Whether payloads may be summed by an allreduce (same indices on every rank, linear in the
    input): fp16, bf16, random-k with shared indices. Otherwise they are all-gathered."""
    kinds: ClassVar[tuple[str, ...]] = ("tensor", "payload")
    """What it can do, so which algorithms carry it (``Algorithm.compression`` names the kinds an
    algorithm uses): ``"tensor"``, average a flat tensor over a group (:meth:`start`);
    ``"payload"``, a message a peer decompresses alone (:meth:`encode`, :meth:`decompress`: point
    to point, for gossip); ``"layers"``, choose which layers a worker sends (``selector()`` and
    ``memory_for()``: the parameter server's communicator)."""
    identity: ClassVar[bool] = False
    """``compress=none``: the algorithms keep their own uncompressed path (bit for bit today's)."""

    @classmethod
    def check(cls, cfg: C) -> None:
        """Raise a one-line UserError for invalid knobs (``dlcomm.config.validate.require``), while
        composing (:func:`dlcomm.compose.check_algorithm`)."""

    @classmethod
    def check_model(cls, cfg: C, model: "torch.nn.Module") -> None:
        """Raise a one-line UserError for a size knob that means nothing for ``model`` (more entries
        per block than it has parameters, a rank none of its matrices can take, ...), before launch
        on the model the pre-launch check builds (:func:`dlcomm.train.prelaunch.check_model_knobs`):
        a size is bounded by the model before any rank allocates by it."""

    def __init__(self, cfg: C, seed: int = 0) -> None:
        self.cfg = cfg
        self.seed = seed
        self.memory = ErrorFeedback(enabled=bool(getattr(cfg, "error_feedback", False)))
        self._timer: Callable[[], float] | None = None
        self._charge: Callable[[float], None] | None = None

    # ---- on the simulated clock under network.compute=profile ----------------------------------
    def charge_compute(self, timer: Callable[[], float], charge: Callable[[float], None]) -> None:
        """From now on, the seconds (``timer``'s) spent in :meth:`compress`, :meth:`decompress`,
        :meth:`aggregate` and every :meth:`computing` block go to ``charge``: under
        ``network.compute=profile`` the profile holds forward and backward, not the compressor,
        whose own compute is measured where it runs and added to the rank's compute reading
        (:meth:`dlcomm.train.profile.ProfiledCompute.add`). Under ``network.compute=measured`` the
        clock already measures it: nothing is charged."""
        self._timer, self._charge = timer, charge
        for name in ("compress", "decompress", "aggregate"):
            method = getattr(self, name)

            def timed(*args: Any, _method: Callable = method, **kwargs: Any) -> Any:
                with self.computing():
                    return _method(*args, **kwargs)

            setattr(self, name, timed)

    @contextmanager
    def computing(self) -> Iterator[None]:
        """A block of the compressor's own compute (no waiting on the network inside)."""
        if self._charge is None or self._timer is None:
            yield
            return
        started = self._timer()
        try:
            yield
        finally:
            self._charge(self._timer() - started)

    # ---- the compressor proper: pure functions of a tensor (GRACE's Compressor) ---------------
    def compress(self, tensor: "torch.Tensor", key: Hashable) -> tuple[list["torch.Tensor"], Any]:
        """``(payload tensors, ctx)`` of a flat tensor; ``ctx`` stays on this rank."""
        raise NotImplementedError

    def decompress(self, payload: Sequence["torch.Tensor"], ctx: Any) -> "torch.Tensor":
        """The flat tensor a payload stands for (``ctx``: this rank's own)."""
        raise NotImplementedError

    def aggregate(self, tensors: list["torch.Tensor"]) -> "torch.Tensor":
        """What every member keeps from the members' decompressed tensors: their mean."""
        total = tensors[0].clone()
        for tensor in tensors[1:]:
            total.add_(tensor)
        return total.div_(len(tensors))

    # ---- the communication (GRACE's Communicator) --------------------------------------------
    def start(
        self, tensor: "torch.Tensor", key: Hashable, step: int, channel: "Channel", group: str, shapes: Any = None
    ) -> Pending:
        """Begin averaging the flat ``tensor`` over ``group`` (``key`` names it across steps:
        the bucket; ``step`` the iteration; ``shapes``: the tensors laid out in it, for a
        compressor that works tensor by tensor); ``wait()`` writes the result into ``tensor``."""
        self.prepare(key, step, channel.cluster.rank)
        compensated = self.memory.compensate(tensor, key)
        payload, ctx = self.compress(compensated, key)
        self.memory.update(compensated, key, lambda: self.decompress(payload, ctx))
        if self.summable:
            return _SummedPayload(self, tensor, payload, ctx, channel, group)
        return _GatheredPayload(self, tensor, payload, ctx, channel, group)

    def prepare(self, key: Hashable, step: int, rank: int) -> None:
        """Before compressing ``key`` at ``step`` on ``rank``: draw what the step's compression
        draws (shared indices, rounding noise). By default nothing."""

    def encode(self, tensor: "torch.Tensor", key: Hashable, step: int, rank: int) -> tuple[list["torch.Tensor"], Any]:
        """``compress`` for a point-to-point message (no memory: the caller's rule keeps the error)."""
        self.prepare(key, step, rank)
        return self.compress(tensor, key)

    # ---- kind "layers" (the parameter server's communicator) ------------------------------------
    def selector(self) -> LayerDrop:
        """Which layers a worker sends (a compressor of kind ``"layers"`` has it)."""
        raise NotImplementedError(f"compressor {self.name} is not of kind 'layers'")

    def memory_for(self, shapes: Sequence["torch.Size"], device: "torch.device") -> ResidualMemory:
        """What a worker keeps of the layers it did not send (a compressor of kind ``"layers"`` has it)."""
        raise NotImplementedError(f"compressor {self.name} is not of kind 'layers'")

    def state_dict(self) -> dict:
        return {"memory": self.memory.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.memory.load_state_dict(state.get("memory", {}))


class ErrorFeedback:
    """GRACE's ``ResidualMemory`` (beta = gamma = 1): ``compensate(x) = x + e`` (``x`` itself
    before the first update), ``update: e <- compensated - decompress(payload)`` with this rank's
    own payload, before any communication. Disabled: the identity."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.residuals: dict[Hashable, "torch.Tensor"] = {}

    def compensate(self, tensor: "torch.Tensor", key: Hashable) -> "torch.Tensor":
        if not self.enabled or key not in self.residuals:
            return tensor
        return self.residuals[key] + tensor

    def update(self, compensated: "torch.Tensor", key: Hashable, decompressed) -> None:
        if self.enabled:
            self.residuals[key] = compensated - decompressed()

    def state_dict(self) -> dict:
        return {"residuals": {key: value.clone() for key, value in self.residuals.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.residuals = {key: value.clone() for key, value in state.get("residuals", {}).items()}


def trainable_entries(model: "torch.nn.Module") -> int:
    """The entries of ``model``'s trainable parameters: the most any tensor a compressor is handed
    holds (a bucket, a fragment, the whole model flat)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def check_block(knob: str, value: int, model: "torch.nn.Module", default: int) -> None:
    """Refuse ``knob=value``, the entries that share one scale or norm, beyond ``model``'s trainable
    entries: a tensor is zero-padded to whole blocks, so a larger block allocates ``value`` entries
    for nothing (``compress.block_size=2**40``: 4 TiB on a rank)."""
    from dlcomm.errors import UserError

    total = trainable_entries(model)
    if value > total:
        example = f", e.g. {default}" if default <= total else ""
        raise UserError(
            f"{knob}={value} is invalid: the model has {total:,} trainable parameters, and a block of more entries "
            f"only pads its tensor with zeros (a rank would allocate {value:,} entries); pass {knob}={total} or "
            f"less{example}"
        )


def pack(payload: Sequence["torch.Tensor"]) -> "torch.Tensor":
    """Every payload tensor's bytes, one after the other, as one flat ``uint8`` tensor."""
    import torch

    return torch.cat([t.contiguous().reshape(-1).view(torch.uint8) for t in payload])


def unpack(message: "torch.Tensor", like: Sequence["torch.Tensor"]) -> list["torch.Tensor"]:
    """The tensors of a :func:`pack`-ed ``message`` shaped and typed as ``like`` (this rank's own)."""
    out, offset = [], 0
    for t in like:
        size = t.numel() * t.element_size()
        out.append(
            message[offset : offset + size].clone().view(t.dtype).reshape(t.shape)
        )  # clone: aligned for the view
        offset += size
    return out


def payload_bytes(payload: Sequence["torch.Tensor"]) -> int:
    return sum(t.numel() * t.element_size() for t in payload)


class _SummedPayload:
    """Each payload tensor summed by an allreduce, divided by the group's size, decompressed."""

    def __init__(self, compressor: Compressor, tensor, payload, ctx, channel: "Channel", group: str) -> None:
        self.compressor, self.tensor, self.payload, self.ctx = compressor, tensor, payload, ctx
        self.size = channel.group_size(group)
        self.handles = [channel.allreduce(t, group=group, average=False, async_op=True) for t in payload]

    def wait(self) -> "torch.Tensor":
        summed = [handle.wait().div_(self.size) for handle in self.handles]
        self.tensor.copy_(self.compressor.decompress(summed, self.ctx))
        return self.tensor


class _GatheredPayload:
    """Every member's packed payload all-gathered, each decompressed, then aggregated."""

    def __init__(self, compressor: Compressor, tensor, payload, ctx, channel: "Channel", group: str) -> None:
        self.compressor, self.tensor, self.payload, self.ctx = compressor, tensor, payload, ctx
        self.handle = channel.allgather(pack(payload), group=group, async_op=True)

    def wait(self) -> "torch.Tensor":
        messages = self.handle.wait()
        tensors = [self.compressor.decompress(unpack(message, self.payload), self.ctx) for message in messages]
        self.tensor.copy_(self.compressor.aggregate(tensors))
        return self.tensor
