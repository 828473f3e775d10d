"""Typed schemas of every configuration group, registered in Hydra's ConfigStore.

Each YAML file under ``configs/<group>/`` lists one of these schemas first in its defaults,
so Hydra checks types and rejects unknown keys while composing. Range checks that types
cannot express live in :mod:`dlcomm.config.validate`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING


@dataclass
class TrainConfig:
    epochs: int = 2
    max_steps: int = -1  # total optimizer steps after which training stops; -1: no cap
    batch_size: int = 64  # per worker and micro-batch
    comm_interval: int = 1  # micro-batches accumulated per optimizer step and communication round
    eval_every: int = 1  # evaluate every N epochs; the last epoch is always evaluated
    eval_batch_size: int = 256
    eval_size: int = 0  # evaluate on the first N test images; 0: the whole test set
    label_smoothing: float = 0.0
    amp: bool = False  # mixed precision: autocast forward, see dlcomm.train.precision
    amp_dtype: str = "auto"  # auto (bf16 on CPU, fp16 with loss scaling on CUDA) | bf16 | fp16
    device: str = "cpu"  # cpu | cuda | auto (cuda when available)
    threads_per_rank: int = 0  # torch intra-op threads per rank; 0: cores // local ranks
    time_budget_s: float = 0.0  # stop once any worker's training clock (simulated under network.mode=simulate, else wall) reaches it; 0: off
    eval_every_s: float = 0.0  # also evaluate every this many seconds of that clock (accuracy against time); 0: off
    target_acc: float = 0.0  # time to accuracy: first evaluation whose mean test accuracy reaches this (0-1); 0: off
    save_model: bool = False  # write each rank's final state_dict into the run directory


@dataclass
class ModelConfig:
    name: str = MISSING
    cifar_stem: bool = False  # ResNets: 3x3 stride-1 first conv and no max-pool (32x32 inputs)
    hidden: List[int] = field(default_factory=lambda: [512, 256])  # MLP hidden widths
    dropout: float = 0.0
    width: float = 1.0  # nin: multiplier of every hidden width (1.0: the paper's)
    # vit_s / vit_b (timm VisionTransformer); configs/model/vit_*.yaml set the paper's Table II sizes
    embed_dim: int = 384  # token width D
    depth: int = 12  # transformer blocks
    num_heads: int = 12  # attention heads (embed_dim must be a multiple)
    patch_size: int = 16  # p x p patches; sides not a multiple of p are zero-padded up to one
    mlp_ratio: float = 4.0  # block MLP hidden width = int(embed_dim * mlp_ratio)
    # rnn / lstm / gru over image rows
    hidden_size: int = 128  # units of the recurrent layer
    # acgan (task=gan)
    latent_dim: int = 128  # the generator's noise dimension


@dataclass
class DatasetConfig:
    name: str = MISSING
    root: str = ""
    augment: bool = False  # random crop + horizontal flip (CIFAR), random resized crop + flip (folders)
    # synthetic only
    shape: List[int] = field(default_factory=lambda: [1, 28, 28])
    num_classes: int = 10
    train_size: int = 4096
    test_size: int = 1024
    # imagefolder only
    image_size: int = 224
    train_dir: str = "train"
    val_dir: str = "val"
    loader_workers: int = 2


@dataclass
class OptimConfig:
    name: str = MISSING  # sgd | adam | adamw | adabelief | angulargrad | lars
    lr: float = 0.05
    momentum: float = 0.0
    nesterov: bool = False
    weight_decay: float = 0.0
    betas: List[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-8
    schedule: str = "constant"  # constant | cosine | multistep
    milestones: List[int] = field(default_factory=list)  # epochs, for multistep
    gamma: float = 0.1  # multistep decay factor
    warmup_epochs: float = 0.0  # linear warm-up from lr/10... see dlcomm.train.optim
    min_lr: float = 0.0  # cosine floor
    trust_coefficient: float = 0.001  # lars: the layer-wise trust coefficient (the Crossover paper: 0.0025)
    exclude_bias_and_norm: bool = True  # lars: 1-d tensors (biases, norm scales) neither adapted nor decayed
    decoupled_weight_decay: bool = False  # adabelief: AdamW-style decay (x <- x - lr * wd * x) instead of L2 in the gradient
    rectify: bool = False  # adabelief: RAdam's variance rectification
    method: str = "cos"  # angulargrad: cos | tan (the angular coefficient's function)


@dataclass
class TaskConfig:
    """What is trained (dlcomm.tasks): classification, or the GAN (model=acgan)."""

    name: str = "classification"  # classification | gan
    # gan only
    generator_lr: float = 0.0  # the generator's learning rate; 0: optim.lr
    discriminator_lr: float = 0.0  # the discriminator's; 0: optim.lr
    samples_per_class: int = 10  # columns of the logged grid of generated images (one row per class)


@dataclass
class AlgoConfig:
    """Base of every algorithm's own ``Config`` (declared beside the algorithm)."""

    name: str = MISSING


