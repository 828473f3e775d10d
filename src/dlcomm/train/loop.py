"""The training loop of one rank. It knows the algorithm only through its hooks.

Per iteration it records a timing row (:class:`~dlcomm.metrics.rows.IterationRow`):
``time_s`` is the wall time from ``before_step`` to the end of ``after_step``,
``comm_exposed_s`` the part of it spent blocked on the Channel while data moved, ``peer_wait_s``
the part spent blocked before its peers reached the operation (threads only), ``compute_s`` the rest,
``comm_busy_s`` the time with communication in flight, and ``data_s`` the time spent producing
the batch (outside ``time_s``); the split is read where the work runs
(:mod:`dlcomm.comm.device_timing`: the host clock on CPU, events on the compute stream on CUDA).
Under a network model the ``sim_*`` columns are the same split on the modelled cluster's clock
and ``comm_modelled_s`` the cost model's total for the iteration's operations. It also takes the
algorithm's new statistics (:meth:`~dlcomm.algorithms.base.Algorithm.take_metrics`) into a
:class:`~dlcomm.metrics.stats.StatLog`. At every epoch end the rows, the task's losses and the
statistics are gathered to rank 0, aggregated by :mod:`dlcomm.metrics` and handed to the reporter.

With a :class:`~dlcomm.train.checkpoint.Checkpointing` the loop saves its whole state at epoch
ends and when the scheduler warns of preemption (then raises ``Preempted``), and a new start of
the same run resumes from the newest complete checkpoint, mid-epoch included: the epoch's
batches are replayed up to where it stopped (so augmentation draws the same numbers) and its
timing rows so far are restored, so the resumed run computes exactly what an uninterrupted one
does.
"""

from __future__ import annotations

import itertools
import math
import socket
from dataclasses import dataclass, field, fields
from time import perf_counter
from typing import Any, Callable, Protocol

import torch

from dlcomm.algorithms.base import Algorithm
from dlcomm.comm.channel import Channel
from dlcomm.comm.clock import NO_METER, StepMeter
from dlcomm.config.schema import RunConfig
from dlcomm.data.partition import epoch_partition
from dlcomm.errors import Diverged, UserError, first_line
from dlcomm.metrics import names, stats
from dlcomm.metrics.aggregate import epoch_metrics, iteration_series, readable, run_metrics, simulated_elapsed
from dlcomm.metrics.rows import IterationRow
from dlcomm.saved import StateMismatch
from dlcomm.tasks import Task
from dlcomm.train.batched import RankBatch
from dlcomm.train.checkpoint import AFRESH, Checkpointing, Preempted, model_state
from dlcomm.train.evaluate import EvalResult, evaluate, silent_progress
from dlcomm.train.memory import PssMonitor, peak_rss_mib
from dlcomm.train.optim import ConstantSchedule
from dlcomm.train.plan import check_plan, ended_by, step_batch
from dlcomm.train.precision import FULL, Precision


class Reporter(Protocol):
    """Where rank 0 sends what the loop measured (the MLflow tracker, or nothing)."""

    def start(self, total_steps: int, done_steps: int = 0, rows: list[IterationRow] | None = None) -> None: ...
    def iteration(self, step: int, loss: float, time_s: float) -> None: ...
    def epoch(
        self,
        epoch: int,
        metrics: dict[str, float],
        rows: list[IterationRow],
        series: dict[str, dict[int, float]] | None = None,
    ) -> None: ...
    def clock_point(self, step: int, metrics: dict[str, float]) -> None: ...
    def clock(self, seconds: float) -> None: ...
    def evaluation(self, batches: int, what: str) -> Any: ...
    def images(self, epoch: int, images: dict[str, torch.Tensor]) -> None: ...
    def finish(self, metrics: dict[str, float], ended_by: str = "") -> None: ...


