"""Pull-gossip SGD with overlapped, scheduled pulls (the wide-area paper; docs/algorithms.md,
"Asynchronous pull-gossip").

Every worker trains alone; every ``T = period`` local steps (a *window*) worker ``i`` pulls the
model of a peer ``j`` and averages, ``x_i <- (x_i + x_j) / 2``. When the pull happens:

* ``overlap=none``: at the window's end, ``j`` uniformly at random, a blocking pull.
* ``overlap=naive``: the pull starts at the window's start (as soon as a peer is assigned) and
  runs beside the ``T`` steps; the averaging at the end uses that older model.
* ``overlap=scheduled``: the pull starts at ``max(now, end - c_ij)``, the latest start that
  still ends by the window's end (``end`` predicted from the measured step time, ``c_ij`` the
  pair's transfer time learnt with UPDATE_TIME), so the model averaged in is as fresh as
  possible.

Who may be pulled (both overlapped schedules): a peer is held by one puller at a time.

* ``scheduler=managed``: a ``manager`` service process (never carries models) keeps the queue of
  free workers and the ``c_ij`` (:class:`~dlcomm.algorithms.pull_schedule.PullManager`); a worker
  sends ``(end, now)``, gets ``(j, start)``, pulls, reports the measured time.
* ``scheduler=autonomous``: no manager. A worker picks a peer it believes free and asks it for a
  reservation; the peer grants the first asker and refuses the others while held (its
  responder answers one message at a time), and a refused worker picks again. Pullers tell the
  others when a peer becomes busy or free (small messages), and learn their own ``c_ij``.

A pulled worker answers from a responder thread (:mod:`dlcomm.comm.control`) while it keeps
training: it sends its parameters as of its last completed step (the optimizer step and the
averaging hold a lock that the snapshot waits for). A request outstanding at a window's end
carries over to the next window; a window without a peer is not averaged.

Statistics (:meth:`GossipPull.take_metrics`, docs/metrics.md): the staleness of every pull (steps
between its issue and its averaging, a mean), and per worker the pulls made, the pulls served,
the refused reservations (conflicts) and the windows without a peer (counts).

Under ``network.mode=simulate`` the requester issues the pull at the step boundary at which
its own clock reaches the start time (within one step); the peer serves the snapshot it has
when the request arrives, so the served model's age follows the ranks' real progress, which
tracks their clocks while they run at similar speeds. Results therefore depend on measured
times and are not bit-reproducible, as with any asynchronous method.
"""

from __future__ import annotations

import math
import random
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dlcomm.algorithms.base import Algorithm
from dlcomm.algorithms.pull_schedule import PullManager, scheduled_start, update_time
from dlcomm.algorithms.registry import register
from dlcomm.algorithms.segments import bind_segments, split_segments
from dlcomm.config.schema import AlgoConfig, domain
from dlcomm.config.validate import require
from dlcomm.metrics import names
from dlcomm.metrics.stats import Count, Mean, Stat

if TYPE_CHECKING:
    import torch

    from dlcomm.comm.channel import Handle

# control message kinds
REQUEST, ASSIGN, RELEASE, CANCEL, CANCELLED, PULL, RESERVE, GRANT, DENY, UNRESERVE, BUSY, FREE = range(12)


@dataclass
class GossipPullConfig(AlgoConfig):
    """``algo=gossip_pull``, pull-gossip SGD with overlapped, scheduled pulls (the wide-area paper;
    docs/algorithms.md, "Asynchronous pull-gossip"): every ``period`` local steps a worker pulls one
    peer's model and averages, x_i <- (x_i + x_j) / 2."""

    name: str = "gossip_pull"
    period: int = field(
        default=16,
        metadata=domain(
            low=1,
            means="T, the number of local steps per window,",
            doc="one pull and one averaging each window (the paper: 16)",
        ),
    )
    overlap: str = field(
        default="scheduled",
        metadata=domain(
            one_of=("none", "naive", "scheduled"),
            means="the overlap of a pull with the window",
            doc="none: blocking pull at the window's end | naive: pull from the window's start | scheduled: start at end - c_ij",
        ),
    )
    scheduler: str = field(
        default="managed",
        metadata=domain(
            one_of=("managed", "autonomous"),
            means="the pull scheduler",
            doc="managed: a manager process hands out free peers and learns c_ij | autonomous: peers reserve themselves, no manager (no single point of failure)",
        ),
    )
    theta: float = field(
        default=0.1,
        metadata=domain(
            low=0,
            below=1,
            means="the UPDATE_TIME threshold",
            doc="a measurement within +-theta of the estimate is averaged in (the paper gives no value)",
        ),
    )


