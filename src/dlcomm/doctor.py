"""``dlcomm doctor``: what a cluster user needs to know about this node before the first job.

One table (torch and its CUDA, cuDNN and NCCL; the NVIDIA driver and whether it runs the torch
build's CUDA; the GPUs torch sees; the network interface gloo and NCCL would use; the SLURM
partitions' GPUs) and verdict lines. It answers in about a second: torch is imported only where a
driver exists (to ask CUDA itself how many GPUs it sees and whether it starts), never mlflow;
without a driver the versions come from torch's ``version.py`` and the wheels it depends on.
Exit 0, or 1 where this node has an NVIDIA driver that torch cannot use.

The driver needed by a CUDA major version is NVIDIA's minor-version-compatibility table (CUDA
Compatibility guide, "CUDA Toolkit and Minimum Required Driver Version"): CUDA 13.x >= 580,
12.x >= 525, 11.x >= 450.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import os
import platform
import re
import shutil
import socket
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from dlcomm.tools import ToolSilent, ask, quoted

MIN_DRIVER = {13: 580, 12: 525, 11: 450}  # CUDA major -> the oldest driver branch that runs it
CUDA12_INDEX = "https://download.pytorch.org/whl/cu126"  # a CUDA 12 build of torch for older drivers
_PROC_VERSION = Path("/proc/driver/nvidia/version")
_TIMEOUT_S = 5.0


@dataclass
class Report:
    rows: list[tuple[str, str]] = field(default_factory=list)
    verdicts: list[str] = field(default_factory=list)
    failed: bool = False  # a GPU is here that torch cannot use

    def row(self, what: str, value: str) -> None:
        self.rows.append((what, value))


# ---- what is installed (without importing torch) ---------------------------------------------


def torch_build() -> tuple[str, str | None] | None:
    """``(torch version, CUDA version of the build or None for a CPU build)`` read from torch's
    ``version.py`` without importing torch; None when torch is not installed."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    values: dict[str, object] = {}
    try:
        tree = ast.parse((Path(next(iter(spec.submodule_search_locations))) / "version.py").read_text())
    except OSError:
        return importlib.metadata.version("torch"), None
    target: ast.expr
    value: ast.expr | None
    for node in tree.body:
        if isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        elif isinstance(node, ast.Assign):
            target, value = node.targets[0], node.value
        else:
            continue
        if isinstance(target, ast.Name) and value is not None:
            try:
                values[target.id] = ast.literal_eval(value)
            except ValueError:
                continue
    return str(values.get("__version__", importlib.metadata.version("torch"))), values.get("cuda")  # type: ignore[return-value]


def wheel_version(prefix: str) -> str | None:
    """The version of the ``prefix*`` wheel torch depends on (``nvidia-cudnn``, ``nvidia-nccl``),
    e.g. ``9.24.0.43 (nvidia-cudnn-cu13)``; None when torch names none (a build that bundles it)."""
    try:
        requirements = importlib.metadata.requires("torch") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for requirement in requirements:
        name = re.split(r"[\s;=<>!~\[]", requirement, maxsplit=1)[0]
        if name.lower().startswith(prefix):
            try:
                return f"{importlib.metadata.version(name)} ({name} wheel)"
            except importlib.metadata.PackageNotFoundError:
                return f"missing: torch needs the {name} wheel"
    return None


@dataclass(frozen=True)
class Driver:
    """The NVIDIA driver as this node shows it: ``version`` when it could be read; ``present`` when
    there is one (its version read, or ``nvidia-smi`` answering 0 in words no version could be read
    from); ``note``: what the tools said beside or instead of a version, a finding to report."""

    version: str | None
    present: bool
    note: str = ""


_VERSION = re.compile(r"[0-9]+(?:\.[0-9]+)+")


