"""Rank 0's reporter: a progress bar, per-iteration and per-epoch metrics into MLflow, the
timing table and the resolved config as artifacts, and the closing summary line. It writes what
the loop and :mod:`dlcomm.metrics` computed; the timing table's columns are the fields of
:class:`~dlcomm.metrics.rows.IterationRow`."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf
from tqdm import tqdm

from dlcomm.metrics import names
from dlcomm.metrics.rows import TIMING_COLUMNS, IterationRow
from dlcomm.progress import RECORDED, TRAINING, mark_stage
from dlcomm.secrets import mask
from dlcomm.spec import RunSpec
from dlcomm.tracking.mlflow_run import RunLogger
from dlcomm.tracking.stream import MetricStream
from dlcomm.tracking.ui import DESCRIPTION_TAG, fit_description, ui_lines

POSTFIX_EVERY_S = 0.5  # the training bar's redraw interval (tqdm's mininterval below): its postfix no more often


def _table(rows: list[IterationRow]) -> pd.DataFrame:
    """The rows as the timing table (one column per row field, in field order)."""
    return pd.DataFrame([vars(row) for row in rows], columns=list(TIMING_COLUMNS))


class Rank0Reporter:
    def __init__(
        self,
        spec: RunSpec,
        batch_size: int,
        world_size: int,
        epochs: int,
        shared_process: bool = False,
        accuracy_label: str = "test acc",
    ) -> None:
        self.spec = spec
        self.accuracy_label = accuracy_label  # the task's (dlcomm.tasks): a GAN's is its discriminator's classifier
        self.shared_process = shared_process  # the ranks are threads of this process: one memory figure
        self.run_dir = Path(spec.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.logger = RunLogger(spec.tracking_uri, spec.run_id)
        self.samples_per_iteration = batch_size * world_size
        self.epochs = epochs
        self.bar: tqdm | None = None
        self._loss_ema = math.nan
        self._time_ema = math.nan
        self._next_postfix = 0.0
        self._timings: list[pd.DataFrame] = []
        self.timing_warmup = spec.cfg().train.timing_warmup
        self.stream = MetricStream(self.logger.log_series, float(spec.cfg().tracking.stream_every_s))

    def start(self, total_steps: int, done_steps: int = 0, rows: list[IterationRow] | None = None) -> None:
        """``done_steps`` and the finished epochs' ``rows`` are those of a resumed run."""
        config_path = self.run_dir / "config.yaml"
        config_path.write_text(mask(OmegaConf.to_yaml(self.spec.config)))  # no credentials of tracking.uri
        self.logger.log_artifact(config_path)
        profile_path = self.run_dir / "compute_profile.json"  # network.compute=profile: what the clocks charged
        if profile_path.exists():
            from dlcomm.train.profile import run_profile_in

            self.logger.log_artifact(profile_path)
            profile = run_profile_in(self.run_dir)
            if profile is not None:  # what every simulated figure of the run rests on (docs/network.md)
                self.logger.set_tags(profile.tags())
        if rows:
            self._timings.append(_table(rows))
        self.budget_s = float(self.spec.cfg().train.time_budget_s)
        mark_stage(self.run_dir, TRAINING)  # the driver's status line stops: the bar takes over
        if self.budget_s > 0:  # the budget ends the run: the bar counts its clock's seconds, not iterations
            clock = "simulated s" if self.spec.cfg().network.mode == "simulate" else "s"
            self.bar = tqdm(
                total=self.budget_s,
                desc=f"train ({clock} of the budget)",
                dynamic_ncols=True,
                mininterval=POSTFIX_EVERY_S,
                bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.1f}/{total:g} [{elapsed}<{remaining}{postfix}]",
            )
        else:
            self.bar = tqdm(
                total=total_steps,
                initial=done_steps,
                desc="train",
                unit="it",
                dynamic_ncols=True,
                mininterval=POSTFIX_EVERY_S,
            )
        self._step = done_steps

    def iteration(self, step: int, loss: float, time_s: float) -> None:
        self.stream.add(names.LIVE_LOSS, loss, step)
        self.stream.add(names.LIVE_TIME, time_s, step)
        self._loss_ema = loss if math.isnan(self._loss_ema) else 0.9 * self._loss_ema + 0.1 * loss
        if step >= self.timing_warmup:  # as the epoch lines: the warm-up iterations' times are left out
            self._time_ema = time_s if math.isnan(self._time_ema) else 0.9 * self._time_ema + 0.1 * time_s
        self._step = step + 1
        if self.bar is not None:
            # the bar is told as often as it redraws (mininterval), not every step: a step of a small
            # model is a few hundred microseconds of host time, and tqdm's update is Python too
            now = time.perf_counter()
            if now >= self._next_postfix:
                self._next_postfix = now + POSTFIX_EVERY_S
                self._sync_bar()
                if not math.isnan(self._time_ema):
                    rate = self.samples_per_iteration / self._time_ema if self._time_ema > 0 else 0.0
                    extra = {"it": self._step} if self.budget_s > 0 else {}
                    self.bar.set_postfix(loss=f"{self._loss_ema:.3f}", samples_s=f"{rate:,.0f}", **extra, refresh=False)

    def _sync_bar(self) -> None:
        """The training bar's count brought to the iterations done (the time budget's bar counts seconds)."""
        if self.bar is not None and self.budget_s <= 0 and self._step > self.bar.n:
            self.bar.update(self._step - self.bar.n)

    def clock(self, seconds: float) -> None:
        """The training clock all workers agreed on (time budget, evaluations against time)."""
        if self.bar is not None and self.budget_s > 0:
            self.bar.update(min(seconds, self.budget_s) - self.bar.n)

    def evaluation(self, batches: int, what: str) -> "EvaluationBar":
        """A bar for an evaluation of ``batches`` test batches on rank 0 (``what`` it evaluates);
        the training bar's clock is paused meanwhile, so its rate stays the training's."""
        self._sync_bar()
        return EvaluationBar(self.bar, batches, what)

    def epoch(
        self,
        epoch: int,
        metrics: dict[str, float],
        rows: list[IterationRow],
        series: dict[str, dict[int, float]] | None = None,
    ) -> None:
        """The epoch's metrics (MLflow step = ``epoch``), its per-iteration ``series``
        (name -> {step: value}) and its timing rows (kept for timings.csv)."""
        self._timings.append(_table(rows))
        self.logger.log_series(
            (metric, value, step) for metric, points in (series or {}).items() for step, value in points.items()
        )
        self.logger.log_metrics(metrics, step=epoch)
        if self.bar is not None:
            self._sync_bar()
            self.bar.write(
                _epoch_line(
                    epoch, self.epochs if self.budget_s <= 0 else 0, metrics, self.accuracy_label, self.spec.shared
                )
            )

    def clock_point(self, step: int, metrics: dict[str, float]) -> None:
        """An evaluation at a point of the training clock (``train.eval_every_s``)."""
        self.logger.log_metrics(metrics, step=step)
        if self.bar is not None:
            self.bar.write(
                f"clock {metrics[names.CLOCK_TIME]:.1f} s (step {step}): {self.accuracy_label} {_pct(metrics[names.CLOCK_TEST_ACC_MEAN])}"
                f" (averaged model {_pct(metrics[names.CLOCK_TEST_ACC_AVG_MODEL])})"
            )

    def images(self, epoch: int, images: dict) -> None:
        """Image grids (float tensors (C, H, W), values in [0, 1]) as PNG artifacts
        ``<name>/epoch_<epoch>.png`` (e.g. a GAN's generated samples)."""
        from torchvision.utils import save_image

        for name, grid in images.items():
            folder = self.run_dir / name
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"epoch_{epoch:03d}.png"
            save_image(grid, path)
            self.logger.log_artifact(path, name)
        if self.bar is not None:
            self.bar.write(
                f"epoch {epoch}: wrote {', '.join(f'{name}/epoch_{epoch:03d}.png' for name in images)} (MLflow artifacts)"
            )

    def close(self) -> None:
        """Send the streamed points still held (also when the run failed); close the bar."""
        if self.bar is not None:
            self._sync_bar()
            self.bar.close()
        self.stream.close()

    def finish(self, summary: dict, ended_by: str = "") -> None:
        self.close()
        if ended_by:
            self.logger.set_tags({"ended_by": ended_by})
        memory = {name: summary.pop(name, []) for name in (names.PEAK_RSS_MIB, names.PEAK_PSS_MIB)}
        hosts = summary.pop(names.RANK_HOSTS, [])
        self.logger.log_metrics({**summary, **_memory_metrics(memory, self.shared_process)}, step=0)
        if hosts:
            self.logger.set_tags({names.RANK_HOSTS: ",".join(hosts), "num_hosts": str(len(set(hosts)))})
        timings_path = self.run_dir / "timings.csv"
        timings = pd.concat(self._timings, ignore_index=True) if self._timings else _table([])
        timings.sort_values(["step", "rank"]).to_csv(timings_path, index=False)
        self.logger.log_artifact(timings_path)
        line = _summary_line(summary, self.spec, ended_by, self.accuracy_label)
        self.logger.set_tags({DESCRIPTION_TAG: run_description(line, self.spec)})
        mark_stage(self.run_dir, RECORDED)  # a signal to the driver from now on leaves the run FINISHED
        print(line, flush=True)
        if not self.spec.parent_run_id:  # a sweep's element: the sweep shows its parent's page at its end
            print(ui_lines(self.logger.page(), self.spec.tracking_uri), flush=True)
        overruns = int(summary.get(names.FINAL_OVERRUNS, 0))
        if overruns:
            print(
                f"warning: in {overruns} operations (counted on every rank) the real transfer on this machine took longer than the modelled"
                " network; emulated times are too high there (use network.mode=simulate, or fewer ranks per core)",
                flush=True,
            )
        if memory[names.PEAK_RSS_MIB] and self.shared_process:
            print(
                f"peak memory of the process (every rank is a thread of it), MiB: RSS {max(memory[names.PEAK_RSS_MIB]):.0f}"
                f" | PSS {max(memory[names.PEAK_PSS_MIB]):.0f}",
                flush=True,
            )
        elif memory[names.PEAK_RSS_MIB]:
            print(
                "peak memory per rank, MiB: RSS "
                + ", ".join(f"{value:.0f}" for value in memory[names.PEAK_RSS_MIB])
                + " | PSS (shared library pages split among ranks) "
                + ", ".join(f"{value:.0f}" for value in memory[names.PEAK_PSS_MIB]),
                flush=True,
            )


