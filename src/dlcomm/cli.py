"""``dlcomm``: the command line. Subcommands parse with argparse; run settings are Hydra
overrides (``key=value``) composed over the configs shipped in the package."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Callable, NoReturn, Sequence

from dlcomm import progress, secrets
from dlcomm.errors import EXIT_USAGE, UserError
from dlcomm.launch.interrupts import INTERRUPTS
from dlcomm.streams import forgive_streams

_EPILOG = """examples:
  dlcomm train                                   4 workers, AllReduce-SGD, small CNN, Fashion-MNIST
  dlcomm train algo=local_sgd algo.period=4 nodes=8
  dlcomm train model=resnet18 model.cifar_stem=true dataset=synthetic dataset.shape=[3,32,32]
  dlcomm train -m algo=allreduce,local_sgd seed=1,2   a sweep: 4 runs under one parent run
  dlcomm train -m seed=1,2 launcher=slurm        the same sweep as ONE SLURM job array
  dlcomm sweep export -m seed=1,2,3 > sweep.txt  one line per run, for slurm/array.sbatch
  dlcomm topology compare=crossover,sgp nodes=16 steps=20   mixing of gossip topologies (Fig. 6)
  dlcomm config algo=local_sgd                   print the composed configuration
  dlcomm config --explain network                every knob of a section: type, value, default, meaning
  dlcomm report experiment=sesgd_fig5            tables and plots into results/sesgd_fig5/
  dlcomm report sweep=last                       the latest sweep's comparison, also onto its parent run
  dlcomm report --from results/sesgd_fig5        redraw a committed report from its run data (no store)
  dlcomm report --all tracking.uri=sqlite:///elsewhere.db   every experiment of another store
  dlcomm runs reap                               close lost runs (RUNNING, job or driver gone) as FAILED
  dlcomm doctor                                  this node before the first job: torch, CUDA, driver, GPUs, network, SLURM
