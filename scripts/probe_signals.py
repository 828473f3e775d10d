"""Replay Ctrl-C, SIGTERM, SIGHUP and SIGUSR1 at points from start-up to the end of a run, under each launcher, and
check what every one leaves (issue 34): the exit code agrees with the recorded status, no
traceback, the store still opens (as dlcomm itself opens it, and with a query), and no process of
the run is left.

    python scripts/probe_signals.py                       # threads, local and (when up) slurm; 10 points, 3 repeats
    python scripts/probe_signals.py --launchers threads --points 4 --repeats 1

Each trial is a first run in a fresh folder (the store is created during it, the most fragile
moment): ``dlcomm train dataset=synthetic model=mlp nodes=2 train.max_steps=N launcher=L`` (under
SLURM ``nodes=1 workers_per_node=2``). One
unsignalled run per launcher measures its length T; the points are spread from 3% to 97% of T.
SIGINT goes to the driver's process group (what a terminal's Ctrl-C does), SIGHUP too (what a
closing terminal or ssh session does), SIGTERM and SIGUSR1 to the driver alone (``kill``, a
scheduler's notice); ``--signals`` picks some. Under ``launcher=slurm`` the driver only submits: its job is waited for before the
checks. Everything listens on loopback only and every trial is bounded (``--trial-timeout``).

Accepted outcomes: exit 0 with the run FINISHED (the signal came after every rank had ended, or
after a SLURM job was submitted), exit 130 with the run KILLED, or exit 130 with no run (the signal
came before it was opened). Anything else counts as inconsistent. The table (markdown) is printed
and, with ``--out``, written to a file; the exit code is 1 when any trial broke a rule.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

JOB = ["dataset=synthetic", "model=mlp"]
SHAPE = {"slurm": ["nodes=1", "workers_per_node=2"]}  # a one-machine SLURM has one node
SIGNALS = {"INT": signal.SIGINT, "TERM": signal.SIGTERM, "HUP": signal.SIGHUP, "USR1": signal.SIGUSR1}
TO_THE_GROUP = {"INT", "HUP"}  # a terminal signals its foreground process group
SLURM_JOB = re.compile(r"submitted SLURM job (\d+)")


@dataclass
class Trial:
    launcher: str
    signame: str
    point: int
    at_s: float | None
    exit_code: int | None = None
    statuses: list[str] = field(default_factory=list)
    store: str = "none"  # none | opens | corrupt: <why>
    traceback: bool = False
    leaked_semaphores: bool = False
    left: list[str] = field(default_factory=list)
    hung: bool = False
    sent: bool = False  # False: the driver had already exited at the point
    driver_s: float = 0.0  # how long the driver lived

    @property
    def outcome(self) -> str:
        """``<exit> <status>`` as the table shows it (``-`` for no run)."""
        outcome = f"{self.exit_code} {'/'.join(self.statuses) or '-'}"
        return outcome if self.sent else f"{outcome} (not sent: exited)"

    def problems(self) -> list[str]:
        found = []
        if self.hung:
            found.append("did not end")
        if (self.exit_code, tuple(self.statuses)) not in {(0, ("FINISHED",)), (130, ("KILLED",)), (130, ())}:
            found.append(f"exit {self.exit_code} with runs {self.statuses or 'none'}")
        if self.traceback:
            found.append("traceback")
        if self.leaked_semaphores:
            found.append("leaked-semaphore warning")
        if self.store.startswith("corrupt"):
            found.append(self.store)
        if self.left:
            found.append(f"{len(self.left)} process(es) left: {'; '.join(self.left)[:300]}")
        return found


def _env(home: Path) -> dict[str, str]:
    env = dict(os.environ, DLCOMM_HOME=str(home))
    env.pop("PYTHONWARNINGS", None)  # the resource tracker's warning must be able to show
    return env


def _start(home: Path, launcher: str, steps: int) -> subprocess.Popen:
    home.mkdir(parents=True)
    shape = SHAPE.get(launcher, ["nodes=2"])
    command = [
        sys.executable,
        "-m",
        "dlcomm.cli",
        "train",
        *JOB,
        *shape,
        f"train.max_steps={steps}",
        f"launcher={launcher}",
    ]
    with open(home / "output.txt", "w") as output:  # a file: what is left behind may hold it open
        return subprocess.Popen(
            command,
            cwd=home,
            env=_env(home),
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )  # as a foreground job


def _wait_for_slurm_job(output: str, timeout_s: float) -> bool:
    found = SLURM_JOB.search(output)
    if found is None:
        return True
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        queue = subprocess.run(["squeue", "-h", "-j", found.group(1)], capture_output=True, text=True)
        if not queue.stdout.strip():
            return True
        time.sleep(1)
    return False


def _processes_of(home: Path, session: int, grace_s: float = 8.0) -> list[str]:
    """Live processes of the driver's session or with this trial's DLCOMM_HOME in their
    environment (a SLURM job's ranks), after up to ``grace_s`` for what ends with the run."""
    deadline = time.monotonic() + grace_s
    while True:
        left = []
        for process in psutil.process_iter(["pid", "cmdline", "status"]):
            try:
                if process.info["status"] == psutil.STATUS_ZOMBIE:
                    continue
                mine = os.getsid(process.pid) == session
                if not mine:
                    mine = process.environ().get("DLCOMM_HOME") == str(home)
            except (psutil.Error, OSError):
                continue
            if mine:
                left.append(f"{process.pid} {' '.join(process.info['cmdline'] or [])[:80]}")
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.25)