def read_driver() -> Driver:
    """The NVIDIA kernel driver (``/proc/driver/nvidia/version``, else ``nvidia-smi``). Whatever
    ``nvidia-smi`` prints (warnings before the version, bytes of no encoding, nothing) becomes a
    :class:`Driver` with a note, never an exception: a doctor must survive the tools it diagnoses."""
    try:
        text = _PROC_VERSION.read_text(errors="replace") if _PROC_VERSION.exists() else ""
    except OSError:
        text = ""
    found = re.search(r"Kernel Module\s+(?:for\s+\S+\s+)?([0-9]+(?:\.[0-9]+)+)", text)
    if found:
        return Driver(found.group(1), True)
    if not shutil.which("nvidia-smi"):
        return Driver(None, False)
    try:
        answer = ask(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], _TIMEOUT_S)
    except ToolSilent as error:
        return Driver(None, False, str(error))
    if answer.returncode != 0:  # e.g. 9: "NVIDIA-SMI has failed because it couldn't communicate with the driver"
        return Driver(None, False, f"nvidia-smi failed (exit {answer.returncode}): {answer.said()}")
    lines = [line.strip() for line in answer.stdout.splitlines() if line.strip()]
    versions = [line for line in lines if _VERSION.fullmatch(line)]  # one per GPU
    others = [quoted(line) for line in lines if not _VERSION.fullmatch(line)]
    if versions:
        return Driver(versions[0], True, f"nvidia-smi also printed {'; '.join(others[:2])}" if others else "")
    return Driver(None, True, f"nvidia-smi printed no driver version: {'; '.join(others[:2]) or 'nothing'}")


def driver_version() -> str | None:
    """The NVIDIA kernel driver's version; None where there is none, or none could be read."""
    return read_driver().version


def _major(version: str) -> int | None:
    """The leading number of a version (``13`` of ``13.0``, ``580`` of ``580.65.06``); None for none."""
    found = re.match(r"\s*([0-9]+)", version)
    return int(found.group(1)) if found else None


def driver_runs(cuda: str, driver: str) -> tuple[bool, int | None]:
    """Whether driver ``driver`` runs a CUDA ``cuda`` build, and the oldest driver branch that does."""
    major, branch = _major(cuda), _major(driver)
    needed = MIN_DRIVER.get(major) if major is not None else None
    if needed is None or branch is None:
        return True, needed
    return branch >= needed, needed


@dataclass
class TorchCuda:
    """What torch itself says about CUDA on this node (torch imported)."""

    available: bool
    count: int
    names: list[str]
    cudnn: str | None
    nccl: str | None
    problem: str  # why CUDA is unavailable, from torch's warning
    import_s: float


def torch_cuda() -> TorchCuda:
    started = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import torch

        available = torch.cuda.is_available()
        count = torch.cuda.device_count() if available else 0
    names = [torch.cuda.get_device_name(i) for i in range(count)]
    cudnn = nccl = None
    if available:
        version = torch.backends.cudnn.version()
        cudnn = None if version is None else f"{version // 10000}.{version // 100 % 100}.{version % 100}"
        try:
            nccl = ".".join(map(str, torch.cuda.nccl.version()))
        except (AttributeError, RuntimeError):
            nccl = None
    cuda_words = [w for w in caught if "CUDA" in str(w.message) or "NVIDIA" in str(w.message)] or caught
    problem = " ".join(str(cuda_words[-1].message).split()) if cuda_words else ""
    return TorchCuda(available, count, names, cudnn, nccl, problem[:300], time.perf_counter() - started)


# ---- network and SLURM ---------------------------------------------------------------------


