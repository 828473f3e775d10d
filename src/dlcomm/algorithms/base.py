"""The algorithm interface: hooks the train loop calls around every optimizer step.

The loop runs, for every iteration ``t`` (counted from 0 over the whole run)::

    before_step(t)
    forward, loss.backward()        # per-parameter hooks registered in setup() may fire here
    reduce_gradients(t)             # e.g. allreduce of gradients
    optimizer.step()
    after_step(t)                   # e.g. parameter averaging, gossip

and ``end_epoch(e)`` after the last iteration of every epoch; evaluation runs inside
``with eval_params():``. An algorithm touches the network only through ``self.channel``.
After every iteration the loop takes the algorithm's own statistics with :meth:`take_metrics`
(e.g. the fraction of layers dropped, a pull's staleness); :mod:`dlcomm.metrics.stats`
aggregates them over ranks into ``epoch/<name>``, ``iter/<name>`` and ``final/<name>``.

Algorithms that need a process that does not train (a parameter server, a gossip manager)
name it in :meth:`roles` and implement :meth:`serve`; the launcher starts one extra process per
role (rank ``world_size + k``, see :class:`~dlcomm.comm.layout.ClusterLayout`) without knowing
the algorithm. A service process builds the same model and optimizer as the workers (same
seed, so the same initial parameters) and runs ``serve(role)`` until the workers are done.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, ClassVar, Generic, Iterator, TypeVar

from dlcomm.config.schema import AlgoConfig, CompressConfig, OptimConfig
from dlcomm.metrics.stats import Stat

if TYPE_CHECKING:  # an algorithm's module loads without torch: composing a config (dlcomm config) imports them all
    import torch

    from dlcomm.comm.channel import Channel
    from dlcomm.comm.cluster import Cluster
    from dlcomm.compress.base import Compressor

C = TypeVar("C", bound=AlgoConfig)  # the algorithm's own ``Config``: ``class DPSGD(Algorithm[DPSGDConfig])``


class Algorithm(Generic[C]):
    name: ClassVar[str]
    display_name: ClassVar[str] = ""  # how reports and figures name it ("Crossover-SGD"); empty: ``name``
    Config: ClassVar[type[AlgoConfig]] = AlgoConfig
    point_to_point: ClassVar[bool] = True
    """Whether it sends device tensors point to point (``Channel.exchange``);
    False for collective-only algorithms. torch's gloo cannot send CUDA tensors point to point,
    so ``launcher.backend=gloo`` with ``train.device=cuda`` is refused for those that do
    (:mod:`dlcomm.launch.gpus`)."""
    takes_own_step: ClassVar[bool] = False
    """Whether it applies the gradients itself in :meth:`reduce_gradients` (DeMo), before fp16 loss
    scaling could unscale them or skip the step: such a run with fp16 loss scaling is refused
    before launch (:mod:`dlcomm.stages`), as one whose service roles apply the gradients."""
    lockstep: ClassVar[bool] = True
    """Whether every worker takes its steps together with the others (each rank's step ``t``
    needs nothing a peer does after its own step ``t``): ``launcher.compute=batched`` runs the
    workers' forward and backward passes as one call and refuses an algorithm whose workers step
    apart (:func:`dlcomm.launch.threads.check_batched`, naming :attr:`lockstep_note`)."""
    lockstep_note: ClassVar[str] = ""
    """Why the workers step apart, where :attr:`lockstep` is false (one clause)."""
    compression: ClassVar[tuple[str, ...]] = ()
    """The kinds of compressor (``Compressor.kinds``, :mod:`dlcomm.compress`) it uses through
    ``self.compressor`` (``compress=<name>``): ``"tensor"`` (a flat tensor averaged over a group),
    ``"payload"`` (a message a peer decompresses alone), ``"layers"`` (which layers a worker
    sends). A run with a compressor of none of them (``none`` aside) is refused before launch."""

    def __init__(
        self, cfg: C, cluster: Cluster, channel: Channel, seed: int = 0, compress: CompressConfig | None = None
    ) -> None:
        from dlcomm.compress.registry import COMPRESSORS

        self.cfg = cfg
        self.cluster = cluster
        self.channel = channel
        self.seed = seed  # the run's seed: random topologies draw from it, the same on every rank
        self.accumulating = False  # true during the backward passes of all but the last micro-batch
        self.model: torch.nn.Module | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        compress = compress or CompressConfig()
        self.compressor: Compressor = COMPRESSORS.get(compress.name)(compress, seed)

    # check_config, check_compressor and check_world run while composing (dlcomm.compose.check_algorithm)
    @classmethod
    def check_config(cls, cfg: C) -> None:
        """Raise ``UserError`` (via ``dlcomm.config.validate.require``) for invalid knobs."""

    @classmethod
    def check_compressor(cls, cfg: C, compressor: type[Compressor]) -> None:
        """Raise ``UserError`` for a compressor (``compress=<name>``, of a kind in
        :attr:`compression`) that these knobs cannot carry. None refused by default."""

    @classmethod
    def check_optimizer(cls, cfg: C, optim: OptimConfig) -> None:
        """Raise ``UserError`` for an optimizer (``optim=<name>``, its knobs) these knobs cannot
        train with (DeMo steps itself at the optimizer's learning rate). None refused by default."""

    @classmethod
    def roles(cls, cfg: C) -> tuple[str, ...]:
        """The service processes this configuration needs beside the workers (none by default)."""
        return ()

    @classmethod
    def check_world(cls, cfg: C, nodes: int, workers_per_node: int) -> None:
        """Raise ``UserError`` for knobs that do not fit the cluster's shape (e.g. groups that do
        not divide the world size)."""

    @classmethod
    def check_plan(cls, cfg: C, steps_per_epoch: int, total_steps: int) -> None:
        """Raise ``UserError`` for knobs that do not fit an epoch's or the run's length (checked
        before launch where the data set's size is known without loading it, and by :meth:`plan`)."""

    @classmethod
    def check_model(cls, cfg: C, model: torch.nn.Module) -> None:
        """Raise ``UserError`` for knobs whose limit depends on the model (its layers, its tensors),
        before launch on the model the pre-launch check builds
        (:func:`dlcomm.train.prelaunch.check_model_knobs`), with the words :meth:`setup` would use.
        None refused by default."""

    @classmethod
    def plan_notes(cls, cfg: C, steps_per_epoch: int, total_steps: int) -> list[str]:
        """What a reader of the run's figures should know about how its length meets the
        algorithm's schedule (e.g. communication the run's end skips); printed before launch,
        for runs whose length is known (not those a time budget ends)."""
        return []

    def plan(self, steps_per_epoch: int, total_steps: int) -> None:
        """Told before training how long an epoch and the run are."""
        self.check_plan(self.cfg, steps_per_epoch, total_steps)

    def setup(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """Start every replica from rank 0's parameters and buffers."""
        self.model, self.optimizer = model, optimizer
        for tensor in [*model.parameters(), *model.buffers()]:
            self.channel.broadcast(tensor.data, src=0)

    def found_inf_group(self) -> str | None:
        """Under fp16 loss scaling (:mod:`dlcomm.train.precision`): the Channel group over which
        this rank must agree with the others whether the step's gradients overflowed, or None.

        The rule: ranks that add their *scaled* gradients together must use the same loss scale
        ``S``, or the sum ``S_a g_a + S_b g_b`` unscaled by one of them is wrong. Every rank's
        scale starts equal and then changes only with its own found-inf flag, so the scales stay
        equal exactly when the flag does. Where every rank of the reduction steps with the same
        reduced gradient (``allreduce``, ``allreduce_hier``, ``node_based``'s node allreduce), the
        flags agree by themselves (an inf in any summand is an inf in the sum): None. Where the
        reduced gradient reaches some ranks only (``crossover_hier``'s reduce to the node leader),
        the group of that reduction must share the flag: the train loop then sums it over this
        group through the Channel before the scaler steps (as torch's ``ShardedGradScaler`` does
        over its process group). Algorithms whose gradients stay local (gossip of parameters,
        Local-SGD) need no agreement: their ranks' scales may differ. Default None."""
        return None

    def before_step(self, step: int) -> None:
        pass

    def reduce_gradients(self, step: int) -> None:
        pass

    def after_step(self, step: int) -> None:
        pass

    def end_epoch(self, epoch: int) -> None:
        pass

    def take_metrics(self) -> dict[str, Stat]:
        """This worker's statistics observed since the last call (called after every iteration):
        ``{name: Mean([...])}`` for observations averaged over ranks and iterations,
        ``{name: Count(k)}`` for events counted per worker; names from ``dlcomm.metrics.names``,
        documented in docs/metrics.md. None by default."""
        return {}

    @contextmanager
    def eval_params(self) -> Iterator[None]:
        """Parameters to evaluate are in the model while inside (by default: as they are)."""
        yield

    def state_dict(self) -> dict:
        """State beyond the model and optimizer that the next steps depend on (push-sum weights,
        error-feedback memories, ...), for checkpoints; stateless algorithms keep none."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Continue from ``state`` (a checkpoint's, of :meth:`state_dict`), reading it through
        :mod:`dlcomm.saved`: every entry is checked against this run (its keys, its tensors' count
        and shapes, its indices' ranges) before any is used, and what does not fit raises
        :class:`~dlcomm.saved.StateMismatch`, which the train loop words in one line naming the file."""

    def serve(self, role: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """Run service ``role`` (one of :meth:`roles`) until the workers are done."""
        raise NotImplementedError(f"{self.name} declares no service role {role!r}")

    def finish(self) -> None:
        """After the last iteration, before the final evaluation: complete what is in flight
        and tell the service roles and peers that this worker is done."""
