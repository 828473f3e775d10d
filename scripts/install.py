#!/usr/bin/env python3
"""dlcomm's installs beyond the plain one: over a site's torch, from a wheelhouse, and making one.

``make setup`` pip-installs torch from the index. A cluster's GPU node is often different: its
PyTorch comes from the site (``module load pytorch``, a container, conda) and it has no internet.

    python3 scripts/install.py site --python PY --venv .venv [--wheelhouse DIR]
        a venv whose torch is the one ``PY`` imports: checked against dlcomm's floor (``torch>=``
        in pyproject.toml); the venv reads the folder holding it (a ``.pth`` file: a venv made from
        a venv's Python cannot see its packages with ``--system-site-packages``); everything else
        installed, never torch or torchvision; then ``dlcomm doctor`` checks the build against
        the node's NVIDIA driver.
    python3 scripts/install.py wheelhouse --out DIR [--python-version 3.12] [--platform TAG ...]
        on a machine that reaches the package index: every wheel dlcomm needs but torch and
        torchvision, for that Python and platform; a package published only as an sdist
        (antlr4-python3-runtime) is built into a wheel first.
    python3 scripts/install.py offline --venv .venv --wheelhouse DIR
        a venv from the wheelhouse alone (``--no-index``): its torch too must be in it.

Standard library only (it runs before the venv exists); pip's own lines are shown through
scripts/heartbeat.py, never a silent minute. Errors are one line and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TORCH_FAMILY = {"torch", "torchvision"}
# the build backend (pyproject.toml's [build-system]): offline, the editable install cannot fetch it
BUILD = ["setuptools>=68", "wheel"]
PIP_LINES = "^(Collecting|Installing collected|Successfully installed|ERROR|error)"
# published as sdists only, needed by a dependency (hydra-core 1.3 pins antlr4 4.9.*): built into
# wheels first, since pip's resolver reports a cross-platform sdist-only pin as ResolutionImpossible
SDIST_ONLY = ("antlr4-python3-runtime==4.9.3",)
SETUPTOOLS_FOR_TORCH = ("setuptools>=77.0.3,<82",)
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "linux_x86_64", "any"]


class Refused(Exception):
    """A one-line reason the install cannot go on."""


def requirements(extras: tuple[str, ...] = ("test",)) -> list[str]:
    """pyproject.toml's dependencies and the given extras' (a regex over the two arrays: no TOML
    parser in Python 3.10's standard library)."""
    text = (ROOT / "pyproject.toml").read_text()
    block = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M)
    if block is None:
        raise Refused("pyproject.toml has no dependencies array")
    found = re.findall(r'"([^"]+)"', block.group(1))
    for extra in extras:
        line = re.search(rf"^{extra} = \[(.*?)\]", text, re.M)
        found += re.findall(r'"([^"]+)"', line.group(1)) if line else []
    return found


def name_of(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].strip().lower()


def torch_floor() -> str:
    """The oldest torch dlcomm declares it runs on (``torch>=X`` in pyproject.toml)."""
    for requirement in requirements(()):
        if name_of(requirement) == "torch":
            return requirement.split(">=", 1)[1].split(",")[0].strip()
    raise Refused("pyproject.toml declares no torch>= floor")


def version_tuple(version: str) -> tuple[int, ...]:
    """``2.11.0+cu130`` -> (2, 11, 0): the release part only."""
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0])[:3])


def site_torch(python: str) -> dict:
    """What ``python`` imports as torch: its version, the folder holding it, torchvision's version."""
    probe = (
        "import json, os, torch\n"
        "try:\n    import torchvision; tv = torchvision.__version__\nexcept Exception:\n    tv = None\n"
        "print(json.dumps({'version': torch.__version__, 'folder': os.path.dirname(os.path.dirname(torch.__file__)),"
        " 'torchvision': tv, 'cuda': torch.version.cuda}))"
    )
    try:
        answer = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=300)
    except FileNotFoundError:
        raise Refused(f"no Python {python!r} here: pass SITE_PYTHON=<the interpreter that imports the site's torch>")
    if answer.returncode != 0:
        last = (answer.stderr.strip().splitlines() or ["no output"])[-1]
        raise Refused(
            f"{python} cannot import torch ({last}): load the site's PyTorch first (module load, conda activate, "
            "the container) and pass its interpreter as SITE_PYTHON, or run make setup without TORCH=site"
        )
    return json.loads(answer.stdout.strip().splitlines()[-1])