@dataclass
class LinkConfig:
    """One link class: ``latency_ms`` per message, ``bandwidth_gbps`` in Gb/s (10^9 bit/s)."""

    latency_ms: float = 0.05
    bandwidth_gbps: float = 10.0


@dataclass
class NetworkConfig:
    """A modelled network (see dlcomm.comm.network): link classes, per-worker bandwidth, mode."""

    name: str = "off"
    mode: str = "off"  # off (real time) | emulate (sleep to the modelled time) | simulate (virtual clocks)
    # between ranks of one node: shared memory / NVLink class
    intra: LinkConfig = field(default_factory=lambda: LinkConfig(latency_ms=0.002, bandwidth_gbps=800.0))
    inter: LinkConfig = field(default_factory=LinkConfig)  # between nodes; each worker's own link
    wide_workers: int = 0  # ranks 0 .. wide_workers-1 have wide_bandwidth_gbps on their inter-node link
    wide_bandwidth_gbps: float = 10.0
    # one Gb/s value per rank for its inter-node link (wins over the above); [] = no per-rank values
    worker_bandwidth_gbps: List[float] = field(default_factory=list)


@dataclass
class LauncherConfig:
    name: str = "local"
    backend: str = "auto"  # auto | gloo | nccl
    teardown_grace_s: float = 5.0  # SIGTERM -> SIGKILL delay when a rank fails


@dataclass
class SlurmLauncherConfig(LauncherConfig):
    """``launcher=slurm``: one SLURM job of ``nodes`` nodes x ``workers_per_node`` tasks, one rank each."""

    name: str = "slurm"
    partition: str = ""  # empty: the cluster's default partition
    account: str = ""
    qos: str = ""
    time_min: int = 60  # wall-clock limit of the job, minutes
    gpus_per_node: int = 0  # 0: no GPU requested (gloo); >0 with train.device=auto|cuda: nccl
    cpus_per_task: int = 1  # also torch's threads per rank unless train.threads_per_rank is set
    mem_gb: float = 0.0  # memory per node; 0: the partition's default
    constraint: str = ""
    array_parallelism: int = 16  # sweeps: at most this many array elements at once
    setup: List[str] = field(default_factory=list)  # shell lines run before the job (module load ..., source venv)
    sbatch_args: Dict[str, str] = field(default_factory=dict)  # extra #SBATCH key=value pairs
    wait: bool = False  # block until the job ends, with progress, instead of returning at once
    max_requeue: int = 3  # preempted or timed out: checkpoint and requeue up to this many times (0: never)
    signal_delay_s: int = 90  # SLURM's warning signal (USR2) this long before the time limit
    check_every: int = 10  # iterations between the ranks' checks for the warning signal


@dataclass
class TrackingConfig:
    uri: str = ""  # empty: sqlite:///<repo>/results/mlflow.db
    experiment: str = "dlcomm"
    run_name: str = ""


@dataclass
class ReportConfig:
    """How ``dlcomm report`` reads this experiment's runs (changes nothing in training)."""

    # The method speedups and MA-acceleration are measured against: an algorithm name, or
    # words that all appear in a method's label ("gossip_pull overlap=none").
    baseline: str = "allreduce"


@dataclass
class DebugConfig:
    """Fault injection for tests of the launcher: rank ``fail_rank`` fails at ``fail_step`` (a
    service rank, which has no steps: is killed ``fail_step`` seconds after it starts)."""

    fail_rank: int = -1
    fail_step: int = -1
    fail_mode: str = "raise"  # raise: an exception | kill: SIGKILL to itself


@dataclass
class RunConfig:
    nodes: int = 4
    workers_per_node: int = 1
    seed: int = 0
    algo: Any = MISSING
    task: TaskConfig = MISSING
    model: ModelConfig = MISSING
    dataset: DatasetConfig = MISSING
    optim: OptimConfig = MISSING
    network: NetworkConfig = MISSING
    launcher: LauncherConfig = MISSING
    train: TrainConfig = field(default_factory=TrainConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    report: ReportConfig = field(default_factory=ReportConfig)
    debug: DebugConfig = field(default_factory=DebugConfig)


def register_schemas() -> None:
    """Put every schema in the ConfigStore under the names the YAML defaults lists use."""
    cs = ConfigStore.instance()
    cs.store(name="run_schema", node=RunConfig)
    cs.store(group="task", name="task_schema", node=TaskConfig)
    cs.store(group="model", name="model_schema", node=ModelConfig)
    cs.store(group="dataset", name="dataset_schema", node=DatasetConfig)
    cs.store(group="optim", name="optim_schema", node=OptimConfig)
    cs.store(group="network", name="network_schema", node=NetworkConfig)
    cs.store(group="launcher", name="launcher_schema", node=LauncherConfig)
    cs.store(group="launcher", name="slurm_launcher_schema", node=SlurmLauncherConfig)
    from dlcomm.algorithms.registry import all_algorithms

    for name, algorithm in all_algorithms().items():
        cs.store(group="algo", name=f"{name}_schema", node=algorithm.Config)