def _memory_metrics(memory: dict[str, list[float]], shared_process: bool) -> dict[str, float]:
    """Peak memory as metrics of step 0: the largest rank's under the plain name, and, when the
    ranks are processes, each rank's under ``<name>/rank<r>`` (threads share one process: one value)."""
    metrics: dict[str, float] = {}
    for name, values in memory.items():
        if not values:
            continue
        metrics[name] = max(values)
        if not shared_process:
            metrics.update({f"{name}/rank{rank}": value for rank, value in enumerate(values)})
    return metrics


def _pct(value: float | None) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{100 * value:.2f}%"


class EvaluationBar:
    """A nested bar over rank 0's test batches; on leaving, the training bar's start moves
    forward by the evaluation's duration, so its elapsed time, rate and estimate are the
    training's alone."""

    def __init__(self, train_bar: tqdm | None, batches: int, what: str) -> None:
        self.train_bar, self.batches, self.what = train_bar, batches, what
        self.bar: tqdm | None = None
        self.started = 0.0

    def __enter__(self) -> "EvaluationBar":
        self.started = time.time()  # tqdm's own clock
        if self.train_bar is not None:
            self.train_bar.refresh()
            self.bar = tqdm(
                total=self.batches,
                desc=f"evaluating {self.what}",
                unit="batch",
                leave=False,
                dynamic_ncols=True,
                mininterval=POSTFIX_EVERY_S,
                position=1,
            )
        return self

    def advance(self) -> None:
        if self.bar is not None:
            self.bar.update(1)
            if self.bar.n == self.batches:
                self.bar.set_description(f"evaluated {self.what}: waiting for the other ranks", refresh=True)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.close()
        if self.train_bar is not None:
            paused = time.time() - self.started
            self.train_bar.start_t += paused
            self.train_bar.last_print_t += paused