def check_floor(found: dict) -> None:
    floor = torch_floor()
    if version_tuple(found["version"]) < version_tuple(floor):
        raise Refused(
            f"the site's torch {found['version']} (in {found['folder']}) is older than dlcomm's floor torch>={floor} "
            "(pyproject.toml): load a newer PyTorch, or run make setup without TORCH=site to install one"
        )
    if found["torchvision"] is None:
        raise Refused(
            f"the site's torch {found['version']} has no torchvision beside it: load the site's torchvision too "
            "(installing one from the index would replace the site's torch)"
        )


def pip(venv: Path, *args: str, wheelhouse: str = "") -> None:
    """``<venv>/bin/pip install ...`` under the heartbeat; from ``wheelhouse`` alone when given."""
    where = ["--no-index", "--find-links", wheelhouse] if wheelhouse else []
    command = [str(venv / "bin" / "pip"), "--disable-pip-version-check", "install", "--progress-bar", "off", *where]
    beat = [sys.executable, str(ROOT / "scripts" / "heartbeat.py"), "--show", PIP_LINES, "--"]
    if subprocess.run([*beat, *command, *args]).returncode != 0:
        raise Refused(f"pip could not install {' '.join(args)[:200]} (its lines above say why)")


def make_venv(python: str, venv: Path) -> None:
    if not (venv / "bin" / "python").exists():
        subprocess.run([python, "-m", "venv", str(venv)], check=True)


def site_packages(venv: Path) -> Path:
    answer = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(answer.stdout.strip())


def install_site(python: str, venv: Path, wheelhouse: str) -> None:
    found = site_torch(python)
    check_floor(found)
    print(
        f"install: the site's torch {found['version']} (CUDA {found['cuda'] or 'none'}) and torchvision "
        f"{found['torchvision']}, from {found['folder']}; dlcomm's floor torch>={torch_floor()}",
        flush=True,
    )
    make_venv(python, venv)
    # addsitedir, not a bare path line: the folder's own .pth files (a conda or module layout) apply too
    (site_packages(venv) / "zz_site_torch.pth").write_text(f"import site; site.addsitedir({found['folder']!r})\n")
    others = [r for r in requirements() if name_of(r) not in TORCH_FAMILY]
    pip(venv, *BUILD, *others, wheelhouse=wheelhouse)
    pip(venv, "--no-deps", "--no-build-isolation", "-e", str(ROOT), wheelhouse=wheelhouse)
    check_venv(venv, found["folder"])


def check_venv(venv: Path, torch_folder: str | None) -> None:
    """The venv imports dlcomm and its stack, its torch from ``torch_folder`` when given; then
    ``dlcomm doctor`` (exit 1: this node's NVIDIA driver cannot run the torch build)."""
    probe = "import os, torch, dlcomm, hydra, mlflow; print(os.path.dirname(os.path.dirname(torch.__file__)))"
    answer = subprocess.run([str(venv / "bin" / "python"), "-c", probe], capture_output=True, text=True)
    if answer.returncode != 0:
        last = (answer.stderr.strip().splitlines() or ["no output"])[-1]
        raise Refused(f"the venv {venv} does not import dlcomm's stack ({last})")
    folder = answer.stdout.strip()
    if torch_folder is not None and Path(folder).resolve() != Path(torch_folder).resolve():
        raise Refused(f"the venv's torch is {folder}, not the site's {torch_folder}")
    doctor = subprocess.run([str(venv / "bin" / "dlcomm"), "doctor"], capture_output=True, text=True)
    if doctor.returncode != 0:
        print(doctor.stdout, end="")
        raise Refused("dlcomm doctor: this node's NVIDIA driver cannot run the torch build (its table above)")
    print(f"install: {venv} ready; torch from {folder}", flush=True)


def install_offline(python: str, venv: Path, wheelhouse: str, torch_pins: list[str]) -> None:
    make_venv(python, venv)
    pip(venv, *BUILD, *torch_pins, *requirements(), wheelhouse=wheelhouse)
    pip(venv, "--no-deps", "--no-build-isolation", "-e", str(ROOT), wheelhouse=wheelhouse)
    check_venv(venv, None)


def _wheel_requires(wheel: Path) -> list[str]:
    """A wheel's unconditional requirements (Requires-Dist without an ``extra`` marker)."""
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        name = next(item for item in archive.namelist() if item.endswith(".dist-info/METADATA"))
        lines = archive.read(name).decode().splitlines()
    found = [line.split(":", 1)[1].strip() for line in lines if line.startswith("Requires-Dist:")]
    return [r for r in found if "extra ==" not in r.replace('"', "").replace("'", "")]


def _download(out: Path, target: list[str], wanted: list[str], *flags: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "pip", "--disable-pip-version-check", "download", "--progress-bar", "off"]
    command += ["--only-binary=:all:", *target, "--find-links", str(out), "-d", str(out), *flags, *wanted]
    return subprocess.run(command, capture_output=True, text=True)