@dataclass
class TrainState:
    step: int = 0
    epoch: int = 0
    rows: list[IterationRow] = field(default_factory=list)  # rank 0: every rank's rows of the finished epochs
    run_stats: stats.StatLog = field(default_factory=stats.StatLog)  # rank 0: every rank's statistics, finished epochs
    started: float = field(default_factory=perf_counter)
    train_wall_s: float = 0.0  # wall time of the epochs' iterations (evaluation excluded)
    reached: dict[str, float] = field(default_factory=dict)  # time to train.target_acc
    best_acc: float = math.nan  # best mean test accuracy so far
    next_eval_s: float = 0.0  # the training clock of the next train.eval_every_s evaluation
    clock_s: float = 0.0  # the training clock agreed at the last check (max over workers)
    out_of_time: bool = False  # train.time_budget_s reached
    # where the current epoch stands (for a mid-epoch checkpoint)
    epoch_batches: int = 0
    epoch_rows: list[IterationRow] = field(default_factory=list)
    epoch_stats: stats.StatLog = field(default_factory=stats.StatLog)
    epoch_wall_s: float = 0.0
    epoch_warmup_s: float = 0.0  # the part of epoch_wall_s spent on train.timing_warmup iterations (this rank's clock)

    def saved(self) -> dict[str, Any]:
        """The state as a checkpoint holds it: its fields as they are (rows and statistics stay
        typed), ``started`` replaced by the seconds elapsed since."""
        saved = {f.name: getattr(self, f.name) for f in fields(self)}
        saved["elapsed_s"] = perf_counter() - saved.pop("started")
        return saved

    @classmethod
    def restored(cls, saved: dict[str, Any]) -> TrainState:
        """The state of :meth:`saved` (rows saved as tuples by earlier versions become rows)."""
        saved = dict(saved)
        elapsed = saved.pop("elapsed_s")
        for key in ("rows", "epoch_rows"):
            saved[key] = [IterationRow.restore(row) for row in saved[key]]
        return cls(**saved, started=perf_counter() - elapsed)