def wall_split(time_s: float, comm_share: float, wait_share: float | None, shared: str) -> str:
    """The wall clock's figures in words: ``<t> ms/iter`` and what it is made of, and which clock
    it is when the ranks shared this machine's hardware (``shared``: what they shared). Where the
    rows tell waiting for peers apart (``wait_share``; threads), the iteration is compute +
    waiting for peers + communication; where they cannot (processes) and the ranks shared cores,
    the communication is said to include the waiting."""
    head = f"{1000 * time_s:.1f} ms/iter"
    if wait_share is not None and not math.isnan(wait_share):
        parts = (
            f"compute {_pct(1 - comm_share - wait_share)} + waiting for peers {_pct(wait_share)}"
            f" + communication {_pct(comm_share)}"
        )
    elif shared:
        parts = f"communication {_pct(comm_share)}, waiting for peers' turns included"
    else:
        parts = f"communication {_pct(comm_share)}"
    clock = f"; wall clock of this machine, {shared}: no cluster's" if shared else ""
    return f"{head} ({parts}{clock})"


def _epoch_line(
    epoch: int, epochs: int, m: dict[str, float], accuracy_label: str = "test acc", shared: str = ""
) -> str:
    """``epochs`` 0: a time budget ends the run (no count of epochs)."""
    line = f"epoch {epoch}/{epochs}" if epochs else f"epoch {epoch}"
    line += f": train loss {m[names.EPOCH_TRAIN_LOSS]:.4f}"
    if names.EPOCH_GAN_D_LOSS in m:
        line += f" (discriminator {m[names.EPOCH_GAN_D_LOSS]:.4f}, generator {m[names.EPOCH_GAN_G_LOSS]:.4f})"
    if names.EPOCH_TEST_ACC_MEAN in m:
        line += (
            f", {accuracy_label} {_pct(m[names.EPOCH_TEST_ACC_MEAN])} (averaged model {_pct(m[names.EPOCH_TEST_ACC_AVG_MODEL])},"
            f" consensus distance {m[names.EPOCH_CONSENSUS]:.3g})"
        )
    wait = m.get(names.EPOCH_PEER_WAIT_SHARE)
    line += (
        f", {wall_split(m[names.EPOCH_TIME_PER_ITER], m[names.EPOCH_COMM_SHARE], wait, shared)},"
        f" {m[names.EPOCH_SAMPLES_PER_S]:,.0f} samples/s"
    )
    if names.EPOCH_SIM_TIME_PER_ITER in m:
        line += (
            f"; simulated {1000 * m[names.EPOCH_SIM_TIME_PER_ITER]:.1f} ms/iter"
            f" (communication {_pct(m[names.EPOCH_SIM_COMM_SHARE])}), {m[names.EPOCH_SIM_TIME]:.1f} s so far"
        )
    return line