def network(towards: str, label: str) -> tuple[str, str, str]:
    """(the interfaces gloo and NCCL would use between hosts, this host's IPv4 interfaces, a
    problem or ""), as :func:`dlcomm.launch.netif.choose_interface` decides in a rank: the site's
    ``GLOO_SOCKET_IFNAME`` / ``NCCL_SOCKET_IFNAME`` win; else the interface of the route towards
    rank 0's host (``towards``; ``label`` says so), given to both. With only
    ``GLOO_SOCKET_IFNAME`` set, NCCL picks its own (NCCL's docs: never ``lo`` or ``docker*`` while
    another exists, ``ib*`` first)."""
    from dlcomm.launch.netif import interface_addresses, interface_towards

    addresses = interface_addresses()
    listed = ", ".join(f"{name} {address}" for name, address in sorted(addresses.items())) or "none with IPv4"
    problem = ""
    try:
        chosen = interface_towards(towards)
    except OSError as error:
        chosen, problem = None, f"{label} fails ({error.strerror or error})"
    if chosen is None and not problem:
        problem = f"loopback ({label}): one host only"
    guess = f"{chosen} ({label})" if chosen else f"none: {problem}"
    gloo_env, nccl_env = os.environ.get("GLOO_SOCKET_IFNAME"), os.environ.get("NCCL_SOCKET_IFNAME")
    gloo = f"{gloo_env} (GLOO_SOCKET_IFNAME)" if gloo_env else guess
    nccl = (
        f"{nccl_env} (NCCL_SOCKET_IFNAME)"
        if nccl_env
        else "its own pick (ib* first, not lo/docker*)"
        if gloo_env
        else guess
    )
    value = gloo if gloo == nccl else f"gloo {gloo}; NCCL {nccl}"
    return f"{value}; launcher.ifname=<name> overrides", listed, "" if (gloo_env or nccl_env) else problem


def rendezvous_host(given: str) -> tuple[str, str]:
    """``(host, how the table says it)``: the host whose route counts, as a rank finds it (the
    route towards rank 0's host): ``--towards``, else ``MASTER_ADDR``, else inside a SLURM job its
    first node, else the default route (an address of TEST-NET-1: only the route is looked up,
    nothing is sent)."""
    if given:
        return given, f"the route towards {given}"
    if os.environ.get("MASTER_ADDR"):
        return os.environ["MASTER_ADDR"], f"the route towards MASTER_ADDR={os.environ['MASTER_ADDR']}"
    nodelist = os.environ.get("SLURM_JOB_NODELIST", "")
    if nodelist and shutil.which("scontrol"):
        try:
            answer = ask(["scontrol", "show", "hostnames", nodelist], _TIMEOUT_S)
        except ToolSilent:
            answer = None
        # one host name a line; a warning or undecodable bytes are no host: the default route instead
        hosts = [line.strip() for line in answer.stdout.splitlines()] if answer and answer.returncode == 0 else []
        first = next((host for host in hosts if _HOST.fullmatch(host)), "")
        if first:
            return first, f"the route towards {first}, this job's first node"
    return "192.0.2.1", "the default route"


_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_PARTITION = re.compile(r"[A-Za-z0-9_.-]+\*?")  # sinfo marks the default partition with '*'


def slurm_partitions() -> list[tuple[str, str]] | None:
    """``[(partition, its nodes' GRES, e.g. gpu:4)]`` from ``sinfo``; None without ``sinfo``."""
    if not shutil.which("sinfo"):
        return None
    try:
        answer = ask(["sinfo", "-h", "-o", "%P %G"], _TIMEOUT_S)
    except ToolSilent as error:
        return [("?", str(error))]
    if answer.returncode != 0:
        return [("?", f"sinfo failed (exit {answer.returncode}): {answer.said()}")]
    found: dict[str, list[str]] = {}
    unreadable = []
    for line in answer.stdout.splitlines():
        parts = line.split(None, 1)
        if parts and not (_readable(line) and _PARTITION.fullmatch(parts[0])):  # quoted, never suggested
            unreadable.append(quoted(line))
        elif parts:
            gres = parts[1].strip() if len(parts) > 1 else "(null)"
            found.setdefault(parts[0], [])
            if gres not in found[parts[0]]:
                found[parts[0]].append(gres)
    listed = [(partition, ", ".join(gres)) for partition, gres in found.items()]
    return listed + (
        [("?", f"sinfo printed {len(unreadable)} line(s) naming no partition, e.g. {unreadable[0]}")]
        if unreadable
        else []
    )