LossFn = Callable[[torch.nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]


def hooked_step(
    algorithm: Algorithm,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    loss_fn: LossFn,
    inputs: torch.Tensor,
    labels: torch.Tensor,
    step: int,
    micro_batches: int = 1,
    precision: Precision = FULL,
    meter: StepMeter = NO_METER,
    batched: RankBatch | None = None,
    seed: int = 0,
) -> torch.Tensor:
    """One optimizer step with the algorithm's hooks in their documented order; the loss.

    ``loss_fn(model, inputs, labels)`` is the task's loss (:mod:`dlcomm.tasks`); it runs under
    ``precision``'s autocast, whose backward and step replace the plain ones (loss scaling).

    ``micro_batches = c > 1`` (``train.comm_interval``): the batch is cut into ``c`` equal
    micro-batches whose gradients accumulate, each loss scaled by ``1/c`` so the gradient is the
    batch mean, before ONE communication round and ONE optimizer step (the Crossover paper's
    communication interval). ``algorithm.accumulating`` is true during all but the last
    backward, so an algorithm that communicates from gradient hooks waits for the last.

    ``meter`` is told where the step is (:class:`dlcomm.train.profile.StepMeter`): the simulated
    clock's profiled compute moves at those instants.

    ``batched`` (``launcher.compute=batched``): the forward and backward passes are this rank's
    part of one call for every rank (:mod:`dlcomm.train.batched`; ``seed`` seeds its random draws)."""
    # the common case (one micro-batch, full precision, no profiled clock) calls nothing it does not need
    metered = meter is not NO_METER
    algorithm.before_step(step)
    if metered:
        meter.step_begins(step)
    optimizer.zero_grad(set_to_none=True)
    if batched is not None:  # precision is full: AMP with batched compute is refused before launch
        algorithm.accumulating = False  # the hooks fire once, after every micro-batch's pass
        loss = batched.forward_backward(model, loss_fn, inputs, labels, step, seed, micro_batches, meter)
    elif micro_batches == 1:
        algorithm.accumulating = False
        if precision.enabled:
            with precision.autocast():
                loss = loss_fn(model, inputs, labels)
        else:
            loss = loss_fn(model, inputs, labels)
        if metered:
            meter.backward_begins(last=True)
        if precision.scaler is None:
            loss.backward()  # (precision.backward's full-precision case, one frame less per step)
        else:
            precision.backward(loss)
        if metered:
            meter.backward_ends(last=True)
    else:
        total = torch.zeros(())
        for index, (part, part_labels) in enumerate(zip(inputs.chunk(micro_batches), labels.chunk(micro_batches))):
            last = index == micro_batches - 1
            algorithm.accumulating = not last
            with precision.autocast():
                part_loss = loss_fn(model, part, part_labels)
            meter.backward_begins(last)
            precision.backward(part_loss / micro_batches)
            meter.backward_ends(last)
            total += part_loss.detach().float().cpu()
        loss = total / micro_batches
    algorithm.reduce_gradients(step)
    if precision.scaler is None:
        optimizer.step()  # (precision.step's case without loss scaling)
    else:
        precision.step(optimizer, _found_inf_sharing(algorithm))
    if metered:
        meter.step_ends()
    algorithm.after_step(step)
    return loss


def _found_inf_sharing(algorithm: Algorithm) -> Callable[[torch.Tensor], Any] | None:
    """The sum of the fp16 found-inf flag over the algorithm's ``found_inf_group`` (None: the
    flags agree without it), so that ranks that add scaled gradients keep one loss scale."""
    group = algorithm.found_inf_group()
    if group is None or algorithm.channel.group_size(group) == 1:
        return None
    return lambda flag: algorithm.channel.allreduce(flag, group=group, average=False)


def cross_entropy_loss(model: torch.nn.Module, inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The classification loss as a ``loss_fn`` (for benchmarks that train without a task)."""
    return torch.nn.functional.cross_entropy(model(inputs), labels)


class TrainLoop:
    def __init__(
        self,
        cfg: RunConfig,
        channel: Channel,
        algorithm: Algorithm,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LRScheduler | ConstantSchedule,
        data: Any,
        reporter: Reporter | None,
        checkpointing: Checkpointing | None,
        task: Task,
        precision: Precision = FULL,
        plan: tuple[int, int] | None = None,
    ) -> None:
        """``plan``: ``(iterations per epoch, iterations of the run)`` as the rank computed it
        once (:func:`dlcomm.train.plan.check_plan`, also given to the algorithm and the
        schedule); None: computed here from the data set's size."""
        self.cfg = cfg
        self.plan = plan
        self.channel = channel
        self.timer = channel.timer  # the Channel's (it times the waits in Handle.wait)
        self.cluster = channel.cluster
        self.algorithm = algorithm
        self.model = model
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.data = data
        self.reporter = reporter
        self.device = self.cluster.device
        self.task = task  # dlcomm.tasks: the loss, its parts per epoch, images to log
        self.precision = precision
        self.state = TrainState()
        self.checkpointing = checkpointing
        self._algorithm_finished = False
        # launcher.compute=batched: this rank's part of the job's one call (dlcomm.train.batched)
        self.batched: RankBatch | None = channel.cluster.transport.batched_compute()

    # ---- checkpoints -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything the rest of the run depends on: model, optimizer, schedule, algorithm,
        the loop's own state (timing rows included) and this rank's random generators."""
        state = {
            "model": model_state(self.model),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "algorithm": self.algorithm.state_dict(),
            "loop": self.state.saved(),
            "torch_rng": torch.get_rng_state(),
            "precision": self.precision.state_dict(),
        }
        if self.device.type == "cuda":
            state["cuda_rng"] = torch.cuda.get_rng_state(self.device)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.algorithm.load_state_dict(state["algorithm"])
        self.precision.load_state_dict(state.get("precision", {}))
        self.state = TrainState.restored(state["loop"])
        torch.set_rng_state(state["torch_rng"].cpu())
        if "cuda_rng" in state:
            torch.cuda.set_rng_state(state["cuda_rng"].cpu(), self.device)

    def _restore(self, saved: dict[str, Any]) -> None:
        """:meth:`load_state_dict` of a checkpoint; one line naming its file when what it holds does
        not fit this run: the algorithm's and compressor's parts are checked as they are read
        (:class:`~dlcomm.saved.StateMismatch`), torch's own loaders raise on other sizes or keys."""
        assert self.checkpointing is not None
        folder = self.checkpointing.folder
        file = self.checkpointing.loaded_from or folder
        try:
            self.load_state_dict(saved)
        except StateMismatch as mismatch:
            raise UserError(
                f"checkpoint {file} is of another model or configuration than this run's ({first_line(mismatch)}); "
                f"{AFRESH.format(folder=folder)}"
            ) from None
        except (RuntimeError, KeyError, ValueError, TypeError, IndexError) as error:  # size mismatch, missing keys
            raise UserError(
                f"checkpoint {file} is of another model or configuration than this run's "
                f"({type(error).__name__}: {first_line(error)[:200]}); {AFRESH.format(folder=folder)}"
            ) from None

    def _checkpoint(self) -> None:
        if self.checkpointing is not None:
            self.checkpointing.save(self.state.step, self.state_dict(), self.channel.barrier)

    # ---- the loop --------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        """Train to the end of the plan (or the budget); the summary on rank 0. The PSS sampler runs
        only while this does, also when it raises (a preemption, a failed peer, a diverged loss)."""
        memory = PssMonitor()
        try:
            return self._run(memory)
        finally:
            memory.stop()  # idempotent: the finished run stopped it already

    def _run(self, memory: PssMonitor) -> dict[str, Any]:
        train = self.cfg.train
        world, rank = self.cluster.world_size, self.cluster.rank
        per_epoch, total = self.plan if self.plan is not None else check_plan(train, self.data.train_size, world)
        saved = self.checkpointing.load() if self.checkpointing is not None else None
        if saved is not None:
            self._restore(saved)
        if self.reporter:
            self.reporter.start(total, self.state.step, self.state.rows)
        self.model.train()
        last: dict[str, float] = {}
        budgeted = train.time_budget_s > 0  # the budget ends the run, not the epochs (dlcomm.train.plan)
        epochs = itertools.count(self.state.epoch) if budgeted else range(self.state.epoch, train.epochs)
        for epoch in epochs:
            self.state.epoch = epoch
            indices = epoch_partition(self.data.train_size, world, rank, self.cfg.seed, epoch)
            augment_seed = (self.cfg.seed * 1_000_003 + epoch * 10_007 + rank) % 2**31
            batches = self.data.train_batches(indices, step_batch(train), augment_seed)
            if self.state.epoch_batches:  # resumed mid-epoch: replay the batches already trained on
                batches = itertools.islice(batches, self.state.epoch_batches, None)
            self._train_epoch(batches, total)
            train_wall_s, warmup_wall_s = self.state.epoch_wall_s, self.state.epoch_warmup_s
            epoch_rows, epoch_stats = self.state.epoch_rows, self.state.epoch_stats
            self.state.epoch_rows, self.state.epoch_batches, self.state.epoch_wall_s = [], 0, 0.0
            self.state.epoch_warmup_s = 0.0
            self.state.epoch_stats = stats.StatLog()
            self.algorithm.end_epoch(epoch)
            finished = self.state.step >= total or self.state.out_of_time
            last_epoch = not budgeted and epoch == train.epochs - 1
            evaluate_now = finished or last_epoch or (train.eval_every > 0 and (epoch + 1) % train.eval_every == 0)
            if finished or last_epoch:  # the final figures are of the finished algorithm (nothing left in flight)
                self._finish_algorithm()
            last = self._end_epoch(epoch, epoch_rows, epoch_stats, train_wall_s, evaluate_now, warmup_wall_s)
            if finished:
                break
            self.state.epoch = epoch + 1
            self._checkpoint()
        self._finish_algorithm()  # a run resumed after its last epoch trained none
        summary: dict[str, Any] = self._summary(last)  # and, on rank 0, lists per rank
        peaks = self.channel.gather_objects((peak_rss_mib(), memory.stop(), socket.gethostname()), dst=0)
        if peaks is not None:
            summary[names.PEAK_RSS_MIB] = [rss for rss, _, _ in peaks]
            summary[names.PEAK_PSS_MIB] = [pss for _, pss, _ in peaks]
            summary[names.RANK_HOSTS] = [host for _, _, host in peaks]
        if self.reporter:
            self.reporter.finish(summary, self.ended_by())
        return summary

    def _finish_algorithm(self) -> None:
        """:meth:`Algorithm.finish`, once: after the last iteration, before the final evaluation."""
        if not self._algorithm_finished:
            self._algorithm_finished = True
            self.algorithm.finish()

    def _train_epoch(self, batches: Any, total: int) -> None:
        """Train on ``batches`` until they or the run's steps run out; the epoch's rows, batch
        count and wall time accumulate in ``self.state``."""
        # Per iteration this adds host work beside the step itself (on a GPU a small model's step is
        # launch-bound: every microsecond here is charged as compute), so what the loop reads on
        # every iteration is looked up once (scripts/bench_step_overhead.py: dlcomm's step against plain torch).
        state, channel, timer, reporter = self.state, self.channel, self.timer, self.reporter
        rows = state.epoch_rows
        node, rank, epoch = self.cluster.node, self.cluster.rank, state.epoch
        device, interval, meter = self.device, self.cfg.train.comm_interval, channel.compute_meter
        moves = device.type != "cpu"  # the data sets hand CPU tensors: on the CPU .to() is a call for nothing
        fault_here = self.cfg.debug.fail_rank == rank  # debug.fail_*: the injected fault's rank
        checkpointing = self.checkpointing
        step_args = (self.algorithm, self.model, self.optimizer, self.task.loss)
        warmup, clock_rules = self.cfg.train.timing_warmup, self._clock_rules()
        batched, seed = self.batched, self.cfg.seed
        # a constant schedule's step does nothing: not called per step
        schedule = None if isinstance(self.scheduler, ConstantSchedule) else self.scheduler.step
        takes_metrics = type(self.algorithm).take_metrics is not Algorithm.take_metrics  # (the base's: none)
        epoch_start = perf_counter() - state.epoch_wall_s
        fetch_start = perf_counter()
        for inputs, labels in batches:
            if state.step >= total:
                break
            if moves:
                inputs, labels = inputs.to(device, non_blocking=True), labels.to(device, non_blocking=True)
            data_s = perf_counter() - fetch_start
            if fault_here:
                self._maybe_fail()
            step = state.step
            channel.begin_iteration()  # first: under serial threads it may wait for this rank's turn
            timer.begin_iteration()
            loss = hooked_step(*step_args, inputs, labels, step, interval, self.precision, meter, batched, seed)
            if schedule is not None:
                schedule()
            comm = channel.end_iteration()
            split = timer.end_iteration(comm)  # CUDA: the iteration's one host sync, on its stream
            share_s = math.nan
            if batched is not None:  # the batched call: 1/N of it is this rank's compute, the rest waiting
                share_s = batched.share_s
                split.peer_wait_s = min(
                    split.time_s - split.exposed_s,
                    (0.0 if math.isnan(split.peer_wait_s) else split.peer_wait_s) + batched.waited_s,
                )
            time_s = split.time_s
            loss_value = loss.item()
            if not math.isfinite(loss_value):  # the one guard: the loss is read for the timing row anyway
                raise Diverged(loss_value, step, rank)
            rows.append(
                IterationRow(  # positional, in TIMING_COLUMNS order (half the cost of keywords per step)
                    rank,  # rank
                    node,  # node
                    epoch,  # epoch
                    step,  # step
                    time_s,  # time_s
                    split.compute_s,  # compute_s
                    split.exposed_s,  # comm_exposed_s
                    split.busy_s,  # comm_busy_s
                    data_s,  # data_s
                    comm.bytes_sent,  # bytes_sent
                    comm.messages,  # messages
                    loss_value,  # loss
                    comm.clock_time_s,  # sim_time_s
                    comm.clock_time_s - comm.clock_exposed_s,  # sim_compute_s
                    comm.clock_exposed_s,  # sim_comm_exposed_s
                    comm.clock_busy_s,  # sim_comm_busy_s
                    comm.modelled_s,  # comm_modelled_s
                    comm.overruns,  # overruns
                    split.peer_wait_s,  # peer_wait_s
                    share_s,  # batched_share_s
                )
            )
            if takes_metrics:
                taken = self.algorithm.take_metrics()
                if taken:
                    state.epoch_stats.add(step, taken)
            state.step += 1
            state.epoch_batches += 1
            if step < warmup:  # measured here: other ranks' rows hold their waits for late peers
                state.epoch_warmup_s = perf_counter() - epoch_start
            if reporter:
                reporter.iteration(step, loss_value, time_s)
            if clock_rules and self._check_clock(perf_counter() - epoch_start):
                break
            if (
                checkpointing is not None
                and state.step < total
                and checkpointing.stop_now(state.step, channel.any_rank)
            ):
                state.epoch_wall_s = perf_counter() - epoch_start
                self._checkpoint()
                raise Preempted(state.step)
            fetch_start = perf_counter()
        state.epoch_wall_s = perf_counter() - epoch_start

    # ---- the training clock: time budget and evaluations against time -------------------
    def _clock_rules(self) -> bool:
        return self.cfg.train.time_budget_s > 0 or self.cfg.train.eval_every_s > 0

    def _check_clock(self, epoch_wall_s: float) -> bool:
        """Agree on the training clock (the maximum over workers, so that all stop or evaluate
        after the same iteration); evaluate when it passed the next ``eval_every_s`` mark;
        true when it reached ``time_budget_s``."""
        train = self.cfg.train
        own = self.channel.clock.now() if self.channel.mode == "simulate" else self.state.train_wall_s + epoch_wall_s
        self.state.clock_s = self.channel.max_over_workers(own)
        if train.eval_every_s > 0 and self.state.clock_s >= self.state.next_eval_s:
            while self.state.next_eval_s <= self.state.clock_s:
                self.state.next_eval_s += train.eval_every_s
            self._clock_evaluation()
        if train.time_budget_s > 0 and self.state.clock_s >= train.time_budget_s:
            self.state.out_of_time = True
        if self.reporter:
            self.reporter.clock(self.state.clock_s)
        return self.state.out_of_time

    def _clock_evaluation(self) -> None:
        with self.algorithm.eval_params():
            result = self._evaluate()
        self._remember_best(result.test_acc_mean)
        if self.reporter:
            self.reporter.clock_point(
                self.state.step,
                {
                    names.CLOCK_TIME: self.state.clock_s,
                    names.CLOCK_TEST_ACC_MEAN: result.test_acc_mean,
                    names.CLOCK_TEST_ACC_AVG_MODEL: result.test_acc_avg_model,
                },
            )

    def _evaluate(self) -> EvalResult:
        """:func:`evaluate` with rank 0's bar (the training bar's clock paused meanwhile)."""
        train = self.cfg.train
        return evaluate(
            self.model,
            self.data,
            self.channel,
            train.eval_batch_size,
            self.device,
            train.eval_size,
            eval_replicas=train.eval_replicas,
            progress=self.reporter.evaluation if self.reporter else silent_progress,
        )

    def _remember_best(self, accuracy: float) -> None:
        if math.isnan(self.state.best_acc) or accuracy > self.state.best_acc:
            self.state.best_acc = accuracy

    def _maybe_fail(self) -> None:
        debug = self.cfg.debug
        if debug.fail_rank == self.cluster.rank and debug.fail_step == self.state.step:
            if debug.fail_mode == "kill":
                self.channel.transport.kill_self()
            raise RuntimeError(f"fault injected by debug.fail_rank={debug.fail_rank} at step {self.state.step}")

    def _end_epoch(
        self,
        epoch: int,
        rows: list[IterationRow],
        epoch_stats: stats.StatLog,
        train_wall_s: float,
        evaluate_now: bool,
        warmup_wall_s: float = 0.0,
    ) -> dict[str, float]:
        result: EvalResult | None = None
        images: dict[str, torch.Tensor] = {}
        if evaluate_now:
            with self.algorithm.eval_params():
                result = self._evaluate()
                if self.reporter:
                    images = self.task.samples(self.model)
        gathered = self.channel.gather_objects(
            {"rows": rows, "losses": self.task.take_epoch_losses(), "stats": epoch_stats}, dst=0
        )
        if gathered is None:
            return {}
        all_rows = [row for rank in gathered for row in rank["rows"]]
        logs = [rank["stats"] for rank in gathered]
        metrics = epoch_metrics(
            all_rows, step_batch(self.cfg.train), train_wall_s, self.cfg.train.timing_warmup, warmup_wall_s
        )
        for name in gathered[0]["losses"]:  # the task's loss parts: mean over workers
            metrics[names.epoch_part(name)] = sum(rank["losses"][name] for rank in gathered) / len(gathered)
        metrics.update(stats.epoch_values(logs))  # the algorithm's statistics
        for log in logs:
            self.state.run_stats.merge(log)
        metrics[names.EPOCH_WALL] = perf_counter() - self.state.started
        self.state.rows.extend(all_rows)
        self.state.train_wall_s += train_wall_s
        metrics[names.EPOCH_TRAIN_TIME] = self.state.train_wall_s
        metrics[names.EPOCH_LR] = float(self.optimizer.param_groups[0]["lr"])
        if self.channel.mode != "off":
            metrics[names.EPOCH_SIM_TIME] = simulated_elapsed(self.state.rows)
        if result is not None:
            metrics[names.EPOCH_TEST_ACC_MEAN] = result.test_acc_mean
            metrics[names.EPOCH_TEST_ACC_AVG_MODEL] = result.test_acc_avg_model
            metrics[names.EPOCH_CONSENSUS] = result.consensus_distance
            self._remember_best(result.test_acc_mean)
            self._check_target(metrics)
        if self.reporter:
            series = {
                **iteration_series(all_rows, self.channel.mode != "off", self.cfg.train.timing_warmup),
                **stats.step_series(logs),
            }
            self.reporter.epoch(epoch + 1, metrics, all_rows, series)
            if images:
                self.reporter.images(epoch + 1, images)
        return metrics

    def _check_target(self, metrics: dict[str, float]) -> None:
        """Remember the training time (wall, and simulated) at which ``train.target_acc`` was first reached."""
        target = self.cfg.train.target_acc
        if (
            target <= 0
            or names.FINAL_TIME_TO_TARGET in self.state.reached
            or metrics[names.EPOCH_TEST_ACC_MEAN] < target
        ):
            return
        self.state.reached[names.FINAL_TIME_TO_TARGET] = metrics[names.EPOCH_TRAIN_TIME]
        if names.EPOCH_SIM_TIME in metrics:
            self.state.reached[names.FINAL_SIM_TIME_TO_TARGET] = metrics[names.EPOCH_SIM_TIME]

    def _summary(self, last: dict[str, float]) -> dict[str, float]:
        if self.cluster.rank != 0:
            return {}
        summary = {
            names.FINAL_TEST_ACC: last.get(names.EPOCH_TEST_ACC_MEAN, math.nan),
            names.FINAL_TEST_ACC_AVG_MODEL: last.get(names.EPOCH_TEST_ACC_AVG_MODEL, math.nan),
            names.FINAL_BEST_TEST_ACC: self.state.best_acc,
            names.FINAL_TRAIN_LOSS: last.get(names.EPOCH_TRAIN_LOSS, math.nan),
            names.FINAL_STEPS: float(self.state.step),
            names.FINAL_TRAIN_TIME: self.state.train_wall_s,
            **run_metrics(
                self.state.rows,
                step_batch(self.cfg.train),
                perf_counter() - self.state.started,
                self.channel.mode != "off",
                self.cfg.train.timing_warmup,
            ),
            **stats.final_values(self.state.run_stats, self.cluster.world_size),
            **self.state.reached,
        }
        if self._clock_rules():
            summary[names.FINAL_CLOCK_TIME] = self.state.clock_s
        summary.update(readable(summary, step_batch(self.cfg.train) * self.cluster.world_size))
        return summary

    def ended_by(self) -> str:
        """Which limit ended the run (:func:`dlcomm.train.plan.ended_by`)."""
        return ended_by(self.cfg.train, self.state.step, self.state.clock_s if self.state.out_of_time else 0.0)