def run_description(line: str, spec: RunSpec) -> str:
    """The run's description in the MLflow UI (markdown, on the run's page): first its result (the
    test accuracy and the time per iteration on the clock a comparison uses: the simulated one
    when the run has it, else the wall clock; the UI folds a description after two lines, below
    the tags), then its command line and the done line's parts as a list (the clock each figure is
    on is named in its part)."""
    parts = [part for part in line.removeprefix("done: ").split(" | ") if not part.startswith("mlflow run ")]
    simulated = [part for part in parts[1:] if part.startswith(("simulated ", "emulated "))]
    # the profile's provenance is the list's (below): the first line keeps to what the run measured
    result = "; ".join([parts[0], *(part.split(", compute profile ")[0] for part in simulated or parts[1:2])])
    shown = [
        item for item in spec.overrides if not item.lstrip("+~").startswith("tracking.uri=")
    ]  # may hold a password
    command = " ".join(["dlcomm train", *shown])
    text = "\n".join(
        [f"**Result**: {result}  ", f"**{spec.run_name()}**: `{command}`", "", *(f"- {part}" for part in parts)]
    )
    return fit_description(text)


def _summary_line(s: dict[str, float], spec: RunSpec, ended_by: str = "", accuracy_label: str = "test acc") -> str:
    cfg = spec.cfg()
    network = cfg.network
    whose = "" if accuracy_label == "test acc" else f" [{accuracy_label}]"
    line = (
        f"done: test accuracy {_pct(s[names.FINAL_TEST_ACC])} (averaged model {_pct(s[names.FINAL_TEST_ACC_AVG_MODEL])}){whose}"
        f" | wall {wall_split(s[names.FINAL_TIME_PER_ITER], s[names.FINAL_COMM_SHARE], s.get(names.FINAL_PEER_WAIT_SHARE), spec.shared)}"
        f" over {int(s[names.FINAL_STEPS])} iterations"
    )
    if names.FINAL_SIM_TIME_PER_ITER in s:
        line += (
            f" | {network.mode}d {spec.network_label()}: {1000 * s[names.FINAL_SIM_TIME_PER_ITER]:.1f} ms/iter,"
            f" communication {_pct(s[names.FINAL_SIM_COMM_SHARE])} of it"
            f" (modelled {1000 * s[names.FINAL_COMM_MODELLED_PER_ITER]:.1f} ms/iter),"
            f" training {s[names.FINAL_SIM_TIME]:.1f} s"
        )
        from dlcomm.train.profile import run_profile_in

        profile = run_profile_in(Path(spec.run_dir)) if spec.run_dir else None
        if profile is not None:
            line += f", compute profile {profile.short()}"
    if names.FINAL_BEST_TEST_ACC in s and cfg.train.time_budget_s > 0:
        clock = "simulated s" if network.mode == "simulate" else "s"
        line += f" | best test accuracy {_pct(s[names.FINAL_BEST_TEST_ACC])} within {cfg.train.time_budget_s:g} {clock}"
    target = cfg.train.target_acc
    if target > 0:
        if names.FINAL_TIME_TO_TARGET in s:
            line += f" | reached {_pct(target)} after {s[names.FINAL_TIME_TO_TARGET]:.1f} s wall"
            if names.FINAL_SIM_TIME_TO_TARGET in s:
                line += f", {s[names.FINAL_SIM_TIME_TO_TARGET]:.1f} s {network.mode}d"
        else:
            line += f" | {_pct(target)} not reached"
    if ended_by:
        line += f" | {ended_by} ended the run"
    return line + f" | mlflow run {spec.run_id} ({spec.tracking_uri})"
