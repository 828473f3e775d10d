"""The compute profile of a run, and the simulated clock's compute charged from it
(``network.mode=simulate network.compute=profile``; docs/network.md, "Compute on the simulated clock").

**Measuring** (:mod:`dlcomm.train.profile_measure`). One replica of the run's model, optimizer,
per-worker batch, micro-batches (``train.comm_interval``) and precision is stepped alone: on a CPU
on one torch thread, timed by that thread's CPU-time clock, so that other work on the machine does
not move the figure; on CUDA by the wall clock after a device synchronisation. Each step is cut at
three instants: the start of the last backward pass (``lead_s`` from the step's start: every
forward, the earlier micro-batches' backward passes), the end of that backward (``backward_s``
later), and the end of the step (``optimizer_s`` later: the optimizer and loss scaling). During the
last backward each parameter's gradient-ready instant is recorded (``ready_s[i]``, seconds into
that backward, in ``model.parameters()`` order): what an algorithm that communicates from gradient
hooks overlaps with. Each figure is the median over the steps of the fastest half of several
windows; the windows' spread is kept as the measurement's error, and a machine too busy to measure
is refused in one line rather than cached.

**Where a profile comes from** (its ``origin``, named on every screen that shows a simulated
figure): ``network.compute_profile=<file>``, or a profile of the library shipped with dlcomm
(``network.compute_profile=<device>/<workload>``, :mod:`dlcomm.profiles`), or the
cache (``results/profiles/``, keyed by :func:`profile_key`: model, data shape, batch, optimizer,
precision, task, device, host, torch version, threads and measuring method, so that a profile of
another machine or torch is never reused), or measured now and cached.

**Charging.** :class:`ProfiledCompute` is the compute reading of a rank's virtual clock. Inside a
step its position moves only at those instants, to the profile's times multiplied by the step's
factor ``f`` (:func:`step_factor`: the rank's ``network.rank_compute_scale``, a lognormal jitter of
mean 1 and coefficient of variation ``network.compute_jitter``, and a straggler slowdown drawn
with ``network.straggler_prob``), so a rank's simulated compute is a function of (config, seed,
rank, step, profile) alone: the same under every launcher and rank count. Arithmetic an algorithm
does outside the step (averaging, mixing) is not charged. A service rank (the parameter server, the
gossip manager) is charged only what it marks as a step: the parameter server's update costs the
profile's optimizer step (:meth:`ComputeProfile.of_service`), the gossip manager's bookkeeping
nothing, so its figures too are free of the machine's load.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import platform
import time
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch

from dlcomm.comm.clock import StepMeter
from dlcomm.config.schema import NetworkConfig, RunConfig
from dlcomm.config.typed import plain
from dlcomm.train.profile_measure import METHOD, Measurement, measure_step, measuring_thread_count


@dataclass(frozen=True)
class ComputeProfile:
    """One optimizer step of one replica, alone (see the module docstring); seconds. The fields
    after ``ready_s`` say how and where it was measured (empty in profiles written before they
    existed); ``origin`` is where this copy was read from, set when it is read."""

    lead_s: float
    backward_s: float
    optimizer_s: float
    ready_s: tuple[float, ...]
    steps: int = 0  # timed steps behind the medians
    device: str = ""
    torch_version: str = ""
    threads: int = 0
    key: str = ""
    workload: str = ""  # model, batch and precision, e.g. "small_cnn b32 fp32"
    clock: str = ""  # "thread CPU time, 1 thread" | "wall clock, CUDA synchronized, 16 threads"
    spread: float = -1.0  # (max - min) / median of the kept windows' median steps; -1: not measured so
    windows: int = 0
    cpu_share: float = -1.0  # the measuring thread's CPU time over the wall time
    runnable: int = 0  # the most runnable tasks seen while measuring
    cores: int = 0
    measured_at: str = ""  # "2026-11-28 15:02 UTC"
    host: str = ""
    method: int = 1
    note: str = ""  # free text of a shipped profile: driver, how it was measured
    origin: str = ""

    @classmethod
    def of(cls, found: Measurement, device: torch.device, key: str = "", workload: str = "") -> "ComputeProfile":
        """The profile of a measurement made on ``device`` now."""
        return cls(
            **asdict(found),  # every field of a Measurement is one of the profile's
            device=device_name(device),
            torch_version=torch.__version__,
            key=key,
            workload=workload,
            method=METHOD,
        )

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
            origin=f"network.compute_ms={step_s * 1e3:g}, in the shape of the profile ({self.origin or 'its origin unrecorded'})",
        )

    def of_service(self) -> "ComputeProfile":
        """A service's step (the parameter server's update): the optimizer step alone, no forward or
        backward pass, no gradient hooks."""
        return replace(self, lead_s=0.0, backward_s=0.0, ready_s=())

    def from_origin(self, origin: str) -> "ComputeProfile":
        return replace(self, origin=origin)

    def to_json(self, with_origin: bool = True) -> str:
        data = {**asdict(self), "ready_s": list(self.ready_s), "step_s": self.step_s}
        if not with_origin:
            data.pop("origin")
        return json.dumps(data, indent=1)

    @classmethod
    def from_json(cls, text: str) -> "ComputeProfile":
        raw = json.loads(text)
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")
        raw.pop("step_s", None)
        known = {f.name for f in fields(cls)}
        raw = {name: value for name, value in raw.items() if name in known}  # a newer dlcomm's fields
        raw["ready_s"] = tuple(float(r) for r in raw["ready_s"])
        profile = cls(**raw)
        if not all(math.isfinite(x) and x >= 0 for x in (profile.lead_s, profile.backward_s, profile.optimizer_s)):
            raise ValueError("its times are not finite non-negative seconds")
        return profile

    def describe(self) -> str:
        """The figures: the step and its parts."""
        return (
            f"{self.step_s * 1e3:.2f} ms per step (forward and earlier passes {self.lead_s * 1e3:.2f}, last backward "
            f"{self.backward_s * 1e3:.2f}, optimizer {self.optimizer_s * 1e3:.2f}) over {self.steps} timed steps"
        )

    @property
    def spread_text(self) -> str:
        return f"±{self.spread:.1%}" if self.spread >= 0 else "spread not measured"

    def measured_text(self) -> str:
        """How and where it was measured, in one phrase."""
        parts = [f"measured {self.measured_at}" if self.measured_at else "measured at an unrecorded time"]
        if self.host:
            parts.append(f"on {self.host}")
        parts.append(self.device or "an unrecorded device")
        parts.append(f"torch {self.torch_version or '?'}")
        parts.append(self.clock or f"{self.threads} thread(s), wall clock")
        return ", ".join(parts)

    def provenance(self) -> str:
        """One line naming what a simulated figure rests on: the step, its spread, how, where and
        when it was measured, and where this copy came from."""
        what = f"{self.workload}: " if self.workload else ""
        origin = f"; {self.origin}" if self.origin else ""
        return f"{what}{self.step_s * 1e3:.2f} ms per step {self.spread_text} ({self.measured_text()}){origin}"

    def short(self) -> str:
        """The step, its spread, where it was measured and whether it was measured now, in a few
        words (a done line's part)."""
        where = ", ".join(part for part in (self.device, self.host and f"host {self.host}", self.measured_at) if part)
        source = self.origin.split(",")[0].split(";")[0] if self.origin else ""
        return f"{self.step_s * 1e3:.2f} ms/step {self.spread_text} ({where or 'provenance unrecorded'}{'; ' + source if source else ''})"

    def tags(self) -> dict[str, str]:
        """The MLflow tags a run carries for it (docs/network.md lists them)."""
        return {
            "profile": self.provenance(),
            "profile_ms": f"{self.step_s * 1e3:.3f}",
            "profile_spread": f"{self.spread:.4f}" if self.spread >= 0 else "",
            "profile_origin": self.origin,
            "profile_device": self.device,
            "profile_host": self.host,
            "profile_measured_at": self.measured_at,
            "profile_torch": self.torch_version,
            "profile_clock": self.clock,
        }


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


# -- measuring (dlcomm.train.profile_measure) ------------------------------------------------------------------------
def _batches(data: Any, batch: int, seed: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    count = max(batch, min(data.train_size, batch * 8) // batch * batch)
    while True:
        yield from data.train_batches(torch.arange(count), batch, seed)


def measure(
    cfg: RunConfig,
    data: Any,
    device: torch.device,
    progress: Callable[[str], None] | None = None,
    check_load: bool = True,
) -> ComputeProfile:
    """Step one replica of ``cfg``'s run alone (:func:`~dlcomm.train.profile_measure.measure_step`);
    its profile. Raises :class:`~dlcomm.train.profile_measure.BusyMachine` when the machine was too
    busy to trust the figure (``check_load``)."""
    from dlcomm.tasks import build_task
    from dlcomm.train.optim import build_optimizer
    from dlcomm.train.plan import step_batch
    from dlcomm.train.precision import Precision

    task = build_task(cfg)
    torch.manual_seed(cfg.seed)
    model = task.build_model(cfg.model, data).to(device)
    optimizer = build_optimizer(cfg.optim, task.param_groups(model, cfg.optim))
    precision = Precision(cfg.train.amp, device, cfg.train.amp_dtype)
    batches = _batches(data, step_batch(cfg.train), cfg.seed)
    found = measure_step(
        model, optimizer, task.loss, batches, device, cfg.train.comm_interval, precision, progress, check_load
    )
    return ComputeProfile.of(found, device, key=profile_key(cfg, device), workload=workload_name(cfg))


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


def workload_name(cfg: RunConfig) -> str:
    """What a profile times, in a few words: model, per-worker batch (x micro-batches) and
    precision, e.g. ``small_cnn b32 fp32`` or ``resnet50 b32 amp``."""
    micro = f" x{cfg.train.comm_interval}" if cfg.train.comm_interval > 1 else ""
    precision = f"amp-{cfg.train.amp_dtype}" if cfg.train.amp and str(cfg.train.amp_dtype) != "auto" else "amp"
    return f"{cfg.model.name} b{cfg.train.batch_size}{micro} {precision if cfg.train.amp else 'fp32'}"


def profile_key(cfg: RunConfig, device: torch.device) -> str:
    """What a profile depends on: model, data shape, batch, micro-batches, optimizer, precision,
    task, device, host, torch version, the measuring threads and method (a hash of them)."""
    parts = {
        "model": plain(cfg.model),
        "dataset": [cfg.dataset.name, getattr(cfg.dataset, "image_size", None)],  # only image folders resize
        "batch": cfg.train.batch_size,
        "micro": cfg.train.comm_interval,
        "optim": plain(cfg.optim),
        "precision": [cfg.train.amp, str(cfg.train.amp_dtype)],
        "task": plain(cfg.task),
        "device": device_name(device),
        "host": platform.node(),
        "torch": torch.__version__,
        "threads": measuring_thread_count(device),
        "method": METHOD,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _shown(path: Path) -> str:
    with contextlib.suppress(ValueError):
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    return str(path)


def cached_profile(
    cfg: RunConfig,
    data: Any,
    device: torch.device,
    folder: Path,
    progress: Callable[[str], None] | None = None,
    fresh: bool = False,
) -> ComputeProfile:
    """The profile of ``cfg`` from ``folder`` (keyed by :func:`profile_key`), measured and written
    there when absent, damaged or ``fresh``; its ``origin`` says which. A measurement on a machine
    too busy to trust raises :class:`~dlcomm.train.profile_measure.BusyMachine` and caches nothing."""
    path = folder / f"{profile_key(cfg, device)}.json"
    damaged = ""
    if path.exists() and not fresh:
        try:
            return ComputeProfile.from_json(path.read_text()).from_origin(f"read from the cache {_shown(path)}")
        except (OSError, ValueError, KeyError, TypeError) as error:
            damaged = f" (the cached copy was damaged: {type(error).__name__}; measured again)"
            if progress is not None:
                progress(f"the cached profile {_shown(path)} is damaged ({type(error).__name__}): measuring again")
    profile = measure(cfg, data, device, progress)
    write_atomically(path, profile.to_json(with_origin=False))
    return profile.from_origin(f"measured now, cached in {_shown(path)}{damaged}")


def write_atomically(path: Path, text: str) -> None:
    """``text`` into ``path`` whole or not at all (a partial file renamed over it); the partial
    file removed when the write or the rename fails."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        partial.write_text(text)
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


# -- a run's profile -------------------------------------------------------------------------------------------------
RUN_PROFILE = "compute_profile.json"  # in the run's folder: what its ranks charge (an MLflow artifact too)
_WAIT_S = 1800.0  # how long a rank waits for rank 0 to profile (under SLURM; a large model on a CPU takes minutes)


def uses_profile(cfg: RunConfig) -> bool:
    return cfg.network.mode == "simulate" and cfg.network.compute == "profile"


def given_profile(name: str) -> ComputeProfile:
    """``network.compute_profile``'s profile: a file, else a profile of the library
    (:mod:`dlcomm.profiles`); with its origin."""
    from dlcomm.profiles import library_path

    path = Path(name)
    shipped = None if path.is_file() else library_path(name)
    if shipped is not None:
        return read_profile(shipped, name).from_origin(f"the shipped profile {name}")
    return read_profile(path, name).from_origin(f"the file network.compute_profile={name}")


def run_profile(
    cfg: RunConfig,
    device: torch.device,
    folder: Path,
    progress: Callable[[str], None] | None = None,
    data: Any = None,
) -> ComputeProfile:
    """The profile ``cfg``'s ranks charge, with its origin: ``network.compute_profile``'s, else the
    cache's (measured now when the cache lacks it), ``network.compute_ms`` applied."""
    if cfg.network.compute_profile:
        profile = given_profile(cfg.network.compute_profile)
    else:
        if data is None:
            from dlcomm.data import build_dataset

            data = build_dataset(cfg.dataset)
        profile = cached_profile(cfg, data, device, folder, progress)
    if cfg.network.compute_ms > 0:
        profile = profile.with_step_s(cfg.network.compute_ms / 1000.0)
    return profile


def prepare_run_profile(
    cfg: RunConfig, run_dir: Path, folder: Path, device: torch.device, progress: Callable[[str], None] | None = None
) -> ComputeProfile:
    """Write ``run_dir/compute_profile.json`` (what the ranks charge, with its origin) before the ranks start."""
    profile = run_profile(cfg, device, folder, progress)
    write_atomically(run_dir / RUN_PROFILE, profile.to_json())
    return profile


def run_profile_in(run_dir: Path) -> ComputeProfile | None:
    """The profile a run's ranks charged (its folder's :data:`RUN_PROFILE`), None when it has none."""
    path = Path(run_dir) / RUN_PROFILE
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        return ComputeProfile.from_json(path.read_text())
    return None


def read_profile(path: Path, named: str = "") -> ComputeProfile:
    from dlcomm.errors import UserError

    try:
        return ComputeProfile.from_json(path.read_text())
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise UserError(
            f"network.compute_profile={named or path} is not a compute profile ({type(error).__name__}: "
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
    if not path.exists():
        if rank == 0:
            prepare_run_profile(cfg, run_dir, folder, device)
        else:
            deadline = time.monotonic() + _WAIT_S
            while not path.exists():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"rank 0 wrote no compute profile to {path} in {_WAIT_S:.0f} s")
                time.sleep(0.2)
    profile = read_profile(path)  # network.compute_ms is applied in it
    if service:
        return ProfiledCompute(profile.of_service(), lambda step: 1.0)
    return ProfiledCompute(profile, step_factor(cfg.network, cfg.seed, rank), model)
