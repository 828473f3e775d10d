"""``launcher.compute=batched``: the forward and backward passes of every rank thread as one call.

Under ``launcher=threads`` each rank thread runs its own training loop, algorithm and optimizer as
always; only the step's forward and backward are shared. A rank that reaches them hands its batch
in (:meth:`RankBatch.forward_backward`) and waits, as for a collective (:meth:`Fabric.meet
<dlcomm.comm.inprocess.Fabric.meet>`: the hang watch sees the wait, an abort releases it); when
the last rank arrives, one ``torch.func.vmap(grad(functional_call(...)))`` runs over the stacked
parameters, buffers and batches for all (:meth:`BatchedCompute.perform`; on the CPU on the job's
own compute thread, :class:`_ComputeThread`, on a GPU on the last rank's thread), then each rank takes its loss and gradients and goes on alone: the Channel, the algorithm's
``reduce_gradients`` and the optimizer see a rank's own module as under ``serial`` compute.

What is shared and what stays each rank's:

* **Gradients** are views into the stacked gradient tensors (rank ``r``'s ``p.grad`` is
  ``G[r]``), set after the call; the post-accumulate-grad hooks registered on a rank's parameters
  (an algorithm's overlapped buckets, the profiled clock's instants) are then fired in the order
  the rank's own backward fires them (learnt once, from one backward of a copy of the model), with
  ``algorithm.accumulating`` false, as after the last micro-batch of a serial step.
* **Parameters and buffers** live in stacked tensors (``[N, ...]``, one per tensor name, made at
  the first call): rank ``r``'s tensor becomes a view of its slice (``t.data = S[r]``), so the
  optimizer's and the algorithm's in-place updates write into the stack and the call reads it as
  it is, with no copy (:class:`_Stacked`). A tensor is adopted only where it alone holds its
  storage: a parameter an algorithm bound into a flat buffer of its own
  (:meth:`dlcomm.algorithms.buckets.Bucket.bind_params`: local_sgd, diloco, sesgd, node_based)
  stays there, and so does one whose ``.data`` is rebound later; each call compares every
  tensor's address with its slice's and copies in those that are not the slice (one multi-tensor
  copy), and copies back the buffers the forward changed (batch-norm running statistics) into
  those. Batch-norm statistics are each replica's own: batch statistics over the rank's batch,
  running statistics in its stacked buffer, as under serial compute. A saved model or checkpoint
  holds each tensor alone, not the stack it views (:func:`dlcomm.train.checkpoint.model_state`).
* **Randomness**: ``vmap(randomness="different")``: every replica draws its own dropout mask, all
  from one generator seeded per step from ``(seed, step)`` (the draws are reproducible and
  independent of thread timing, but not those of serial compute, where each rank draws from its
  own stream: a model with dropout gives other numbers than serial, with the same statistics).
* **AMP** (``train.amp``) is refused before launch (the loss scaler's per-rank step is not batched).

Timing (:mod:`dlcomm.train.loop`): a rank's wall-clock compute includes ``batched_share_s``, its
``1/N`` share of the batched call (the call's wall time divided by the ranks in it); the rest of
the time it spent in the meeting (waiting for the last rank, and the other ranks' shares) is
``peer_wait_s``. The simulated clock charges the profile as always (the profiled clock's hooks
fire at the same instants).
"""

from __future__ import annotations

import copy
import queue
import threading
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any, Callable, Sequence

import torch
from torch.func import functional_call, grad, vmap

from dlcomm.comm.clock import NO_METER, StepMeter

KIND = "batched compute"


