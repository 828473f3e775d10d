"""The compute profile of a run, and the simulated clock's compute charged from it
(``network.mode=simulate network.compute=profile``; docs/network.md, "Compute on the simulated clock").

**Measuring.** One replica of the run's model, optimizer, per-worker batch, micro-batches
(``train.comm_interval``) and precision is stepped alone on one device with all this process's
threads: :data:`WARMUP_STEPS` untimed steps, then timed steps until at least :data:`MIN_STEPS` and
:data:`MIN_TIMED_S` seconds (at most :data:`MAX_STEPS`). Each step is cut at three instants: the
start of the last backward pass (``lead_s`` from the step's start: every forward, the earlier
micro-batches' backward passes), the end of that backward (``backward_s`` later), and the end of
the step (``optimizer_s`` later: the optimizer and loss scaling). During the last backward each
parameter's gradient-ready instant is recorded (``ready_s[i]``, seconds into that backward, in
``model.parameters()`` order): what an algorithm that communicates from gradient hooks overlaps
with. Each figure is the median over the timed steps.

**Charging.** :class:`ProfiledCompute` is the compute reading of a rank's virtual clock. Inside a
step its position moves only at those instants, to the profile's times multiplied by the step's
factor ``f`` (:func:`step_factor`: the rank's ``network.rank_compute_scale``, a lognormal jitter of
mean 1 and coefficient of variation ``network.compute_jitter``, and a straggler slowdown drawn
with ``network.straggler_prob``), so a rank's simulated compute is a function of (config, seed,
rank, step, profile) alone: the same under every launcher, machine load and rank count.
Arithmetic an algorithm does outside the step (averaging, mixing) is not charged. A service rank
(the parameter server, the gossip manager) is charged only what it marks as a step: the parameter
server's update costs the profile's optimizer step (:meth:`ComputeProfile.of_service`), the gossip
manager's bookkeeping nothing, so its figures too are free of the machine's load.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch

from dlcomm.comm.clock import StepMeter
from dlcomm.config.schema import NetworkConfig, RunConfig
from dlcomm.config.typed import plain

WARMUP_STEPS = 3
MIN_STEPS = 10
MAX_STEPS = 200
MIN_TIMED_S = 2.0


@dataclass(frozen=True)
class ComputeProfile:
    """One optimizer step of one replica, alone (see the module docstring); seconds."""

    lead_s: float
    backward_s: float
    optimizer_s: float
    ready_s: tuple[float, ...]
    steps: int = 0  # timed steps behind the medians
    device: str = ""
    torch_version: str = ""
    threads: int = 0
    key: str = ""

    @property
    def step_s(self) -> float:
        return self.lead_s + self.backward_s + self.optimizer_s

    def with_step_s(self, step_s: float) -> "ComputeProfile":
        """The same shape scaled to a step of ``step_s`` (``network.compute_ms``)."""
        k = step_s / self.step_s if self.step_s > 0 else 0.0
        return replace(
            self,
            lead_s=self.lead_s * k,
            backward_s=self.backward_s * k,
            optimizer_s=self.optimizer_s * k,
            ready_s=tuple(r * k for r in self.ready_s),
        )

    def of_service(self) -> "ComputeProfile":
        """A service's step (the parameter server's update): the optimizer step alone, no forward or
        backward pass, no gradient hooks."""
        return replace(self, lead_s=0.0, backward_s=0.0, ready_s=())

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "ready_s": list(self.ready_s), "step_s": self.step_s}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> "ComputeProfile":
        raw = json.loads(text)
        raw.pop("step_s", None)
        raw["ready_s"] = tuple(float(r) for r in raw["ready_s"])
        return cls(**raw)

    def describe(self) -> str:
        return (
            f"{self.step_s * 1e3:.2f} ms per step (forward and earlier passes {self.lead_s * 1e3:.2f}, last backward "
            f"{self.backward_s * 1e3:.2f}, optimizer {self.optimizer_s * 1e3:.2f}) over {self.steps} timed steps on "
            f"{self.device}, {self.threads} thread(s), torch {self.torch_version}"
        )


def step_factor(network: NetworkConfig, seed: int, rank: int) -> Callable[[int], float]:
    """``step -> f``: the rank's compute factor at that step. ``f = s_rank * J * D`` with ``s_rank``
    from ``rank_compute_scale`` (1 when empty), ``J`` lognormal with ``E[J] = 1`` and coefficient of
    variation ``c = compute_jitter`` (``sigma^2 = ln(1 + c^2)``, ``mu = -sigma^2 / 2``; 1 when ``c = 0``)
    and ``D = straggler_slowdown`` with probability ``straggler_prob`` (else 1). The draws come from a
    generator seeded by ``(seed, rank, step)``: the same whatever runs the rank."""
    scales = list(network.rank_compute_scale)
    own = float(scales[rank]) if scales else 1.0
    c = float(network.compute_jitter)
    probability = float(network.straggler_prob)
    slowdown = float(network.straggler_slowdown)
    sigma = math.sqrt(math.log1p(c * c))
    if c == 0 and probability == 0:
        return lambda step: own

    def factor(step: int) -> float:
        rng = np.random.default_rng([seed, rank, step])
        jitter = float(rng.lognormal(-sigma * sigma / 2, sigma)) if c > 0 else 1.0
        straggles = rng.random() < probability
        return own * jitter * (slowdown if straggles else 1.0)

    return factor


class ProfiledCompute(StepMeter):
    """A rank's compute reading under ``network.compute=profile`` (see the module docstring):
    call it for the seconds of compute done so far. It registers a gradient hook on every
    parameter of ``model``, which must come before the algorithm's own (so a bucket that becomes
    ready is launched at its profiled instant)."""

    def __init__(
        self, profile: ComputeProfile, factor: Callable[[int], float], model: torch.nn.Module | None = None
    ) -> None:
        self.profile = profile
        self._factor_of = factor
        self._done = 0.0  # compute of the steps before this one
        self._factor = 1.0
        self._position = 0.0  # profile seconds into this step
        self._in_last_backward = False
        if model is not None:
            params = [p for p in model.parameters() if p.requires_grad]
            if len(params) != len(profile.ready_s):
                raise ValueError(
                    f"the compute profile has {len(profile.ready_s)} parameters, the model {len(params)}: "
                    "it was measured for another model; drop network.compute_profile"
                )
            for index, param in enumerate(params):
                param.register_post_accumulate_grad_hook(self._hook(index))

    def __call__(self) -> float:
        return self._done + self._factor * self._position

    def add(self, seconds: float) -> None:
        """Compute measured beside the profile (a compressor's: ``Compressor.charge_compute``),
        on the clock from now on."""
        self._done += seconds

    def _advance(self, position: float) -> None:
        self._position = max(self._position, position)

    def _hook(self, index: int) -> Callable[[torch.Tensor], None]:
        def ready(param: torch.Tensor) -> None:
            if self._in_last_backward:
                self._advance(self.profile.lead_s + self.profile.ready_s[index])

        return ready

    def step_begins(self, step: int) -> None:
        self._done += self._factor * self._position
        self._position = 0.0
        self._factor = self._factor_of(step)

    def backward_begins(self, last: bool) -> None:
        if last:
            self._in_last_backward = True
            self._advance(self.profile.lead_s)

    def backward_ends(self, last: bool) -> None:
        if last:
            self._in_last_backward = False
            self._advance(self.profile.lead_s + self.profile.backward_s)

    def step_ends(self) -> None:
        self._advance(self.profile.step_s)


# -- measuring ------------------------------------------------------------------------------------------------------
class _Stopwatch(StepMeter):
    """Records a step's instants (perf_counter; on CUDA after a device sync: profiling runs alone,
    outside any timed region of a run)."""

    def __init__(self, model: torch.nn.Module, device: torch.device) -> None:
        self._device = device
        self._params = [p for p in model.parameters() if p.requires_grad]
        self.ready: list[float] = [math.nan] * len(self._params)
        self._last = False
        for index, param in enumerate(self._params):
            param.register_post_accumulate_grad_hook(self._hook(index))

    def _now(self) -> float:
        if self._device.type == "cuda":
            torch.cuda.synchronize(self._device)
        return time.perf_counter()

    def _hook(self, index: int) -> Callable[[torch.Tensor], None]:
        def ready(param: torch.Tensor) -> None:
            if self._last:
                self.ready[index] = self._now()

        return ready

    def step_begins(self, step: int) -> None:
        self.ready = [math.nan] * len(self._params)
        self.start = self._now()

    def backward_begins(self, last: bool) -> None:
        if last:
            self._last = True
            self.backward_start = self._now()

    def backward_ends(self, last: bool) -> None:
        if last:
            self._last = False
            self.backward_end = self._now()

    def step_ends(self) -> None:
        self.end = self._now()


def _alone() -> Any:
    """An algorithm whose hooks all do nothing (the base class's): a replica that communicates with no one."""
    from dlcomm.algorithms.base import Algorithm

    alone = Algorithm.__new__(Algorithm)  # no cluster or channel: none of its hooks uses them
    alone.accumulating = False
    return alone


def _batches(data: Any, batch: int, seed: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    count = max(batch, min(data.train_size, batch * 8) // batch * batch)
    while True:
        yield from data.train_batches(torch.arange(count), batch, seed)


def measure(
    cfg: RunConfig, data: Any, device: torch.device, progress: Callable[[str], None] | None = None
) -> ComputeProfile:
    """Step one replica of ``cfg``'s run alone (see the module docstring); its profile."""
    from dlcomm.tasks import build_task
    from dlcomm.train.optim import build_optimizer
    from dlcomm.train.precision import Precision

    task = build_task(cfg)
    torch.manual_seed(cfg.seed)
    model = task.build_model(cfg.model, data).to(device)
    optimizer = build_optimizer(cfg.optim, task.param_groups(model, cfg.optim))
    precision = Precision(cfg.train.amp, device, cfg.train.amp_dtype)
    micro = cfg.train.comm_interval
    batches = _batches(data, cfg.train.batch_size * micro, cfg.seed)
    profile = measure_step(model, optimizer, task.loss, batches, device, micro, precision, progress)
    return replace(profile, key=profile_key(cfg, device))


def measure_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    loss_fn: Callable[..., torch.Tensor],
    batches: Iterator[tuple[torch.Tensor, torch.Tensor]],
    device: torch.device,
    micro_batches: int = 1,
    precision: Any = None,
    progress: Callable[[str], None] | None = None,
) -> ComputeProfile:
    """The profile of stepping ``model`` alone on ``batches`` (see the module docstring)."""
    from dlcomm.train.loop import hooked_step
    from dlcomm.train.precision import FULL

    watch = _Stopwatch(model, device)
    samples: list[tuple[float, float, float, list[float]]] = []
    started = time.perf_counter()
    step = 0
    while True:
        inputs, labels = next(batches)
        inputs, labels = inputs.to(device), labels.to(device)
        hooked_step(
            _alone(), model, optimizer, loss_fn, inputs, labels, step, micro_batches, precision or FULL, meter=watch
        )
        if step >= WARMUP_STEPS:
            ready = [r - watch.backward_start if math.isfinite(r) else 0.0 for r in watch.ready]
            samples.append(
                (
                    watch.backward_start - watch.start,
                    watch.backward_end - watch.backward_start,
                    watch.end - watch.backward_end,
                    ready,
                )
            )
        elif step == 0:
            started = time.perf_counter()
        step += 1
        timed_s = time.perf_counter() - started
        if len(samples) >= MAX_STEPS or (len(samples) >= MIN_STEPS and timed_s >= MIN_TIMED_S):
            break
        if progress is not None and step % 10 == 0:
            # a count so far, said as one (the profile's own line gives the total it ends with)
            progress(f"{len(samples)} timed steps so far (at least {MIN_STEPS} and {MIN_TIMED_S:g} s)")
    ready_s = tuple(statistics.median(sample[3][i] for sample in samples) for i in range(len(watch.ready)))
    return ComputeProfile(
        lead_s=statistics.median(s[0] for s in samples),
        backward_s=statistics.median(s[1] for s in samples),
        optimizer_s=statistics.median(s[2] for s in samples),
        ready_s=ready_s,
        steps=len(samples),
        device=device_name(device),
        torch_version=torch.__version__,
        threads=torch.get_num_threads(),
    )


def device_name(device: torch.device) -> str:
    """The GPU's name, or the CPU's model (``platform.processor()`` is empty on most Linux
    systems, where ``/proc/cpuinfo`` names it), with the architecture."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    model = platform.processor()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return " ".join(part for part in (model, platform.machine()) if part) or "cpu"


def profile_key(cfg: RunConfig, device: torch.device) -> str:
    """What a profile depends on: model, data shape, batch, micro-batches, optimizer, precision,
    task, device, torch version and threads (a hash of them)."""
    parts = {
        "model": plain(cfg.model),
        "dataset": [cfg.dataset.name, getattr(cfg.dataset, "image_size", None)],  # only image folders resize
        "batch": cfg.train.batch_size,
        "micro": cfg.train.comm_interval,
        "optim": plain(cfg.optim),
        "precision": [cfg.train.amp, str(cfg.train.amp_dtype)],
        "task": plain(cfg.task),
        "device": device_name(device),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def cached_profile(
    cfg: RunConfig, data: Any, device: torch.device, folder: Path, progress: Callable[[str], None] | None = None
) -> tuple[ComputeProfile, Path, bool]:
    """The profile of ``cfg`` from ``folder`` (keyed by :func:`profile_key`), measured and written
    there when absent; with its path and whether it was measured now."""
    path = folder / f"{profile_key(cfg, device)}.json"
    if path.exists():
        return ComputeProfile.from_json(path.read_text()), path, False
    profile = measure(cfg, data, device, progress)
    write_atomically(path, profile.to_json())
    return profile, path, True


def write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(text)
    os.replace(partial, path)


# -- a run's profile -------------------------------------------------------------------------------------------------
RUN_PROFILE = "compute_profile.json"  # in the run's folder: what its ranks charge (an MLflow artifact too)
_WAIT_S = 1800.0  # how long a rank waits for rank 0 to profile (under SLURM; a large model on a CPU takes minutes)


def uses_profile(cfg: RunConfig) -> bool:
    return cfg.network.mode == "simulate" and cfg.network.compute == "profile"


@contextlib.contextmanager
def all_threads() -> Iterator[int]:
    """torch's thread count set to every core this process may run on (a replica alone has the
    machine), given back after; the count."""
    previous = torch.get_num_threads()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    torch.set_num_threads(cores)
    try:
        yield cores
    finally:
        torch.set_num_threads(previous)


def prepare_run_profile(
    cfg: RunConfig, run_dir: Path, folder: Path, device: torch.device, progress: Callable[[str], None] | None = None
) -> ComputeProfile:
    """Write ``run_dir/compute_profile.json`` before the ranks start: ``network.compute_profile``'s
    file, else the cached profile (measured now, with every core, when the cache lacks it)."""
    given = cfg.network.compute_profile
    if given:
        profile = read_profile(Path(given))
    else:
        from dlcomm.data import build_dataset

        with all_threads():  # the same key and figures whichever process profiles (driver or rank 0)
            path = folder / f"{profile_key(cfg, device)}.json"
            if path.exists():
                profile = read_profile(path)
            else:
                profile, _, _ = cached_profile(cfg, build_dataset(cfg.dataset), device, folder, progress)
    write_atomically(run_dir / RUN_PROFILE, profile.to_json())
    return profile


def read_profile(path: Path) -> ComputeProfile:
    from dlcomm.errors import UserError

    try:
        return ComputeProfile.from_json(path.read_text())
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise UserError(
            f"network.compute_profile={path} is not a compute profile ({type(error).__name__}: "
            f"{str(error)[:120]}); write one with `dlcomm profile ... --out {path}`"
        ) from None


def profiled_compute(
    cfg: RunConfig,
    run_dir: Path,
    rank: int,
    model: torch.nn.Module,
    data: Any,
    device: torch.device,
    folder: Path,
    service: bool = False,
) -> ProfiledCompute | None:
    """The rank's compute reading under ``network.compute=profile`` (None otherwise), from the
    run's profile file; where no launcher wrote it (SLURM, srun), rank 0 writes it and the
    others wait for it. ``service``: a service rank's reading (:meth:`ComputeProfile.of_service`,
    no jitter: a service is no straggling worker)."""
    if not uses_profile(cfg):
        return None
    path = run_dir / RUN_PROFILE
    if cfg.network.compute_profile:
        path = Path(cfg.network.compute_profile)  # every rank reads it: nothing to wait for
    elif not path.exists():
        if rank == 0:
            prepare_run_profile(cfg, run_dir, folder, device)
        else:
            deadline = time.monotonic() + _WAIT_S
            while not path.exists():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"rank 0 wrote no compute profile to {path} in {_WAIT_S:.0f} s")
                time.sleep(0.2)
    profile = read_profile(path)
    if cfg.network.compute_ms > 0:
        profile = profile.with_step_s(cfg.network.compute_ms / 1000.0)
    if service:
        return ProfiledCompute(profile.of_service(), lambda step: 1.0)
    return ProfiledCompute(profile, step_factor(cfg.network, cfg.seed, rank), model)