@dataclass
class Hold:
    """Worker ``peer`` held by this puller from ``granted`` to ``released`` (wall clock)."""

    peer: int
    granted: float
    released: float = math.nan


@dataclass
class PullStats:
    pulls: int = 0
    served: int = 0  # pulls this worker answered (its responder sent its model), as its iterations counted them
    skipped_windows: int = 0  # windows ended without a peer
    conflicts: int = 0  # reservations refused (autonomous)
    resolved: int = 0  # refusals after which this worker went on to a grant or gave the round up
    holds: list[Hold] = field(default_factory=list)
    staleness_steps: list[int] = field(default_factory=list)  # steps between a pull's issue and its averaging


# The counted statistics: metric name -> PullStats counter.
_COUNTS = {
    names.PULLS: "pulls",
    names.PULLS_SERVED: "served",
    names.PULL_CONFLICTS: "conflicts",
    names.PULL_SKIPPED_WINDOWS: "skipped_windows",
}


@register
class GossipPull(Algorithm[GossipPullConfig]):
    display_name = "pull-gossip"
    Config = GossipPullConfig
    point_to_point = False  # pulls travel over the CPU control group (gloo); no device tensor point to point
    lockstep = False
    lockstep_note = "a worker's pulls are answered while its peers train on, asynchronously"

    @classmethod
    def roles(cls, cfg: GossipPullConfig) -> tuple[str, ...]:
        return ("manager",) if cfg.scheduler == "managed" and cfg.overlap != "none" else ()

    @classmethod
    def check_world(cls, cfg: GossipPullConfig, nodes: int, workers_per_node: int) -> None:
        require(
            nodes * workers_per_node >= 2, "nodes", nodes, "pull-gossip needs at least 2 workers; pass nodes=2 or more"
        )

    # ---- worker ----------------------------------------------------------------------
    def setup(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        import torch

        super().setup(model, optimizer)
        self.flat = bind_segments(split_segments(model, 1))[0]
        self.received = torch.empty(
            self.flat.shape, dtype=self.flat.dtype, device="cpu"
        )  # pulls: the gloo control plane
        self.lock = threading.Lock()  # held while the parameters change
        self.rng = random.Random(self.seed * 1_000_003 + self.cluster.rank)
        self.others = [r for r in range(self.cluster.world_size) if r != self.cluster.rank]
        self.manager = self.cluster.layout.service_rank("manager") if self.roles(self.cfg) else None
        from dlcomm.comm.control import ControlPlane  # needs torch: imported where a rank runs

        self.control = ControlPlane(self.channel)
        self.stats = PullStats()
        self.taken = PullStats()  # the counts already handed to take_metrics (its staleness_steps unused)
        self.taken_pulls = 0  # staleness entries already handed to take_metrics
        self.step_times: list[float] = []
        self.estimates: dict[int, float] = {}  # autonomous: this worker's own c_ij
        self.busy: set[int] = set()  # autonomous: peers believed held
        self.tried: set[int] = set()  # autonomous: peers that refused in this round
        self.reserved_by: int | None = None  # autonomous: who holds this worker
        self.reservation_lock = threading.Lock()
        self.pending: int | None = None  # the peer asked (autonomous) or -1 (managed), until answered
        self.assigned: tuple[int, float] | None = None  # (peer, start)
        self.handle: Handle | None = None  # the pull in flight
        self.issued_at = 0
        self.window_end = math.nan
        self.finishing = False
        self.control.start(
            self.others + ([self.manager] if self.manager is not None else []), self._on_message
        )  # last: it uses all the above

    def _now(self) -> float:
        return self.channel.clock.now()

    def _step_estimate(self) -> float:
        recent = self.step_times[-2 * self.cfg.period :]
        return sum(recent) / len(recent) if recent else 0.0

    def before_step(self, step: int) -> None:
        self.control.check()
        self.iteration_start = self._now()
        if step % self.cfg.period == 0:
            self.window_end = self.iteration_start + self.cfg.period * self._step_estimate()
            if self.cfg.overlap != "none" and self.pending is None and self.assigned is None:
                self._ask()
        self._progress(step)

    def reduce_gradients(self, step: int) -> None:
        self.lock.acquire()  # the optimizer step follows: no snapshot until it is done

    def after_step(self, step: int) -> None:
        import torch

        self.lock.release()
        self.step_times.append(self._now() - self.iteration_start)
        if (step + 1) % self.cfg.period:
            self._progress(step + 1)
            return
        if self.cfg.overlap == "none":
            self.assigned = (self.rng.choice(self.others), self._now())
            self._issue(step + 1)
        else:
            self._progress(step + 1)
            if self.assigned is None:
                self.stats.skipped_windows += 1
                return
            if self.handle is None:
                self._issue(step + 1)
        peer, _ = self.assigned
        assert self.handle is not None  # issued above
        self.handle.wait()
        measured = self._measured(self.handle.record)
        with self.lock, torch.no_grad():
            self.flat.add_(self.received.to(self.flat.device)).mul_(0.5)
        self.stats.pulls += 1
        self.stats.staleness_steps.append(step + 1 - self.issued_at)
        self._release(peer, measured)

    def take_metrics(self) -> dict[str, Stat]:
        """The staleness of the pulls averaged since the last call, and the counts since then. The
        pulls served are the answers the Channel counted in this rank's iterations (their bytes are
        in the same iterations' ``bytes_sent``), not those its responder sent since: a count taken
        from the responder could include an answer whose bytes the next iteration holds, and after
        the run's last iteration, none."""
        self.stats.served = self.channel.answers_counted
        fresh = self.stats.staleness_steps[self.taken_pulls :]
        self.taken_pulls += len(fresh)
        out: dict[str, Stat] = {names.PULL_STALENESS: Mean([float(steps) for steps in fresh])}
        for name, attribute in _COUNTS.items():
            now = getattr(self.stats, attribute)
            out[name] = Count(now - getattr(self.taken, attribute))
            setattr(self.taken, attribute, now)
        return out

    def _measured(self, record) -> float:
        if self.channel.mode != "off":
            return record.end - record.ready
        return record.wall_end - record.wall_start

    def _ask(self) -> None:
        """Ask for a peer for the current window (managed: the manager; autonomous: a peer)."""
        if self.manager is not None:
            self.pending = -1
            self.control.send(self.manager, REQUEST, self.window_end, self._now())
            return
        if self.finishing:
            self._end_round()
            return
        with self.reservation_lock:
            busy = set(self.busy)
        candidates = [r for r in self.others if r not in busy and r not in self.tried]
        if not candidates:  # everybody is held: this round is given up, the next step tries again
            self._end_round()
            return
        self.pending = self.rng.choice(candidates)
        self.control.send(self.pending, RESERVE)

    def _progress(self, step: int) -> None:
        """Take the answers that arrived; start an assigned pull once it is time."""
        while (message := self.control.poll()) is not None:
            self._answer(*message)
        if self.cfg.overlap != "none" and self.pending is None and self.assigned is None and step % self.cfg.period:
            self._ask()  # an autonomous round that found no free peer tries again
        if self.assigned is not None and self.handle is None:
            _, start = self.assigned
            due = self.cfg.overlap == "naive" or self._now() + self._step_estimate() >= start
            if due:
                self._issue(step)

    def _answer(self, src: int, message: list[float]) -> None:
        if src < 0:  # the responder ended with an error
            self.control.check()
        kind = int(message[0])
        if kind == ASSIGN:
            self.pending, self.assigned = None, (int(message[1]), message[2])
            self.stats.holds.append(Hold(int(message[1]), time.perf_counter()))
        elif kind == CANCELLED:
            self.pending = None
        elif kind == GRANT:
            self.pending = None
            self._end_round()
            self.assigned = (src, scheduled_start(self.window_end, self.estimates.get(src, math.inf), self._now()))
            self.stats.holds.append(Hold(src, time.perf_counter()))
            for peer in self.others:
                if peer != src:
                    self.control.send(peer, BUSY, src)
        elif kind == DENY:
            self.stats.conflicts += 1
            with self.reservation_lock:
                self.busy.add(src)
            self.tried.add(src)
            self.pending = None
            self._ask()  # choose again

    def _end_round(self) -> None:
        """An autonomous round ended (granted, or given up): its refusals are resolved."""
        self.stats.resolved += len(self.tried)
        self.tried = set()

    def _issue(self, step: int) -> None:
        assert self.assigned is not None  # a peer is assigned before a pull is issued
        peer, _ = self.assigned
        self.handle = self.control.pull(peer, self.received, self._now(), PULL)
        self.issued_at = step

    def _release(self, peer: int, measured: float) -> None:
        if self.stats.holds and self.stats.holds[-1].peer == peer:
            self.stats.holds[-1].released = time.perf_counter()
        if self.manager is not None:
            self.control.send(self.manager, RELEASE, peer, measured)
        elif self.cfg.overlap != "none":
            if not math.isnan(measured):
                self.estimates[peer] = update_time(self.estimates.get(peer, math.inf), measured, self.cfg.theta)
            self.control.send(peer, UNRESERVE)
            for other in self.others:
                if other != peer:
                    self.control.send(other, FREE, peer)
        self.assigned, self.handle = None, None

    def _on_message(self, src: int, message: list[float]) -> None:
        """The responder thread: serve pulls and reservations; pass answers to the loop."""
        kind = int(message[0])
        if kind == PULL:
            with self.lock:
                snapshot = self.flat.detach().to("cpu", copy=True)
            self.control.send_tensor(src, snapshot)
        elif kind == RESERVE:
            with self.reservation_lock:
                granted = self.reserved_by is None
                if granted:
                    self.reserved_by = src
            self.control.send(src, GRANT if granted else DENY)
        elif kind == UNRESERVE:
            with self.reservation_lock:
                self.reserved_by = None
        elif kind in (BUSY, FREE):
            with self.reservation_lock:
                (self.busy.add if kind == BUSY else self.busy.discard)(int(message[1]))
        else:
            self.control.inbox.put((src, message))

    def finish(self) -> None:
        """Settle what is outstanding (a pull in flight, a request unanswered), then stop."""
        self.finishing = True
        if self.manager is not None and self.pending is not None:
            self.control.send(self.manager, CANCEL)
        while self.pending is not None:  # answered for sure: by the peer asked, or the manager
            self._answer(*self.control.next_message(timeout=300))
        if self.assigned is not None:
            peer, _ = self.assigned
            if self.handle is not None:
                self.handle.wait()
            self._release(peer, math.nan)
        # A peer's responder answers requests after its own worker said STOP; once every worker
        # has settled its requests (this barrier), nothing but STOP is sent between workers.
        self.channel.barrier()
        self.control.close(self.others + ([self.manager] if self.manager is not None else []))

    # ---- manager ---------------------------------------------------------------------
    def serve(self, role: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """The communication manager: answer requests from the queue of free workers."""
        from dlcomm.comm.control import ControlPlane

        control = ControlPlane(self.channel)
        state = PullManager(self.cluster.world_size, self.cfg.theta)
        workers = list(range(self.cluster.world_size))

        def handle(src: int, message: list[float]) -> None:
            kind = int(message[0])
            if kind == REQUEST:
                answers = state.request(src, message[1], message[2])
            elif kind == RELEASE:
                answers = state.release(src, int(message[1]), message[2])
            elif kind == CANCEL:
                answers = []
                if state.cancel(src):
                    control.send(src, CANCELLED)
            else:
                raise RuntimeError(f"the gossip manager got message kind {kind} from rank {src}")
            for answer in answers:
                control.send(answer.puller, ASSIGN, answer.peer, answer.start)

        control.serve_forever(workers, handle)
        control.finish_serving(workers)