"""


class _OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad command line is one line (no usage block), exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"dlcomm: error: {message}; `{self.prog} --help` lists what it takes\n")

    lazy_epilog: Callable[[], str] | None = None
    """An epilog made when the help is shown (listing the choices imports every group's choice
    modules, which a command that shows no help need not pay for)."""

    def format_help(self) -> str:
        if self.lazy_epilog is not None:
            self.epilog = self.lazy_epilog()
        return super().format_help()


def _groups_epilog() -> str:
    """The config groups and their choices (:func:`dlcomm.catalog.choices`: registered classes and
    YAML files, dlcomm's and installed plugins')."""
    from dlcomm.catalog import choices, groups

    lines = ["config groups (group=choice):"]
    for name in groups():
        listed = choices(name)
        if listed:
            lines.append(f"  {name:<10} {', '.join(listed)}")
    lines += [
        "",
        "every key and its value: dlcomm config [overrides]   (e.g. dlcomm config algo=crossover shows its knobs)",
        "examples:",
        "  dlcomm train algo=crossover nodes=16 launcher=threads",
        "  dlcomm train -m algo=allreduce,local_sgd seed=1,2",
    ]
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(
        prog="dlcomm",
        description="Run and compare communication schemes of distributed deep learning.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="<command>")
    train = sub.add_parser(
        "train",
        help="run one training job (overrides: key=value ...), or a sweep with -m",
        description="Run one training job, or a sweep with -m. Settings are Hydra overrides: "
        "group=choice picks a configuration, key=value sets a knob.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    train.lazy_epilog = _groups_epilog  # the groups and their choices, made when shown
    train.add_argument(
        "-m",
        "--multirun",
        action="store_true",
        help="a sweep: key=a,b choices expand to their product, one run each under a parent run",
    )
    train.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. algo=local_sgd nodes=8 train.epochs=3")
    sweep = sub.add_parser("sweep", help="sweep tools: `sweep export -m key=a,b ...` prints one line per run")
    sweep.add_argument("action", choices=["export"])
    sweep.add_argument("-m", "--multirun", action="store_true", help="accepted for symmetry with `train -m`")
    sweep.add_argument("overrides", nargs="*")
    topology = sub.add_parser(
        "topology", help="mixing analysis of gossip topologies (lambda_2, imbalance): table + plot"
    )
    topology.add_argument(
        "settings", nargs="*", help="topology=crossover compare=crossover,sgp nodes=16 steps=20 trials=20"
    )
    report = sub.add_parser(
        "report",
        help="tables (md, csv, tex) and plots of an experiment's runs, into results/<experiment>/, "
        "or of one sweep's, into results/sweeps/<parent run id>/ and its parent run",
    )
    report.add_argument("--all", action="store_true", help="every experiment of the store that has finished runs")
    report.add_argument(
        "--from",
        dest="source",
        metavar="FOLDER",
        default="",
        help="redraw a results/<experiment>/ report from its kept run data (runs.json, histories.csv), "
        "no MLflow store; out=<root> writes <root>/<experiment>/",
    )
    report.add_argument(
        "settings",
        nargs="*",
        help="experiment=<name> | sweep=<parent run id>|last [tracking.uri=sqlite:///...] [out=<folder>]",
    )
    runs = sub.add_parser(
        "runs", help="run tools: `runs reap` closes lost runs (RUNNING, their SLURM job or driver gone) as FAILED"
    )
    runs.add_argument("action", choices=["reap"])
    runs.add_argument("--dry-run", action="store_true", help="list the lost runs, close nothing")
    runs.add_argument("settings", nargs="*", help="[experiment=<name>] [tracking.uri=sqlite:///...]")
    calibrate = sub.add_parser(
        "calibrate",
        help="measure this cluster's links (alpha, beta) and write a network preset for network.mode=simulate",
        description="Measure latency and bandwidth between ranks of one host and of different hosts, and write "
        "configs/network/<name>.yaml. Inside an srun step every task is a rank (slurm/calibrate.sbatch); "
        "--slurm-nodes N submits that step; otherwise --ranks processes of this machine.",
    )
    calibrate.add_argument(
        "--name", default="calibrated", help="the preset's name: network=<name> (default calibrated)"
    )
    calibrate.add_argument(
        "--out", default="", help="write the preset to this path instead of configs/network/<name>.yaml"
    )
    calibrate.add_argument("--force", action="store_true", help="replace an existing preset")
    calibrate.add_argument("--ranks", type=int, default=2, help="outside SLURM: processes on this machine (default 2)")
    calibrate.add_argument(
        "--slurm-nodes",
        type=int,
        default=None,
        help="submit the measurement as a SLURM job on this many hosts (1 or more)",
    )
    calibrate.add_argument(
        "--tasks-per-host",
        type=int,
        default=2,
        help="with --slurm-nodes: ranks per host (default 2: intra-host links too)",
    )
    calibrate.add_argument("--max-mib", type=int, default=16, help="largest message, MiB (default 16)")
    calibrate.add_argument("--repeats", type=int, default=5, help="timed messages per size and pair (default 5)")
    doctor = sub.add_parser(
        "doctor",
        help="what this node has for a cluster job: torch/CUDA/cuDNN/NCCL, driver, GPUs, network, SLURM (1 s)",
        description="One table about this node (torch and its CUDA, cuDNN and NCCL; the NVIDIA driver and whether it runs "
        "the torch build's CUDA; the GPUs torch sees; the interface gloo and NCCL would use; the SLURM "
        "partitions' GPUs) and verdict lines. Exit 1 where a GPU is here that torch cannot use. Run it on a "
        "login node and on a compute node (srun ... dlcomm doctor).",
    )
    doctor.add_argument(
        "--towards",
        default="",
        metavar="HOST",
        help="rank 0's host: the interface is the route towards it (default MASTER_ADDR, else the default route)",
    )
    profile = sub.add_parser(
        "profile",
        help="the compute profile of a run's config (one replica stepped alone): what simulated clocks charge",
        description="Step one replica of the run's model, optimizer, batch, micro-batches and precision alone on this "
        "machine (or read it from results/profiles/, where it is cached) and print its forward, backward and "
        "optimizer times: what network.compute=profile charges every rank's simulated clock.",
    )
    profile.add_argument("--out", default="", help="also write the profile (JSON) here: network.compute_profile=<it>")
    profile.add_argument(
        "--fresh", action="store_true", help="measure again (and cache that) instead of reading the cache"
    )
    profile.add_argument("overrides", nargs="*", help="the run's overrides, e.g. model=resnet50 train.batch_size=32")
    show = sub.add_parser("config", help="print the composed configuration for the given overrides")
    show.add_argument(
        "--explain",
        metavar="GROUP",
        default=None,
        help="instead: every knob of GROUP (algo, train, network, launcher, model, ...) with its type, "
        "value, default and meaning, e.g. dlcomm config --explain algo algo=crossover",
    )
    show.add_argument("overrides", nargs="*")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The ``dlcomm`` command (``argv`` None: this process's arguments) or a call of it with ``argv``
    from inside another program; the exit code."""
    own_process = argv is None  # the `dlcomm` command itself, not a caller inside its own program
    if own_process:  # a closed terminal, a full disk or a closed stdout never fails a run (dlcomm.streams)
        forgive_streams()
    arguments = list(sys.argv[1:] if argv is None else argv)
    secrets.remember(" ".join(arguments))  # a tracking URI's password is masked in every line from here on
    secrets.remember_environment()
    code = _main(arguments, own_process)
    threads = sys.modules.get("dlcomm.launch.threads")
    if own_process and (INTERRUPTS.received is not None or (threads is not None and threads.RANKS_ABORTED)):
        _end_now(code)
    return code