def _readable(text: str) -> bool:
    """Whether a tool's line holds words only: no undecodable byte (U+FFFD), no control character."""
    return "\ufffd" not in text and not any(ord(c) < 32 and c != "\t" or c == "\x7f" for c in text)


def gpus_in(gres: str) -> int:
    """GPUs per node in a GRES string (``gpu:4``, ``gpu:a100:8(S:0-1)``); 0 for none."""
    counts = [int(m.group(1)) for m in re.finditer(r"gpu(?::[A-Za-z0-9_.-]+)?:(\d+)", gres)]
    return max(counts, default=0)


# ---- the report ------------------------------------------------------------------------------


def diagnose(towards: str = "") -> Report:
    started = time.perf_counter()
    report = Report()
    report.row("node", f"{socket.gethostname()} ({platform.machine()}, {os.cpu_count()} CPUs)")
    report.row("python", platform.python_version())
    build = torch_build()
    driver = read_driver()
    probed: TorchCuda | None = None
    if build is None:
        report.row("torch", "not installed (make setup)")
        report.verdicts.append("torch is not installed: run `make setup` (docs/slurm.md, Installing on a cluster)")
        report.failed = True
    else:
        version, cuda = build
        report.row("torch", f"{version} ({f'CUDA {cuda}' if cuda else 'CPU-only'} build)")
        if driver.present and cuda:
            probed = torch_cuda()
        needed = MIN_DRIVER.get(_major(cuda) or 0) if cuda else None
        report.row(
            "CUDA of the build",
            f"{cuda} (needs NVIDIA driver >= {needed})" if cuda and needed else (cuda or "none (CPU-only build)"),
        )
        report.row(
            "cuDNN",
            (probed.cudnn if probed and probed.cudnn else None)
            or wheel_version("nvidia-cudnn")
            or "bundled with torch",
        )
        report.row(
            "NCCL",
            (probed.nccl if probed and probed.nccl else None) or wheel_version("nvidia-nccl") or "bundled with torch",
        )
    report.row("NVIDIA driver", _driver_row(driver))
    _gpu_rows(report, build, driver, probed)
    interface, interfaces, problem = network(*rendezvous_host(towards))
    report.row("interfaces", interfaces)
    report.row("gloo/NCCL interface", interface)
    if problem:
        report.verdicts.append(
            f"network: {problem}: a multi-host job needs a routed interface; run "
            "`dlcomm doctor --towards <rank 0's host>` on a compute node, or set launcher.ifname"
        )
    partitions = slurm_partitions()
    if partitions is None:
        report.row("SLURM partitions", "no sinfo on PATH (not a SLURM node)")
    else:
        report.row("SLURM partitions", "; ".join(f"{p}: {g}" for p, g in partitions) or "none")
        with_gpus = [(p.rstrip("*"), gpus_in(g)) for p, g in partitions if gpus_in(g)]
        if with_gpus:
            p, n = with_gpus[0]
            report.verdicts.append(
                f"SLURM: partition {p} has {n} GPU(s) per node: launcher=slurm launcher.partition={p} "
                f"launcher.gpus_per_node={n} workers_per_node={n} train.device=cuda"
            )
        else:
            report.verdicts.append("SLURM: no partition lists GPUs (GRES); train.device=cuda needs one with gpu:N")
    took = time.perf_counter() - started
    imported = (
        f"torch imported in {probed.import_s:.1f} s to ask CUDA"
        if probed is not None
        else "torch not imported (no NVIDIA driver here)"
        if build is not None and not driver.present
        else "torch not imported"
    )
    report.row("doctor", f"{took:.2f} s; {imported}; mlflow not imported")
    return report


