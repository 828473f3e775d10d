"""scripts/install.py: a venv over a site's torch, from a wheelhouse, with no index (issue 48).

The "site" here is a folder that holds this venv's torch and torchvision (and what they import)
but none of dlcomm's other packages, as a cluster's PyTorch module does: links into this venv's
site-packages, so no gigabytes are copied."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
INSTALL = ROOT / "scripts" / "install.py"
sys.path.insert(0, str(ROOT / "scripts"))
import install  # noqa: E402

# dlcomm's own stack, which a site's PyTorch does not have (matched against site-packages entries)
NOT_AT_THE_SITE = (
    "mlflow",
    "hydra",
    "omegaconf",
    "antlr4",
    "submitit",
    "tenacity",
    "timm",
    "tabulate",
    "dlcomm",
    "__editable__",
    "_dlcomm",
    "choco",
)


def _python(folder: Path) -> Path:
    """A venv without pip (fast to make): the interpreter a site would hand over."""
    venv.EnvBuilder(with_pip=False).create(folder)
    return folder / "bin" / "python"


def _site_packages(python: Path) -> Path:
    answer = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(answer.stdout.strip())


def _site_with_this_torch(tmp_path: Path) -> Path:
    """An interpreter whose site folder holds this venv's torch stack and not dlcomm's packages."""
    import torch

    ours = Path(torch.__file__).parents[1]
    site = tmp_path / "site-modules"
    site.mkdir()
    for entry in ours.iterdir():
        if not entry.name.lower().startswith(NOT_AT_THE_SITE) and not entry.name.endswith(".pth"):
            (site / entry.name).symlink_to(entry)
    python = _python(tmp_path / "site-python")
    (_site_packages(python) / "site_modules.pth").write_text(f"import site; site.addsitedir({str(site)!r})\n")
    return python


def test_the_floor_and_the_requirements_come_from_pyproject() -> None:
    names = [install.name_of(r) for r in install.requirements()]
    assert {"torch", "mlflow", "hydra-core", "pytest"} <= set(names)
    assert install.torch_floor() == "2.11"
    assert install.version_tuple("2.11.0+cu130") == (2, 11, 0) > install.version_tuple("2.10.1")


def test_a_site_torch_older_than_the_floor_is_refused_in_one_line(tmp_path) -> None:
    python = _python(tmp_path / "old-site")
    fake = _site_packages(python) / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text("__version__ = '2.3.0'\nclass version:\n    cuda = None\n")
    result = subprocess.run(
        [sys.executable, str(INSTALL), "site", "--python", str(python), "--venv", str(tmp_path / "venv")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: the site's torch 2.3.0 (in ")
    assert "older than dlcomm's floor torch>=2.11" in result.stderr
    assert not (tmp_path / "venv").exists()  # refused before anything was made


def test_no_torch_at_the_site_is_refused_in_one_line(tmp_path) -> None:
    python = _python(tmp_path / "bare")
    result = subprocess.run(
        [sys.executable, str(INSTALL), "site", "--python", str(python), "--venv", str(tmp_path / "venv")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "cannot import torch (ModuleNotFoundError: No module named 'torch')" in result.stderr


@pytest.mark.slow
def test_a_wheelhouse_installs_dlcomm_over_the_site_s_torch_with_no_index_and_it_trains(tmp_path) -> None:
    house = tmp_path / "wheels"
    made = subprocess.run(
        [sys.executable, str(INSTALL), "wheelhouse", "--out", str(house)], capture_output=True, text=True, timeout=900
    )
    assert made.returncode == 0, made.stderr[-2000:]
    wheels = {path.name.split("-")[0].lower() for path in house.glob("*.whl")}
    assert {"mlflow", "hydra_core", "antlr4_python3_runtime", "omegaconf"} <= wheels  # antlr4: built from its sdist
    assert not wheels & {"torch", "torchvision"}

    site_python = _site_with_this_torch(tmp_path)
    target = tmp_path / "venv"
    # no index; and no byte-compiling of the ~13,000 modules installed (~25 s of CPU here, of a venv used once:
    # what the run imports is compiled as it is imported)
    unreachable = {
        **os.environ,
        "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
        "PIP_NO_CACHE_DIR": "1",
        "PIP_COMPILE": "0",
    }
    command = [sys.executable, str(INSTALL), "site", "--python", str(site_python), "--venv", str(target)]
    result = subprocess.run(
        [*command, "--wheelhouse", str(house)], capture_output=True, text=True, timeout=900, env=unreachable
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "install: the site's torch " in result.stdout
    mine = _site_packages(target / "bin" / "python")
    assert not (mine / "torch").exists() and (mine / "mlflow").is_dir()  # torch read from the site, the rest installed
    where = subprocess.run(
        [str(target / "bin" / "python"), "-c", "import torch; print(torch.__file__)"], capture_output=True, text=True
    )
    assert where.stdout.startswith(str(tmp_path / "site-modules")), where

    home = tmp_path / "home"
    home.mkdir()
    train = subprocess.run(
        [str(target / "bin" / "dlcomm"), "train", "train.max_steps=3", "dataset=synthetic", "workers_per_node=2"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=home,
        env={**unreachable, "DLCOMM_HOME": str(home)},
    )
    assert train.returncode == 0, train.stderr[-3000:]
    assert "done: test accuracy" in train.stdout
