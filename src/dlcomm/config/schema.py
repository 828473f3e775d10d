"""The run's schema (:class:`RunConfig`) and every group's base, registered in Hydra's ConfigStore.

Each group's base holds the choice (``name``) and the keys all its choices share; a choice's own
``Config`` subclasses it beside the choice's class (``algorithms/<name>.py``, ``compress/``,
``models/``, ``data/``, ``train/optim.py``, ``tasks/``, ``launch/threads.py``), so a
choice has only its own knobs. Here too: the sections every run has (train, tracking, report,
debug, network) and the process launchers' family (:class:`ProcessLauncherConfig`,
:class:`SlurmLauncherConfig`, :class:`SrunLauncherConfig`), which the rank's program and
``launch/gpus.py`` read as well as their launchers. :data:`SCHEMAS` names the schemas a YAML
file may list first in its defaults; :mod:`dlcomm.catalog` tells which choice has which knob. Every number, string, list and
mapping field declares the values it takes with :func:`domain` (checked while composing,
:func:`dlcomm.config.validate.check_values`); the rules across keys are in
:func:`dlcomm.config.validate.validate_run`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, List, Optional, Tuple

from omegaconf import MISSING

from dlcomm.groups import RECORD, Group, records

SEED_MAX = 2**32 - 1  # a rank seeds torch with seed * 100_003 + 1 + rank, which must stay below 2**64


def domain(
    *,
    low: Any = None,
    above: Any = None,
    high: Any = None,
    below: Any = None,
    length: Optional[int] = None,
    one_of: Optional[Tuple[Any, ...]] = None,
    pattern: Optional[str] = None,
    max_chars: Optional[int] = None,
    anything: Optional[str] = None,
    means: str = "",
    doc: str = "",
) -> Dict[str, Any]:
    """Metadata declaring the values a field takes, checked for every run and every element of a
    sweep while composing (:func:`dlcomm.config.validate.check_values`), before anything runs or
    is recorded. For a number (each element, for a list): ``low <= value <= high``, ``value >
    above`` and ``value < below``, and ``value in one_of`` where only some values of a range are
    valid (the refusal lists the set: ``must be 4 or 8``, never ``from 4 to 8``); for a list
    ``len(value) == length``; for a string: ``value in one_of``, ``value``
    matching ``pattern`` whole (:func:`re.fullmatch`) and at most ``max_chars`` characters.
    ``anything`` says why every value of the type is fine (a free label, or checked where it is
    used, naming where). ``means`` is the field's own words, put before the rule in the refusal
    (``train.batch_size=0 is invalid: the per-worker batch must be 1 or more, e.g. 64``) and first
    in ``dlcomm config --explain``'s line, ``doc`` what else the knob is (:func:`doc`). Every float
    is also checked finite and every integer to fit 64 bits, declared or not; ``tests/test_domains.py``
    walks every schema and fails for a number, string, list or mapping field with no domain."""
    declared = {
        "low": low,
        "above": above,
        "high": high,
        "below": below,
        "length": length,
        "one_of": one_of,
        "pattern": pattern,
        "max_chars": max_chars,
        "anything": anything,
    }
    if all(value is None for value in declared.values()):
        raise ValueError("domain() needs a rule or anything='why every value is fine'")
    return {"limits": {**declared, "means": means}, **({"doc": doc} if doc else {})}


def doc(text: str, metadata: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """``metadata`` (a :func:`domain`'s, a :func:`computes`' or none) with the knob's own words,
    written once, in its field: what ``dlcomm config --explain`` prints for it after its
    ``means`` (the phrase a refusal puts before its rule, :func:`domain`), or alone for a knob
    without one (:func:`meaning`). Say what ``means`` does not. Nothing reads a comment beside a
    field, so none describes a knob (``tests/test_config_defaults.py`` refuses one)."""
    return {**(metadata or {}), "doc": text}


def chosen_from(record: Group, text: str = "") -> Any:
    """A :class:`RunConfig` field that is a config group whose choices are classes: MISSING until
    a defaults list or an override picks a choice, typed by the group's schema base, its metadata
    holding the group's ``record`` (:func:`dlcomm.groups.records` reads it into :data:`GROUPS`)
    and ``text`` (:func:`doc`). Adding such a group is this one field."""
    return field(default=MISSING, metadata=doc(text, {RECORD: record}) if text else {RECORD: record})


def meaning(item: "dataclasses.Field[Any]") -> Tuple[str, str]:
    """``(means, doc)`` of a schema field, from its metadata alone (:func:`domain`, :func:`doc`)."""
    limits = item.metadata.get("limits") or {}
    return str(limits.get("means") or ""), str(item.metadata.get("doc") or "")


#: Field metadata key of a launcher knob that changes the run's numbers (:func:`computes`).
COMPUTES = "computes"


def computes(metadata: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """``metadata`` (a :func:`domain`'s, or none) marking a launcher knob that changes what the run
    computes: the process group's rules (gloo's or NCCL's reductions differ in their last digits),
    the device, the compute scheduling, the threads a rank computes with. The configuration hash
    (:func:`dlcomm.spec.computed_config`) holds these and no other ``launcher`` key, so a resume
    that changed one is refused (:func:`dlcomm.launch.srun.job_run`); where the job runs, what it is
    charged to and how long it may take (partition, account, qos, time_min, ...) are not marked."""
    return {**(metadata or {}), COMPUTES: True}


class Choice(str, Enum):
    """A knob with a closed set of values. OmegaConf refuses any other value while composing
    (:func:`dlcomm.compose.compose` words it as ``key=value is invalid: use a, b or c``). A member
    is its value as a string (``Device.cuda == "cuda"``, ``f"{Device.cuda}"`` is ``cuda``), so the
    code compares with plain strings and the logged params are the words the user typed."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)

    @classmethod
    def words(cls) -> List[str]:
        return [member.value for member in cls]


class Device(Choice):
    """Where a rank computes: ``auto`` takes cuda when every process of the machine has a GPU."""

    cpu = "cpu"
    cuda = "cuda"
    auto = "auto"


class AmpDtype(Choice):
    """Mixed precision's type: ``auto`` is bf16 on CPU, fp16 with loss scaling on CUDA."""

    auto = "auto"
    bf16 = "bf16"
    fp16 = "fp16"


class Schedule(Choice):
    """The learning rate's schedule over the run (:func:`dlcomm.train.optim.lr_factor`)."""

    constant = "constant"
    cosine = "cosine"
    multistep = "multistep"


class NetworkMode(Choice):
    """off: real time only | emulate: sleep to the modelled time | simulate: virtual clocks."""

    off = "off"
    emulate = "emulate"
    simulate = "simulate"


class ComputeSource(Choice):
    """Where a simulated rank's compute time comes from (docs/network.md)."""

    profile = "profile"
    measured = "measured"


class Collectives(Choice):
    """How collectives are charged: as NCCL picks its algorithm, or by the textbook closed forms."""

    nccl = "nccl"
    textbook = "textbook"


class Backend(Choice):
    """The process group's backend: ``auto`` is nccl when train.device resolves to cuda, else gloo."""

    auto = "auto"
    gloo = "gloo"
    nccl = "nccl"


# Every experiment name is a folder under results/ (dlcomm report writes results/<experiment>/):
# not blank, no path separator, not starting with a dot ("..", hidden folders), no control character.
EXPERIMENT_PATTERN = r"(?=.*\S)[^./\\\x00-\x1f\x7f][^/\\\x00-\x1f\x7f]*"
ONE_LINE = r"[^\x00-\x1f\x7f]*"  # no control character (newline, tab, NUL, ...): a value that must stay one line
EXPERIMENT_CHARS = 256  # MLflow's SQL store: experiments.name is String(256)
RUN_NAME_CHARS_MAX = 250  # MLflow's SQL store: runs.name is String(250)
SYNTHETIC_MAX = 2**31  # dlcomm.data.synthetic.MAX_SIZE: sample i of a split draws from seed split * 2**31 + i

# Domains that a knob and its redeclarations in subclasses share.
LR = domain(above=0.0, means="the learning rate")
WEIGHT_DECAY = domain(low=0.0, means="the weight decay")
WARMUP_EPOCHS = domain(low=0.0, means="the warm-up in epochs (0: none)")  # <= train.epochs: validate_run
EPS = domain(low=0.0, means="the denominator's epsilon")  # torch checks it too


@dataclass
class TrainConfig:
    epochs: int = field(default=2, metadata=domain(low=1, means="the number of epochs"))
    max_steps: int = field(
        default=-1,
        metadata=domain(
            low=-1,
            means="the cap on optimizer steps (-1: no cap)",
            doc="training stops after this many optimizer steps",
        ),
    )
    batch_size: int = field(
        default=64,
        metadata=domain(
            low=1, means="the per-worker batch", doc="each micro-batch's (train.comm_interval of them make one step)"
        ),
    )
    comm_interval: int = field(
        default=1,
        metadata=domain(
            low=1,
            means="the micro-batches accumulated per step",
            doc="each step is one optimizer step and one communication round",
        ),
    )
    timing_warmup: int = field(
        default=1,
        metadata=domain(
            low=0,
            means="the first iterations left out of the timing means",
            doc="logged, but start-up skews them; not optim.warmup_epochs",
        ),
    )
    eval_every: int = field(
        default=1,
        metadata=domain(
            low=0, means="the epochs between evaluations (0: only at the end)", doc="the last epoch is always evaluated"
        ),
    )
    eval_batch_size: int = field(default=256, metadata=domain(low=1, means="the evaluation batch"))
    eval_size: int = field(
        default=0,
        metadata=domain(
            low=0, means="the test images evaluated (0: the whole test set)", doc="the first ones of the test set"
        ),
    )
    eval_replicas: int = field(
        default=16,
        metadata=domain(
            low=0,
            means="the replicas test_acc_mean samples (0: every replica)",
            doc="at most N evenly spaced replicas (exact when workers <= N)",
        ),
    )
    label_smoothing: float = field(default=0.0, metadata=domain(low=0.0, below=1.0, means="the label smoothing"))
    amp: bool = field(default=False, metadata=doc("mixed precision: autocast forward, see dlcomm.train.precision"))
    amp_dtype: AmpDtype = field(
        default=AmpDtype.auto, metadata=doc("auto: bf16 on CPU, fp16 with loss scaling on CUDA")
    )
    device: Device = field(
        default=Device.cpu, metadata=doc("auto: cuda when every process of the machine finds a GPU of its own")
    )
    deterministic: bool = field(
        default=False,
        metadata=doc(
            "torch's deterministic algorithms, cuDNN without benchmarking, CUBLAS_WORKSPACE_CONFIG=:4096:8 (dlcomm.train.determinism; what repeats bit for bit: docs/metrics.md)"
        ),
    )
    threads_per_rank: int = field(
        default=0,
        metadata=domain(
            low=0,
            means="the torch threads per rank (0: automatic)",
            doc="torch's intra-op threads; automatic: cores // local ranks",
        ),
    )
    time_budget_s: float = field(
        default=0.0,
        metadata=domain(
            low=0.0,
            means="the training time budget in seconds (0: none)",
            doc="train until any worker's training clock (simulated under network.mode=simulate, else wall) reaches it (epochs then do not end the run; max_steps still does)",
        ),
    )
    eval_every_s: float = field(
        default=0.0,
        metadata=domain(
            low=0.0,
            means="the seconds between evaluations (0: off)",
            doc="also evaluate every this many seconds of that clock (accuracy against time)",
        ),
    )
    target_acc: float = field(
        default=0.0,
        metadata=domain(
            low=0.0,
            high=1.0,
            means="the target accuracy, a fraction (0: off)",
            doc="time to accuracy: the first evaluation whose mean test accuracy reaches it",
        ),
    )
    save_model: bool = field(default=False, metadata=doc("write each rank's final state_dict into the run directory"))


@dataclass
class ModelConfig:
    """The models without knobs but their name: small_cnn (two conv layers and two FC layers, 0.42 M
    parameters on 28x28, no BatchNorm); vgg16, densenet121, shufflenet_v2 (torchvision, randomly
    initialised; input channels and classes follow the dataset).

    Base of every model's schema: the choice, ``model=<name>``, stored from its registered class;
    the families' subclasses are beside their classes in the family modules of :mod:`dlcomm.models`."""

    name: str = MISSING


DATA_ROOT = "a folder, checked before launch by dlcomm.data.check_dataset (it names the missing files or folder)"


@dataclass
class DatasetConfig:
    """Base of every data set's schema: the choice, ``dataset=<name>``, stored from its registered
    source (a preset YAML configs/dataset/<name>.yaml where the choice sets a value, e.g. its root)."""

    name: str = MISSING


@dataclass
class OptimConfig:
    """Base of every optimizer's schema: the choice, its learning rate and weight decay, and the
    learning-rate schedule (dlcomm.train.optim), which every optimizer shares."""

    name: str = MISSING
    lr: float = field(default=MISSING, metadata=doc("applied to the global (all-worker) mean gradient", LR))
    weight_decay: float = field(default=0.0, metadata=doc("L2 (adamw: decoupled)", WEIGHT_DECAY))
    schedule: Schedule = field(
        default=Schedule.constant, metadata=doc("the learning rate over the run (dlcomm.train.optim)")
    )
    milestones: List[int] = field(default_factory=list, metadata=domain(low=0, doc="epochs, for multistep"))
    gamma: float = field(
        default=0.1,
        metadata=domain(above=0.0, means="the multistep decay factor", doc="torch does not check it"),
    )
    warmup_epochs: float = field(default=0.0, metadata=doc("linear, from 0 to lr", WARMUP_EPOCHS))
    min_lr: float = field(default=0.0, metadata=domain(low=0.0, doc="cosine floor"))


@dataclass
class TaskConfig:
    """task=classification (the default, its name here): image classification, cross-entropy on the
    model's logits (dlcomm.tasks.classification).

    Base of every task's schema (dlcomm.tasks): the choice, ``task=<name>``. A task with knobs of
    its own subclasses it beside its class (task=gan: GanTaskConfig)."""

    name: str = "classification"


@dataclass
class CompressConfig:
    """compress=none (the default, its name here): no compression, every algorithm sends its tensors
    as they are.

    Base of every compressor's schema (dlcomm.compress): the choice, ``compress=<name>``, its
    ``Config`` beside its class."""

    name: str = "none"


@dataclass
class AlgoConfig:
    """Base of every algorithm's own ``Config`` (declared beside the algorithm)."""

    name: str = MISSING


BANDWIDTH = domain(above=0.0, means="a bandwidth in Gb/s")


@dataclass
class LinkConfig:
    """One link class: ``latency_ms`` per message, ``bandwidth_gbps`` in Gb/s (10^9 bit/s)."""

    latency_ms: float = field(
        default=0.05,
        metadata=domain(low=0.0, means="a link's latency in milliseconds", doc="one-way, per message; 0: none"),
    )
    bandwidth_gbps: float = field(default=10.0, metadata=doc("the link's; 1 Gb/s is 10^9 bit/s", BANDWIDTH))


@dataclass
class NetworkConfig:
    """A modelled network (see dlcomm.comm.network): link classes, per-worker bandwidth, mode."""

    name: str = "off"
    mode: NetworkMode = field(
        default=NetworkMode.off,
        metadata=doc("off (real time) | emulate (sleep to the modelled time) | simulate (virtual clocks)"),
    )
    intra: LinkConfig = field(
        default_factory=lambda: LinkConfig(latency_ms=0.002, bandwidth_gbps=800.0),
        metadata=doc("between ranks of one node: shared memory / NVLink class"),
    )
    inter: LinkConfig = field(default_factory=LinkConfig, metadata=doc("between nodes; each worker's own link"))
    wide_workers: int = field(
        default=0,
        metadata=domain(
            low=0,
            doc="ranks 0 .. wide_workers-1 have wide_bandwidth_gbps on their inter-node link (at most the world: validate_network)",
        ),
    )
    wide_bandwidth_gbps: float = field(
        default=10.0,
        metadata=doc("the wide_workers' inter-node link's (unused while wide_workers is 0)", BANDWIDTH),
    )
    worker_bandwidth_gbps: List[float] = field(
        default_factory=list,
        metadata=doc("one per rank, for its inter-node link (wins over the above); []: no per-rank values", BANDWIDTH),
    )
    compute_scale: float = field(
        default=1.0,
        metadata=domain(
            above=0.0,
            means="the factor on compute time",
            doc="simulate: the modelled devices' compute time per rank is the profiled (or measured) one times this (0.05: devices 20x faster than what runs the job; 1: as profiled)",
        ),
    )
    compute: ComputeSource = field(
        default=ComputeSource.profile,
        metadata=doc(
            "simulate: where a rank's compute time comes from (docs/network.md, \"Compute on the simulated clock\"). profile: one replica stepped alone before training, the same charge for every rank and run (deterministic); measured: each rank's own time as it runs (load, launcher and rank count show)"
        ),
    )
    compute_profile: str = field(
        default="",
        metadata=domain(
            anything="a file or a shipped profile's name, which validate_network checks exists",
            doc='a profile file (`dlcomm profile --out F`) or a shipped one (<device>/<workload>, listed below); "": profiled before training, cached',
        ),
    )
    compute_ms: float = field(
        default=0.0, metadata=domain(low=0.0, doc="> 0: a step's compute outright (e.g. a paper's GPU step)")
    )
    compute_jitter: float = field(
        default=0.0,
        metadata=domain(
            low=0.0,
            high=4.0,
            doc="stragglers (simulate): a lognormal factor of mean 1 and this coefficient of variation on every rank's step, drawn from (seed, rank, step); 0: every rank computes for the same time",
        ),
    )
    rank_compute_scale: List[float] = field(
        default_factory=list,
        metadata=domain(above=0.0, means="a rank's factor on compute time", doc="one per rank; []: all 1"),
    )
    straggler_prob: float = field(
        default=0.0, metadata=domain(low=0.0, high=1.0, doc="chance a rank's step is slowed ...")
    )
    straggler_slowdown: float = field(default=1.0, metadata=domain(low=1.0, doc="... by this factor"))
    collectives: Collectives = field(
        default=Collectives.nccl,
        metadata=doc(
            "how collectives are charged: nccl (the algorithm NCCL picks for the size: ring or tree allreduce, pipelined chain for reduce and broadcast, plus a launch overhead) | textbook (closed forms, docs/network.md)"
        ),
    )
    launch_us: float = field(
        default=0.0, metadata=domain(low=0.0, doc="per collective under collectives=nccl; see docs")
    )


@dataclass
class LauncherConfig:
    """Base of every launcher's schema: the choice, ``launcher=<name>``, its ``Config`` beside its
    class (:mod:`dlcomm.launch`); the knobs every launcher has."""

    name: str = "local"
    backend: Backend = field(
        default=Backend.auto,
        metadata=doc(
            "process group: auto (nccl when train.device resolves to cuda, else gloo) | gloo | nccl", computes()
        ),
    )
    teardown_grace_s: float = field(
        default=5.0,
        metadata=domain(
            low=0.0, doc="after a rank fails: seconds the others get to stop (processes: SIGTERM, SIGKILL)"
        ),
    )


@dataclass
class ProcessLauncherConfig(LauncherConfig):
    """The launchers whose ranks are processes joined by a gloo or NCCL process group (local, slurm,
    srun); ``launcher=local``: every rank is a process on this machine (gloo on CPU, nccl with one GPU
    per rank)."""

    comm_timeout_s: float = field(
        default=300.0,
        metadata=domain(
            low=1.0, doc="seconds a collective or message may wait before the run fails (a lost host or link)"
        ),
    )


@dataclass
class SlurmLauncherConfig(ProcessLauncherConfig):
    """``launcher=slurm``: one SLURM job per run, submitted with submitit: ``nodes`` nodes x
    ``workers_per_node`` tasks, one rank each (nccl when GPUs are given, gloo otherwise). ``dlcomm
    train launcher=slurm`` prints the job id and its log paths and returns at once;
    ``launcher.wait=true`` blocks until the job ends. Try it on this machine first:
    ``scripts/slurm_local.sh up``."""

    name: str = "slurm"
    partition: str = field(
        default="",
        metadata=domain(
            pattern=ONE_LINE,
            means="the partition (one #SBATCH line, no control character)",
            doc="sbatch's --partition; empty: the cluster's default partition",
        ),
    )
    account: str = field(
        default="",
        metadata=domain(
            pattern=ONE_LINE,
            means="the account (one #SBATCH line, no control character)",
            doc="sbatch's --account, charged for the job; empty: your default account",
        ),
    )
    qos: str = field(
        default="",
        metadata=domain(
            pattern=ONE_LINE,
            means="the quality of service (one #SBATCH line, no control character)",
            doc="sbatch's --qos; empty: the account's or partition's default",
        ),
    )
    time_min: int = field(
        default=60,
        metadata=domain(low=1, means="the job's time limit in minutes", doc="sbatch's --time, wall clock"),
    )
    gpus_per_node: int = field(
        default=0,
        metadata=computes(
            domain(low=0, doc="GPUs per node (--gpus-per-node); 0: none (gloo); >0 with train.device=auto|cuda: nccl")
        ),
    )
    cpus_per_task: int = field(
        default=1,
        metadata=computes(
            domain(
                low=1, doc="cores per rank (--cpus-per-task); its torch threads unless train.threads_per_rank is set"
            )
        ),
    )
    mem_gb: float = field(
        default=0.0, metadata=domain(low=0.0, doc="memory per node (--mem), GiB; 0: the partition's default")
    )
    constraint: str = field(
        default="",
        metadata=domain(
            pattern=ONE_LINE,
            means="the node features (one #SBATCH line, no control character)",
            doc="sbatch's --constraint, what the job's nodes need, e.g. \"v100\"; empty: any node",
        ),
    )
    array_parallelism: int = field(
        default=16, metadata=domain(low=1, doc="sweeps: at most this many array elements running at once")
    )
    setup: List[str] = field(
        default_factory=list,
        metadata=domain(
            anything="the user's own shell lines, written as they are into the job script before the ranks start",
            doc='shell lines the job runs first, e.g. "module load cuda"; []: none',
        ),
    )
    sbatch_args: Dict[str, str] = field(
        default_factory=dict,
        metadata=domain(
            anything="options sbatch itself checks when the job is submitted; its refusal is one line "
            "(dlcomm.launch.slurm.SlurmLauncher.launch)",
            doc="extra #SBATCH options, e.g. {exclude: node12}; {}: none",
        ),
    )
    wait: bool = field(
        default=False,
        metadata=doc("true: block until the job ends, showing its state; false: return once it is submitted"),
    )
    max_requeue: int = field(
        default=3,
        metadata=domain(low=0, doc="preempted or timed out: checkpoint and requeue up to this many times (0: never)"),
    )
    signal_delay_s: int = field(
        default=90,
        metadata=domain(
            low=0,
            doc="seconds before the time limit that SLURM sends its warning signal (USR2); below time_min*60: check_slurm_settings",
        ),
    )
    check_every: int = field(
        default=10,
        metadata=domain(low=1, doc="training iterations between the ranks' checks for SLURM's warning signal (USR2)"),
    )
    ifname: str = field(
        default="",
        metadata=domain(
            anything="checked on each host against its interfaces (dlcomm.launch.netif.choose_interface)",
            doc="network interface between hosts for gloo/nccl (e.g. eth0); empty: the one towards rank 0's host",
        ),
    )


@dataclass
class SrunLauncherConfig(SlurmLauncherConfig):
    """``launcher=srun``: inside a SLURM allocation you made yourself (``sbatch slurm/single.sbatch``,
    ``slurm/array.sbatch``), ``srun dlcomm train launcher=srun ...`` makes every task one rank.
    ``nodes`` and ``workers_per_node`` must match the allocation (the sbatch files pass them from
    SLURM's variables). Rank 0 opens the MLflow run; after a requeue the same run resumes from its
    checkpoint. The knobs are ``launcher=slurm``'s."""

    name: str = "srun"


@dataclass
class TrackingConfig:
    uri: str = field(
        default="",
        metadata=domain(
            anything="checked before anything is recorded (dlcomm.tracking.store.probe)",
            doc="empty: sqlite:///<working directory or $DLCOMM_HOME>/results/mlflow.db",
        ),
    )
    experiment: str = field(
        default="dlcomm",
        metadata=domain(
            pattern=EXPERIMENT_PATTERN,
            max_chars=EXPERIMENT_CHARS,
            means="the experiment's name, also its folder results/<name>/ (not blank, no / or \\, "
            "no leading dot, no control character)",
        ),
    )
    run_name: str = field(
        default="",
        metadata=domain(
            pattern=ONE_LINE,
            max_chars=RUN_NAME_CHARS_MAX,
            means="the run's name (one line, no control character)",
            doc="empty: named from the algorithm, the world, the network and the overrides (dlcomm.spec.RunSpec.run_name)",
        ),
    )
    connect_timeout_s: float = field(
        default=5.0,
        metadata=domain(
            above=0.0,
            means="the store's answer timeout in seconds",
            doc="how long an http(s) store may take to answer before the run is refused",
        ),
    )
    stream_every_s: float = field(
        default=5.0,
        metadata=domain(
            low=0.0,
            means="the seconds between streamed metrics (0: off)",
            doc="rank 0's per-iteration loss and time reach MLflow this often while training",
        ),
    )
    system_metrics_every_s: float = field(
        default=10.0,
        metadata=domain(
            low=0.0,
            means="the seconds between system metric samples (0: off)",
            doc="MLflow's system metrics (CPU, memory, disk, network; GPU where present) of the driver's machine",
        ),
    )


@dataclass
class ReportConfig:
    """How ``dlcomm report`` reads this experiment's runs (changes nothing in training)."""

    baseline: str = field(
        default="allreduce",
        metadata=domain(
            anything="words matched against each setting's methods by dlcomm report "
            "(dlcomm.report.table.summarise); a setting where none matches has no speedup",
            doc='The method speedups and MA-acceleration are measured against: an algorithm name, or words that all appear in a method\'s label ("gossip_pull overlap=none").',
        ),
    )
    method_groups: str = field(
        default="",
        metadata=domain(
            pattern=r"[a-z_ ]*",
            means="config group names, space-separated",
            doc='Config groups whose choice belongs to the method, not the setting ("optim": DeMo with SGD and MuLoCo with Muon compared with AdamW-trained methods in one table); a run whose choice differs from most runs\' is labelled with it ("demo optim=sgd").',
        ),
    )
    traffic: bool = field(
        default=False,
        metadata=doc(
            'Traffic columns beside the clock\'s: MB one worker sent over the run and in its busiest iteration (the peak a link carries at once), and the accuracy-against-MB figure. Always on when compressors are compared (a method label with "+").'
        ),
    )


@dataclass
class DebugConfig:
    """Fault injection for tests of the launcher: rank ``fail_rank`` fails at ``fail_step`` (a
    service rank, which has no steps: is killed ``fail_step`` seconds after it starts)."""

    fail_rank: int = field(default=-1, metadata=domain(low=-1, means="the failing rank (-1: none)"))
    fail_step: int = field(default=-1, metadata=domain(low=-1, means="the step it fails at (-1: never)"))
    fail_mode: str = field(
        default="raise", metadata=domain(one_of=("raise", "kill"), doc="raise: an exception | kill: SIGKILL to itself")
    )


@dataclass
class RunConfig:
    """One run's whole configuration, as ``dlcomm config`` prints it. A section chosen from a
    config group whose choices are classes is declared here once, with its group's record
    (:func:`chosen_from`); ``network`` is a group of YAML presets alone; the rest are fixed
    sections. The default choices are ``configs/config.yaml``'s defaults list (its order is part
    of the composition)."""

    nodes: int = field(default=4, metadata=domain(low=1, means="the number of machines"))
    workers_per_node: int = field(default=1, metadata=domain(low=1, means="each node's number of workers"))
    seed: int = field(default=0, metadata=domain(low=0, high=SEED_MAX))
    algo: AlgoConfig = chosen_from(
        Group(
            entry_points="dlcomm.algorithms",
            base="dlcomm.algorithms.base:Algorithm",
            kind="an algorithm",
            what="algorithm",
            home="dlcomm.algorithms",
        ),
        "the chosen algorithm's own Config (a subclass)",
    )
    task: TaskConfig = chosen_from(
        Group(
            entry_points="dlcomm.tasks", base="dlcomm.tasks.base:Task", kind="a task", what="task", home="dlcomm.tasks"
        )
    )
    model: ModelConfig = chosen_from(
        Group(
            entry_points="dlcomm.models",
            base="dlcomm.models.registry:Model",
            kind="a model",
            what="model",
            home="dlcomm.models",
            family_schema=True,
        )
    )
    dataset: DatasetConfig = chosen_from(
        Group(
            entry_points="dlcomm.datasets",
            base="dlcomm.data.source:DataSource",
            kind="a data source",
            what="data set",
            home="dlcomm.data",
            family_schema=True,
        )
    )
    optim: OptimConfig = chosen_from(
        Group(
            entry_points="dlcomm.optimizers",
            base="dlcomm.train.optim:Optimizer",
            kind="an optimizer",
            what="optimizer",
            home="dlcomm.train.optim",
            family_schema=True,
        )
    )
    network: NetworkConfig = MISSING
    launcher: LauncherConfig = chosen_from(
        Group(
            entry_points="dlcomm.launchers",
            base="dlcomm.launch.base:Launcher",
            kind="a launcher",
            what="launcher",
            home="dlcomm.launch",
            config_optional=True,
            schema_suffix="_launcher_schema",
            schema_per_choice=True,
        )
    )
    compress: CompressConfig = chosen_from(
        Group(
            entry_points="dlcomm.compressors",
            base="dlcomm.compress.base:Compressor",
            kind="a compressor",
            what="compressor",
            home="dlcomm.compress",
        )
    )
    train: TrainConfig = field(default_factory=TrainConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    report: ReportConfig = field(default_factory=ReportConfig)
    debug: DebugConfig = field(default_factory=DebugConfig)


# The config groups whose choices are classes, read from RunConfig's fields (dlcomm.groups): a group is
# its field there, and its Registry, plugins, listings and stored schema names follow from the record.
GROUPS: Dict[str, Group] = records(RunConfig)

# Every schema above under the name the YAML defaults lists use: (group, name, schema); group None
# is the primary config. dlcomm.compose stores them in Hydra's ConfigStore, with the algorithms'.
SCHEMAS: Tuple[Tuple[Optional[str], str, type], ...] = (
    (None, "run_schema", RunConfig),
    ("task", "task_schema", TaskConfig),
    ("model", "model_schema", ModelConfig),
    ("network", "network_schema", NetworkConfig),
    ("launcher", "launcher_schema", LauncherConfig),
    ("launcher", "process_launcher_schema", ProcessLauncherConfig),
    ("launcher", "slurm_launcher_schema", SlurmLauncherConfig),
)