class _Stepper(torch.nn.Module):
    """The loss of one replica as a module, so that ``functional_call`` swaps its parameters:
    ``loss_fn(model, inputs, labels)`` (the task's loss) over the wrapped model."""

    def __init__(self, model: torch.nn.Module, loss_fn: Callable[..., torch.Tensor]) -> None:
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn

    def forward(self, inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return self.loss_fn(self.model, inputs, labels)


@dataclass
class _Entry:
    """What one rank hands in, and what it takes back."""

    rank: int
    step: int
    seed: int
    inputs: torch.Tensor
    labels: torch.Tensor
    micro_batches: int
    batch: RankBatch
    ready: Any = None  # CUDA: an event on the rank's stream after its batch was on the device
    # results
    grads: dict[str, torch.Tensor] = field(default_factory=dict)
    losses: list[torch.Tensor] = field(default_factory=list)
    done: Any = None  # CUDA: an event after the call, for the rank's stream to wait on
    call_s: float = 0.0


class BatchedCompute:
    """The job's batched compute: ``size`` worker ranks, every one of which steps at every
    iteration (ranks in lockstep; what is not is refused before launch,
    :func:`dlcomm.launch.threads.check_batched`)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._template: _Stepper | None = None
        self._order: list[int] = []  # indices into a rank's trained parameters, in backward's order
        self._steppers: dict[int, Callable[..., Any]] = {}  # micro-batch count -> vmapped grad
        # the stacked parameters and the rest, with the ranks' bindings they were made for
        self._stacks: tuple[tuple[int, ...], _Stacked, _Stacked] | None = None
        self._thread: _ComputeThread | None = None

    def for_rank(self, fabric: Any, rank: int) -> RankBatch:
        """Rank ``rank``'s door to the batched compute, meeting the others on ``fabric``."""
        return RankBatch(self, fabric, rank)

    # ---- the last rank to arrive runs this for all -------------------------------------------
    def perform(self, entries: list[_Entry]) -> None:
        """One vmapped forward and backward over every rank's replica (see the module docstring),
        on the job's own compute thread on the CPU (:class:`_ComputeThread`), on the last rank's
        thread and stream on a GPU."""
        if entries[0].inputs.is_cuda:
            self._perform(entries)
            return
        if self._thread is None:
            self._thread = _ComputeThread()
        self._thread.run(self._perform, entries)

    def _perform(self, entries: list[_Entry]) -> None:
        started = perf_counter()
        first = entries[0]
        steps = {entry.step for entry in entries}
        if len(steps) > 1:
            raise RuntimeError(f"launcher.compute=batched: the ranks reached different steps {sorted(steps)} at once")
        shapes = {tuple(entry.inputs.shape) for entry in entries}
        if len(shapes) > 1:
            raise RuntimeError(
                f"launcher.compute=batched needs every rank's batch of one shape; the ranks gave {sorted(shapes)}"
            )
        cuda = first.inputs.is_cuda
        if cuda:
            stream = torch.cuda.current_stream(first.inputs.device)
            for entry in entries:
                stream.wait_event(entry.ready)
        if self._template is None:
            self._template = self._make_template(first)
        bound = tuple(entry.batch.bound for entry in entries)
        if self._stacks is None or self._stacks[0] != bound:  # first call, or a rank bound another model
            self._stacks = (
                bound,
                _Stacked(first.batch.trained_names, [e.batch.trained for e in entries]),
                _Stacked(first.batch.rest_names, [e.batch.rest for e in entries]),
            )
        _, trained, others = self._stacks
        trained.refresh([e.batch.trained for e in entries])
        outside = others.refresh([e.batch.rest for e in entries])
        params, rest = trained.tensors, others.tensors
        inputs = torch.stack([entry.inputs for entry in entries])
        labels = torch.stack([entry.labels for entry in entries])
        chunks = first.micro_batches
        step_grad = self._steppers.get(chunks)
        if step_grad is None:
            step_grad = self._steppers[chunks] = self._vmapped(chunks)
        devices = [first.inputs.device] if cuda else []
        grads: dict[str, torch.Tensor] = {}
        losses: list[torch.Tensor] = []
        with torch.random.fork_rng(devices=devices):
            _seed((first.seed * 1_000_003 + first.step * 7_919 + 17) % 2**63, devices)
            parts = zip(inputs.chunk(chunks, dim=1), labels.chunk(chunks, dim=1)) if chunks > 1 else [(inputs, labels)]
            for part, part_labels in parts:
                part_grads, loss = step_grad(params, rest, part, part_labels)
                losses.append(loss)
                if not grads:
                    grads = part_grads
                else:  # accumulated as backward accumulates into .grad
                    for name, value in part_grads.items():
                        grads[name].add_(value)
        # buffers the forward changed in place (batch-norm statistics) go back to the ranks whose
        # buffers are not views of the stack
        back = [(r, i) for r, i in outside if first.batch.rest_names[i] in first.batch.buffer_names]
        if back:
            torch._foreach_copy_([entries[r].batch.rest[i] for r, i in back], [others.slices[r][i] for r, i in back])
        done = None
        if cuda:
            done = torch.cuda.Event()
            done.record()
            done.synchronize()  # this one stream, so that the call's time is read on the host
        call_s = perf_counter() - started
        # each rank's slices (unbind: one call per tensor, not one per rank and tensor)
        per_rank = {name: value.unbind(0) for name, value in grads.items()}
        rank_losses = [loss.unbind(0) for loss in losses]
        for r, entry in enumerate(entries):
            entry.grads = {name: values[r] for name, values in per_rank.items()}
            entry.losses = [values[r] for values in rank_losses]
            entry.done, entry.call_s = done, call_s

    def _make_template(self, first: _Entry) -> _Stepper:
        """A copy of rank 0's model wrapped with the loss (its own tensors are never used: every
        call passes all of them), and the order in which backward makes the gradients."""
        model, loss_fn = first.batch.model, first.batch.loss_fn
        assert model is not None and loss_fn is not None  # bound before any step (_bind)
        template = _Stepper(copy.deepcopy(model), loss_fn)
        # fresh leaves of the template's values: its copied parameters may carry copies of hooks
        leaves = {
            name: t.detach().clone().requires_grad_(True)
            for name, t in zip(first.batch.trained_names, first.batch.trained)
        }
        rest = {name: t.detach().clone() for name, t in zip(first.batch.rest_names, first.batch.rest)}
        order: list[int] = []
        for index, leaf in enumerate(leaves.values()):
            leaf.register_post_accumulate_grad_hook(lambda _t, index=index: order.append(index))
        with torch.random.fork_rng(devices=[first.inputs.device] if first.inputs.is_cuda else []):
            chunk = first.inputs.chunk(first.micro_batches)[0], first.labels.chunk(first.micro_batches)[0]
            functional_call(template, (leaves, rest), chunk).backward()
        seen = set(order)
        self._order = order + [i for i in range(len(leaves)) if i not in seen]  # unused parameters last
        return template

    def _vmapped(self, chunks: int) -> Callable[..., Any]:
        template = self._template
        assert template is not None

        def loss(
            params: dict, rest: dict, inputs: torch.Tensor, labels: torch.Tensor
        ) -> tuple[torch.Tensor, torch.Tensor]:
            value = functional_call(template, (params, rest), (inputs, labels))
            return (value / chunks if chunks > 1 else value), value.detach()

        return vmap(grad(loss, has_aux=True), randomness="different")


class _ComputeThread:
    """One thread that runs every vmapped call of a job on the CPU, whichever rank arrives last.

    The call's results (every rank's gradients, ~N times a model) are allocated anew at each call,
    and glibc's malloc serves each thread from an arena of its own and gives freed pages back to
    the system: calls made by whichever rank thread came last page-faulted fresh memory step after
    step (16 ranks of a 784-200-200-10 MLP, one torch thread: 3,700-4,300 page faults a step over
    the first 20 steps, still 150-350 after 100; on one thread 1,000-1,200, then 0-1 after 80).
    One thread also pays torch.func's per-thread set-up (~20 ms) once, not once per rank. It stops
    when the job's :class:`BatchedCompute` is collected (it holds no reference to it between
    calls)."""

    def __init__(self) -> None:
        self._tasks: queue.SimpleQueue[tuple[Callable[..., None], Any, _Done] | None] = queue.SimpleQueue()
        threading.Thread(target=self._serve, args=(self._tasks,), name="dlcomm-batched", daemon=True).start()

    def __del__(self) -> None:
        self._tasks.put(None)

    @staticmethod
    def _serve(tasks: queue.SimpleQueue[tuple[Callable[..., None], Any, _Done] | None]) -> None:
        while True:
            task = tasks.get()
            if task is None:
                return
            call, argument, done = task
            try:
                call(argument)
            except BaseException as error:  # raised again on the rank thread that asked
                done.error = error
            del call, argument, task  # no reference kept while idle
            done.set()
            del done

    def run(self, call: Callable[..., None], argument: Any) -> None:
        """``call(argument)`` on the compute thread; its exception raised here."""
        done = _Done()
        self._tasks.put((call, argument, done))
        done.wait()
        if done.error is not None:
            raise done.error


class _Done(threading.Event):
    error: BaseException | None = None


class _Stacked:
    """The ranks' tensors of each name stacked (``tensors[name]`` is ``[N, ...]``), each rank's
    tensor a view of its slice where it can be (the module docstring).

    ``per_rank[r][i]`` is rank ``r``'s tensor named ``names[i]``; made from their values at the
    first call, then every tensor that owns its storage is moved into the stack (its ``.data``
    set to the slice, as :meth:`~dlcomm.algorithms.buckets.Bucket.bind_params` moves parameters
    into a flat buffer: the tensor objects stay the same)."""

    def __init__(self, names: list[str], per_rank: Sequence[Sequence[torch.Tensor]]) -> None:
        with torch.no_grad():
            self.tensors = {name: torch.stack([row[i].detach() for row in per_rank]) for i, name in enumerate(names)}
            self.slices = [[self.tensors[name][r] for name in names] for r in range(len(per_rank))]
            for row, slices in zip(per_rank, self.slices):
                for tensor, view in zip(row, slices):
                    if _owns_storage(tensor):
                        tensor.data = view
        self._addresses = [[view.data_ptr() for view in slices] for slices in self.slices]

    def refresh(self, per_rank: Sequence[Sequence[torch.Tensor]]) -> list[tuple[int, int]]:
        """Copy into the stack every tensor that is not its slice (never adopted, or its ``.data``
        rebound since); the ``(rank, index)`` of those."""
        outside: list[tuple[int, int]] = []
        for r, (row, addresses) in enumerate(zip(per_rank, self._addresses)):
            for i, tensor in enumerate(row):
                if tensor.data_ptr() != addresses[i]:
                    outside.append((r, i))
        if outside:
            with torch.no_grad():
                torch._foreach_copy_(
                    [self.slices[r][i] for r, i in outside], [per_rank[r][i].detach() for r, i in outside]
                )
        return outside


def _owns_storage(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is the whole of its storage and nothing else holds that storage: no view
    of a larger buffer, nor a bucket's buffer of its exact size (algo.bucket_mb=0: one parameter a
    bucket), which an algorithm updates in place. torch counts the storage's holders only in a
    private call; without it nothing is adopted (every call then copies)."""
    count = getattr(torch._C, "_storage_Use_Count", None)
    if count is None or not tensor.is_contiguous() or tensor.storage_offset() != 0:
        return False
    storage = tensor.untyped_storage()
    # holders: the tensor and ``storage`` (this probe's handle)
    return storage.nbytes() == tensor.numel() * tensor.element_size() and count(storage._cdata) <= 2


def _seed(seed: int, devices: list[torch.device]) -> None:
    """Seed the CPU generator and those of ``devices`` (not ``torch.manual_seed``: before CUDA is
    initialised it queues a seeding of every GPU, recording the caller's stack, at every step)."""
    torch.default_generator.manual_seed(seed)
    for device in devices:
        with torch.cuda.device(device):
            torch.cuda.manual_seed(seed)


class RankBatch:
    """One rank's part of the batched compute: its module's tensors by name, and the step."""

    def __init__(self, job: BatchedCompute, fabric: Any, rank: int) -> None:
        self.job = job
        self.fabric = fabric
        self.rank = rank
        self.model: torch.nn.Module | None = None
        self.loss_fn: Callable[..., torch.Tensor] | None = None
        self.trained_names: list[str] = []
        self.trained: list[torch.nn.Parameter] = []
        self.rest_names: list[str] = []  # frozen parameters and buffers
        self.rest: list[torch.Tensor] = []
        self.buffer_names: set[str] = set()
        self.bound = 0  # how many times a model was bound (a new one: the stacks are made anew)
        self._calls = 0
        self.share_s = 0.0  # this rank's share of the last call: its time / the ranks in it
        self.waited_s = 0.0  # the rest of the time the last call held this rank

    def _bind(self, model: torch.nn.Module, loss_fn: Callable[..., torch.Tensor]) -> None:
        self.model, self.loss_fn = model, loss_fn
        self.bound += 1
        named = list(model.named_parameters())
        self.trained_names = ["model." + name for name, p in named if p.requires_grad]
        self.trained = [p for _, p in named if p.requires_grad]
        buffers = list(model.named_buffers())
        self.rest_names = ["model." + name for name, p in named if not p.requires_grad]
        self.rest_names += ["model." + name for name, _ in buffers]
        self.rest = [p for _, p in named if not p.requires_grad] + [b for _, b in buffers]
        self.buffer_names = {"model." + name for name, _ in buffers}

    def forward_backward(
        self,
        model: torch.nn.Module,
        loss_fn: Callable[..., torch.Tensor],
        inputs: torch.Tensor,
        labels: torch.Tensor,
        step: int,
        seed: int,
        micro_batches: int = 1,
        meter: StepMeter = NO_METER,
    ) -> torch.Tensor:
        """This rank's forward and backward of ``step``, done with every other rank's in one
        call: the gradients are set on ``model``'s parameters (their hooks fired) and the loss
        returned, as :func:`dlcomm.train.loop.hooked_step`'s own passes would."""
        begun = perf_counter()
        if model is not self.model:
            self._bind(model, loss_fn)
        entry = _Entry(self.rank, step, seed, inputs, labels, micro_batches, self)
        if inputs.is_cuda:
            entry.ready = torch.cuda.Event()
            entry.ready.record()
        key = ("compute", self._calls)
        self._calls += 1
        self.fabric.meet(key, self.rank, self.job.size, KIND, entry, self.rank, self.job.perform).wait()
        if entry.done is not None:
            torch.cuda.current_stream(inputs.device).wait_event(entry.done)
        for _ in range(micro_batches - 1):  # the earlier micro-batches' passes (the profile charges the last)
            meter.backward_begins(False)
            meter.backward_ends(False)
        meter.backward_begins(True)
        trained, grads = self.trained, entry.grads
        for name, param in zip(self.trained_names, trained):
            if param.grad is None:
                param.grad = grads[name]
            else:
                param.grad.add_(grads[name])
        for index in self.job._order:
            param = trained[index]
            hooks = param._post_accumulate_grad_hooks  # torch keeps no public way to fire them
            if hooks:
                for hook in list(hooks.values()):
                    hook(param)
        meter.backward_ends(True)
        if micro_batches == 1:
            loss = entry.losses[0]
        else:  # as hooked_step sums the micro-batches' losses
            total = torch.zeros(())
            for part in entry.losses:
                total += part.float().cpu()
            loss = total / micro_batches
        held_s = perf_counter() - begun
        self.share_s = entry.call_s / self.job.size
        self.waited_s = max(0.0, held_s - self.share_s)
        return loss
