"""Where results go: ``<repo>/results`` for a source checkout, ``./results`` otherwise;
``DLCOMM_HOME`` overrides the base folder."""

from __future__ import annotations

import os
from pathlib import Path


def project_root() -> Path:
    if os.environ.get("DLCOMM_HOME"):
        return Path(os.environ["DLCOMM_HOME"]).resolve()
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file() and (checkout / "src" / "dlcomm").is_dir():
        return checkout
    return Path.cwd().resolve()


def results_dir() -> Path:
    return project_root() / "results"