def _driver_row(driver: Driver) -> str:
    if driver.version:
        return driver.version + (f" ({driver.note})" if driver.note else "")
    if driver.present:
        return f"unknown: {driver.note}"
    return f"none ({driver.note})" if driver.note else "none (no /proc/driver/nvidia/version, no nvidia-smi)"


def _gpu_rows(report: Report, build, driver: Driver, probed: TorchCuda | None) -> None:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    restriction = f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else ""
    cuda = build[1] if build else None
    if driver.note:  # what nvidia-smi said beside or instead of a version: a finding, whatever follows
        report.verdicts.append(f"NVIDIA driver: {driver.note}; run nvidia-smi on this node to see it whole")
    if not driver.present:
        report.row("GPUs visible", f"0 on this node: no NVIDIA driver{restriction}")
        report.row("driver runs the build", "n/a: no driver")
        report.verdicts.append(
            "no GPU on this node: train.device=cpu (gloo) runs here; for train.device=cuda run "
            "`dlcomm doctor` on a GPU node (e.g. srun -p <partition> --gres=gpu:1 .venv/bin/dlcomm doctor)"
        )
        return
    shown = driver.version or "(version unknown)"
    if not cuda:
        report.row("GPUs visible", f"? (a CPU-only torch cannot see them){restriction}")
        report.row("driver runs the build", "n/a: CPU-only torch")
        report.verdicts.append(
            f"driver {shown} is here but torch is a CPU-only build: install a CUDA build "
            f"(make setup TORCH_INDEX=...; docs/slurm.md)"
        )
        report.failed = True
        return
    if driver.version:
        runs, needed = driver_runs(cuda, driver.version)
        told = ("yes" if runs else "NO") + (
            f": CUDA {cuda} needs >= {needed}, driver {driver.version}" if needed else ""
        )
    else:  # torch's own start of CUDA below says whether it runs
        runs, needed = True, MIN_DRIVER.get(_major(cuda) or 0)
        told = f"?: the driver's version could not be read (CUDA {cuda} needs >= {needed or '?'})"
    names = sorted(set(probed.names)) if probed else []
    count = probed.count if probed else 0
    report.row("GPUs visible", f"{count} on this node{': ' + ', '.join(names) if names else ''}{restriction}")
    report.row("driver runs the build", told)
    if not runs:
        report.verdicts.append(
            f"driver {shown} is too old for torch's CUDA {cuda} (needs >= {needed}): install a CUDA 12 build, "
            f"`make setup TORCH_INDEX={CUDA12_INDEX}` (CUDA 12 needs >= 525), or ask for a newer driver"
        )
        report.failed = True
    elif probed is not None and not probed.available:
        report.verdicts.append(
            f"torch cannot start CUDA here: {probed.problem or 'torch.cuda.is_available() is false'}"
        )
        report.failed = True
    elif count == 0:
        report.verdicts.append(f"no GPU visible to torch{restriction}: check CUDA_VISIBLE_DEVICES or the job's --gres")
        report.failed = True
    else:
        nccl = f"NCCL {probed.nccl}" if probed and probed.nccl else "NCCL"
        report.verdicts.append(
            f"GPU path ready: {count} GPU(s), driver {shown} runs CUDA {cuda}; "
            f"train.device=cuda uses {nccl}, one GPU per rank"
        )


def render(report: Report) -> str:
    width = max(len(what) for what, _ in report.rows)
    lines = [f"{'what':<{width}}  this node", f"{'-' * width}  {'-' * 9}"]
    lines += [f"{what:<{width}}  {value}" for what, value in report.rows]
    lines += [f"verdict: {verdict}" for verdict in report.verdicts]
    return "\n".join(lines)


def doctor(towards: str = "") -> int:
    report = diagnose(towards)
    print(render(report))
    return 1 if report.failed else 0