def _end_now(code: int) -> None:
    """End the process with ``code`` after Python's own exit handlers, skipping the native
    teardown that follows them. A signal that cut an import of torch short, or rank threads
    stopped mid-operation, leave native state whose destructors abort the process ("terminate
    called without an active exception", exit 134), and CPython turns an exit after a
    KeyboardInterrupt that left code run through ``PyRun_*`` (C extensions do that while imported)
    into death by SIGINT (-2): the run is recorded and the code decided, so neither may change it."""
    import atexit

    sys.stdout.flush()
    sys.stderr.flush()
    atexit._run_exitfuncs()  # multiprocessing's finalizers (no leaked semaphores), MLflow's, tqdm's
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def parse(argv: list[str]) -> argparse.Namespace:
    """The command line, a subcommand's options before or after its settings alike
    (``runs reap --dry-run tracking.uri=...`` as ``runs --dry-run reap tracking.uri=...``): argparse
    stops filling a positional list at the first option, so the settings after it are added here."""
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    listed = next((name for name in ("overrides", "settings") if hasattr(args, name)), None)
    if extra and listed and not any(token.startswith("-") for token in extra):
        setattr(args, listed, [*getattr(args, listed), *extra])
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def _main(argv: list[str], own_process: bool) -> int:
    # -m may sit anywhere among the overrides (argparse would bind it before them only)
    multirun = any(token in ("-m", "--multirun") for token in argv[1:])
    args = parse(argv[:1] + [token for token in argv[1:] if token not in ("-m", "--multirun")])
    if hasattr(args, "multirun"):
        args.multirun = multirun
    if args.command is None:
        _parser().print_help()
        return EXIT_USAGE
    os.environ.setdefault(
        "MLFLOW_LOGGING_LEVEL", "WARNING"
    )  # no "Creating initial MLflow database tables" on the terminal
    if args.command == "train":
        INTERRUPTS.install()  # SIGTERM stops the work like Ctrl-C; held while runs are opened and closed
        # composing and checking take seconds (imports): say at once what is going on, and again while it lasts
        what = "the sweep" if args.multirun else "the run"
        progress.begin().stage(f"checking {what} ({' '.join(args.overrides) or 'defaults'})")
    try:
        if hasattr(args, "overrides"):
            from dlcomm.compose import check_overrides

            check_overrides(args.overrides)
        if args.command == "config":
            return _show_config(args.overrides, args.explain)
        if args.command == "sweep":
            return _export_sweep(args.overrides)
        if args.command == "topology":
            return _topology(args.settings)
        if args.command == "report":
            return _report(args.settings, args.all, args.source)
        if args.command == "runs":
            return _runs(args.settings, args.dry_run)
        if args.command == "calibrate":
            return _calibrate(args)
        if args.command == "profile":
            return _profile(args.overrides, args.out, args.fresh)
        if args.command == "doctor":
            from dlcomm.doctor import doctor

            return doctor(args.towards)
        if args.multirun:
            from dlcomm.run import run_sweep

            return run_sweep(args.overrides)
        return _train(args.overrides)
    except UserError as error:
        progress.end()
        print(f"dlcomm: error: {secrets.mask(str(error))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        progress.end()
        print("dlcomm: interrupted", file=sys.stderr)
        return 130
    except Exception:
        if INTERRUPTS.received is None:
            raise
        # the interrupt hit a library mid-import and was swallowed there (a bare `except:`), leaving
        # it half-imported: what failed next is its consequence, not a separate error
        print("dlcomm: interrupted", file=sys.stderr)
        return 130
    finally:
        progress.end()
        if own_process:
            INTERRUPTS.ignore()  # the exit code is decided: a signal from here to the exit changes nothing
        else:
            INTERRUPTS.uninstall()  # called inside another program (the tests): its handlers back


def _calibrate(args: argparse.Namespace) -> int:
    from dlcomm.calibrate import calibrate

    forwarded = ["--name", args.name, "--max-mib", str(args.max_mib), "--repeats", str(args.repeats)]
    forwarded += (["--out", str(Path(args.out).resolve())] if args.out else []) + (["--force"] if args.force else [])
    return calibrate(
        args.name,
        args.out,
        args.ranks,
        args.max_mib,
        args.repeats,
        args.slurm_nodes,
        args.tasks_per_host,
        args.force,
        forwarded,
    )


def _profile(overrides: list[str], out: str, fresh: bool) -> int:
    """Print (and with ``out`` write) the compute profile of the run ``overrides`` describe,
    checked first as ``dlcomm train`` checks it."""
    import torch

    from dlcomm.compose import compose
    from dlcomm.data import build_dataset
    from dlcomm.launch.gpus import trains_on_cuda
    from dlcomm.paths import check_output_file, check_shape, profiles_dir
    from dlcomm.run import check_runnable
    from dlcomm.train.profile import cached_profile, workload_name, write_atomically

    cfg = compose(overrides)
    # what train refuses (a model the data cannot feed, a damaged data set) in one line; not the
    # launcher's checks: one replica steps here, nothing is launched (a SLURM preset on a GPU node)
    check_runnable(cfg, launcher=False)
    check_shape(profiles_dir(), True, "the compute profiles")  # the cache it writes: a file there is one line
    target = check_output_file(Path(out), f"--out {out}", "pass --out a new file, or one to replace") if out else None
    device = torch.device("cuda", 0) if trains_on_cuda(cfg.train) else torch.device("cpu")
    data = build_dataset(cfg.dataset)
    how = "one thread, timed by its own CPU time" if device.type == "cpu" else "timed by the synchronized wall clock"
    progress.stage(f"profiling one replica of {workload_name(cfg)} alone on {device} ({how})")
    profile = cached_profile(
        cfg, data, device, profiles_dir(), lambda what: progress.stage(f"profiling {workload_name(cfg)}: {what}"), fresh
    )
    progress.end()
    print(f"compute profile: {profile.provenance()}")
    print(f"  {profile.describe()}")
    if target is not None:
        write_atomically(target, profile.to_json(with_origin=False))
        print(f"written to {out}: pass network.compute_profile={out}")
    return 0


def _show_config(overrides: list[str], explain: str | None = None) -> int:
    from omegaconf import OmegaConf

    from dlcomm.compose import compose
    from dlcomm.paths import home_setting
    from dlcomm.tracking.mlflow_run import resolve_tracking_uri

    cfg = compose(overrides)
    if explain is not None:  # given, even empty: an empty section is refused, not the whole configuration shown
        from dlcomm.config.explain import explain as explain_group

        print(explain_group(cfg, explain))
        return 0
    print(OmegaConf.to_yaml(OmegaConf.structured(cfg)), end="")
    if not cfg.tracking.uri:  # '' is the default store: say which one it is from here
        print(f"# tracking.uri '' is the default store: {resolve_tracking_uri('')} (results/ under {home_setting()})")
    return 0


def _topology(arguments: list[str]) -> int:
    from dlcomm.paths import check_writable, home_setting, results_dir
    from dlcomm.topology.analysis import analyse, explain, parse_arguments, write

    settings = parse_arguments(arguments)
    check_writable(
        results_dir() / "topology",
        home_setting(),
        "set DLCOMM_HOME to a folder you can write (results go to its results/)",
    )
    table = analyse(settings)
    print(explain(table, settings))
    print(table.to_string(index=False, float_format=lambda value: f"{value:.4g}"))
    csv, png = write(table, settings, results_dir() / "topology")
    print(f"wrote {csv} and {png}")
    return 0


def _report(settings: list[str], every: bool, source: str = "") -> int:
    from dlcomm.report.build import run_report

    for line in run_report(settings, every, source):
        print(line)
    return 0


def _runs(settings: list[str], dry_run: bool) -> int:
    from dlcomm.runs.reap import reap

    for line in reap(settings, dry_run):
        print(line)
    return 0


def _export_sweep(overrides: list[str]) -> int:
    """Print the sweep's elements, one per line, after checking every one's settings as
    ``dlcomm train -m`` would before it runs anything (composition, ranges, the model against the
    data's shape, the plan, what torch refuses, the launcher's settings); not the data's files, the
    store or the cluster, which the job checks where it runs."""
    from dlcomm.checked import remembering
    from dlcomm.run import check_sweep
    from dlcomm.secrets import credentials
    from dlcomm.sweep import export_lines

    holding = [item.lstrip("+~").partition("=")[0] for item in overrides if credentials(item)]
    if holding:  # the lines would be masked (useless) on a terminal, or hold it in a file anyone may read
        raise UserError(
            f"sweep export: {holding[0]} holds a credential (a password or token in a URI), which the exported lines "
            "would write into the file the job reads: pass the URI without it and give it to the job's environment "
            "(MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, or MLFLOW_TRACKING_TOKEN)"
        )
    with remembering():  # each element through every check once; what differs between them once per distinct value
        check_sweep(overrides, data_here=False)
    print("\n".join(export_lines(overrides)))
    return 0


def _train(overrides: list[str]) -> int:
    from dlcomm.run import launch, prepare_run

    return launch(prepare_run(overrides))


if __name__ == "__main__":
    sys.exit(main())