def _build_sdist(out: Path, requirement: str) -> None:
    print(f"wheelhouse: {requirement} is published as an sdist only: building a wheel of it", flush=True)
    build = [sys.executable, "-m", "pip", "--disable-pip-version-check", "wheel", "--no-deps", "-w", str(out)]
    if subprocess.run([*build, requirement], capture_output=True, text=True).returncode != 0:
        raise Refused(f"could not build a wheel of {requirement}")


def make_wheelhouse(out: Path, python_version: str, platforms: list[str]) -> None:
    """Download every wheel but torch's for ``python_version`` and ``platforms``.

    A requirement that itself requires torch or torchvision (timm) is downloaded alone
    (``--no-deps``) and its other requirements resolved with the rest: the resolver never
    reaches torch. An sdist-only requirement that stops the download is built into a wheel
    (pure Python: any platform) and the download tried again."""
    out.mkdir(parents=True, exist_ok=True)
    target = ["--python-version", python_version, "--implementation", "cp"]
    for platform in platforms:
        target += ["--platform", platform]
    for requirement in SDIST_ONLY:
        if _wheel_named(out, requirement) is None:
            _build_sdist(out, requirement)
    wanted: list[str] = list(BUILD)
    for requirement in (r for r in requirements() if name_of(r) not in TORCH_FAMILY):
        before = set(out.glob("*.whl"))
        alone = _download(out, target, [requirement], "--no-deps")
        if alone.returncode != 0:
            _build_sdist(out, requirement)
        wheel = next(iter(set(out.glob("*.whl")) - before), None) or _wheel_named(out, requirement)
        needs = _wheel_requires(wheel) if wheel is not None else []
        if any(name_of(r) in TORCH_FAMILY for r in needs):
            wanted += [r for r in needs if name_of(r) not in TORCH_FAMILY]  # the package itself is in
        else:
            wanted.append(requirement)
    built: set[str] = set()
    for _ in range(10):
        answer = _download(out, target, wanted)
        if answer.returncode == 0:
            # torch pins setuptools itself (2.11: <82; 2.14: >=77.0.3): the site's torch decides, and
            # offline pip can only pick from what is here, so the house holds one of each side
            if _download(out, target, list(SETUPTOOLS_FOR_TORCH), "--no-deps").returncode != 0:
                raise Refused(f"pip download could not fetch {SETUPTOOLS_FOR_TORCH[0]}")
            wheels = sorted(out.glob("*.whl"))
            size = sum(path.stat().st_size for path in wheels) / 2**20
            print(f"wheelhouse: {out}: {len(wheels)} wheels, {size:.0f} MiB, for CPython {python_version}", flush=True)
            return
        missing = re.search(r"No matching distribution found for (\S+)", answer.stderr)
        if missing is None or missing.group(1) in built:
            last = (answer.stderr.strip().splitlines() or ["no output"])[-1]
            raise Refused(f"pip download failed: {last}")
        _build_sdist(out, missing.group(1))
        built.add(missing.group(1))
    raise Refused("pip download kept failing after building 10 wheels")


def _wheel_named(out: Path, requirement: str) -> Path | None:
    """The wheel of ``requirement`` already in ``out`` (downloaded by an earlier pass)."""
    stem = name_of(requirement).replace("-", "_")
    return next((path for path in out.glob("*.whl") if path.name.lower().startswith(stem + "-")), None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    site = sub.add_parser("site", help="a venv over the site's torch")
    site.add_argument("--python", default="python3", help="the interpreter that imports the site's torch")
    site.add_argument("--venv", type=Path, default=ROOT / ".venv")
    site.add_argument("--wheelhouse", default="", help="install from this folder alone (no index)")
    offline = sub.add_parser("offline", help="a venv from a wheelhouse alone, torch included")
    offline.add_argument("--python", default="python3")
    offline.add_argument("--venv", type=Path, default=ROOT / ".venv")
    offline.add_argument("--wheelhouse", required=True)
    offline.add_argument("--torch-pins", nargs="*", default=[])
    house = sub.add_parser("wheelhouse", help="download the wheels (no torch) for another machine")
    house.add_argument("--out", type=Path, required=True)
    house.add_argument("--python-version", default=f"{sys.version_info.major}.{sys.version_info.minor}")
    house.add_argument("--platform", nargs="*", default=PLATFORMS)
    args = parser.parse_args()
    try:
        if args.what == "site":
            install_site(args.python, args.venv, args.wheelhouse)
        elif args.what == "offline":
            install_offline(args.python, args.venv, args.wheelhouse, args.torch_pins)
        else:
            make_wheelhouse(args.out, args.python_version, args.platform)
    except Refused as refused:
        print(f"error: {refused}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