def _store(home: Path) -> tuple[str, list[str]]:
    """Whether the trial's store opens (dlcomm's own probe, then a query through MLflow) and the
    statuses of its runs."""
    database = home / "results" / "mlflow.db"
    if not database.exists():
        return "none", []
    from mlflow.tracking import MlflowClient

    from dlcomm.tracking.store import probe

    uri = f"sqlite:///{database}"
    try:
        probe(uri)
        client = MlflowClient(tracking_uri=uri)
        experiments = [e.experiment_id for e in client.search_experiments()]
        runs = client.search_runs(experiments) if experiments else []
    except Exception as error:  # noqa: BLE001 - any refusal (dlcomm's UserError, MLflow's, sqlite's) is what is measured
        return f"corrupt: {str(error).splitlines()[0][:160]}", []
    return "opens", sorted(run.info.status for run in runs)


def run_trial(
    root: Path, launcher: str, signame: str, point: int, at_s: float | None, steps: int, timeout_s: float
) -> Trial:
    home = root / f"{launcher}-{signame}-{point}-{time.monotonic_ns()}"
    trial = Trial(launcher, signame, point, at_s)
    driver = _start(home, launcher, steps)
    started = time.monotonic()
    if at_s is not None:
        time.sleep(max(0.0, at_s - (time.monotonic() - started)))
        if driver.poll() is None:
            trial.sent = True
            if signame in TO_THE_GROUP:
                os.killpg(driver.pid, SIGNALS[signame])  # a terminal's Ctrl-C or hang-up: the foreground group
            else:
                driver.send_signal(SIGNALS[signame])
    try:
        trial.exit_code = driver.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        trial.hung = True
        os.killpg(driver.pid, signal.SIGKILL)
        trial.exit_code = driver.wait()
    trial.driver_s = time.monotonic() - started
    output = (home / "output.txt").read_text(errors="replace")
    if launcher == "slurm" and not _wait_for_slurm_job(output, timeout_s):
        trial.hung = True
    trial.traceback = "Traceback (most recent call last)" in output
    trial.leaked_semaphores = "leaked semaphore" in output
    trial.left = _processes_of(home, driver.pid)
    trial.store, trial.statuses = _store(home)
    if not trial.problems():
        shutil.rmtree(home, ignore_errors=True)
    return trial


def _measure(root: Path, launcher: str, steps: int, timeout_s: float) -> float:
    """How long the driver of an unsignalled run lives (under SLURM: until it has submitted)."""
    trial = run_trial(root, launcher, "none", -1, None, steps, timeout_s)
    if trial.problems() or trial.exit_code != 0:
        sys.exit(
            f"probe_signals: an unsignalled run under launcher={launcher} failed: {trial.problems()} "
            f"(exit {trial.exit_code}); see {root}"
        )
    return trial.driver_s


def _slurm_up() -> bool:
    if shutil.which("sinfo") is None:
        return False
    return subprocess.run(["sinfo", "-h"], capture_output=True).returncode == 0


def table(trials: list[Trial], lengths: dict[str, float]) -> str:
    """Markdown: one row per launcher and point, the outcomes of each signal over the repeats."""
    signames = list(dict.fromkeys(trial.signame for trial in trials))
    lines = [
        "| launcher | point (s after start) | "
        + " | ".join(f"SIG{name}: exit status (count)" for name in signames)
        + " | problems |",
        "|---|---|" + "---|" * len(signames) + "---|",
    ]
    by_row = collections.defaultdict(list)
    for trial in trials:
        by_row[(trial.launcher, trial.point)].append(trial)
    for (launcher, point), row in sorted(
        by_row.items(), key=lambda item: (list(lengths).index(item[0][0]), item[0][1])
    ):
        cells = []
        for signame in signames:
            counts = collections.Counter(t.outcome for t in row if t.signame == signame)
            cells.append(", ".join(f"{outcome} ({n})" for outcome, n in sorted(counts.items())) or "-")
        problems = sum(bool(t.problems()) for t in row)
        lines.append(
            f"| {launcher} | {point + 1}: {row[0].at_s:.1f} of {lengths[launcher]:.1f} | {' | '.join(cells)} "
            f"| {problems} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--launchers", default="threads,local,slurm", help="comma-separated; slurm is skipped when no SLURM answers"
    )
    parser.add_argument("--points", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300, help="train.max_steps of the probed run")
    parser.add_argument("--trial-timeout", type=float, default=180.0)
    parser.add_argument("--out", type=Path, help="also write the table (markdown) here")
    parser.add_argument("--signals", default=",".join(SIGNALS), help=f"comma-separated, of {', '.join(SIGNALS)}")
    args = parser.parse_args()
    if args.points < 1 or args.repeats < 1:
        parser.error("--points and --repeats must be at least 1")
    signals = [name for name in args.signals.split(",") if name]
    if not signals or set(signals) - set(SIGNALS):
        parser.error(f"--signals takes names of {', '.join(SIGNALS)}")
    launchers = [name for name in args.launchers.split(",") if name]
    if "slurm" in launchers and not _slurm_up():
        print("probe_signals: no SLURM answers (scripts/slurm_local.sh up starts one): slurm skipped", file=sys.stderr)
        launchers.remove("slurm")
    root = Path(tempfile.mkdtemp(prefix="dlcomm-probe-signals-"))
    trials: list[Trial] = []
    lengths: dict[str, float] = {}
    from tqdm import tqdm

    for launcher in launchers:
        lengths[launcher] = _measure(root, launcher, args.steps, args.trial_timeout)
        step = 0.94 / max(1, args.points - 1)
        points = [lengths[launcher] * (0.03 + step * k) for k in range(args.points)]
        plan = [(signame, k, at) for _ in range(args.repeats) for signame in signals for k, at in enumerate(points)]
        for signame, k, at in tqdm(plan, desc=f"launcher={launcher} (T={lengths[launcher]:.1f} s)", file=sys.stderr):
            trial = run_trial(root, launcher, signame, k, at, args.steps, args.trial_timeout)
            trials.append(trial)
            for problem in trial.problems():
                tqdm.write(f"  {launcher} SIG{signame} at {at:.1f} s: {problem}", file=sys.stderr)
    text = table(trials, lengths)
    broken = [t for t in trials if t.problems()]
    corrupt = sum(t.store.startswith("corrupt") for t in trials)
    left = sum(len(t.left) for t in trials)
    summary = (
        f"{len(trials)} trials ({', '.join(launchers)}; {args.points} points x {len(signals)} signals x {args.repeats} repeats): "
        f"{corrupt} corrupt stores, {left} leftover processes, {len(broken)} trials with a problem, "
        f"{sum(not t.sent for t in trials)} signals not sent (the driver had exited)"
    )
    print(text + "\n\n" + summary)
    if args.out:
        args.out.write_text(text + "\n\n" + summary + "\n")
    if not broken:
        shutil.rmtree(root, ignore_errors=True)
    else:
        print(f"probe_signals: the failing trials' folders are under {root}", file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
