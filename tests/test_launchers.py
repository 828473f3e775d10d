"""Launchers are registered classes: every ``launcher=<name>`` is one (stored from its Config), and
what the rest of dlcomm asks of a launcher it asks the class (no launcher names compared elsewhere)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from dlcomm.compose import compose
from dlcomm.errors import UserError
from dlcomm.launch.base import Launcher
from dlcomm.launch.registry import LAUNCHERS

SRC = Path(__file__).resolve().parents[1] / "src" / "dlcomm"


def test_every_launcher_config_has_its_registered_class() -> None:
    names = list(LAUNCHERS.all())
    assert {"local", "slurm", "srun"} <= set(names)
    for name, launcher in LAUNCHERS.all().items():
        assert issubclass(launcher, Launcher) and launcher.name == name
        assert launcher.ended_by in ("driver", "slurm_job")
        # the file's name, or its schema's default where the file leaves it out (tests/test_config_defaults.py)
        assert compose([f"launcher={name}"]).launcher.name == name
    assert LAUNCHERS.find("rank") is None and LAUNCHERS.find("") is None  # a module of launch/, not a launcher
    with pytest.raises(UserError, match=r"^launcher.name=nope is unknown: choose one of local, slurm, srun, threads$"):
        LAUNCHERS.get("nope")


def test_a_launcher_without_services_refuses_an_algorithm_that_needs_them() -> None:
    cfg = OmegaConf.create({"algo": {"name": "ps"}})
    with pytest.raises(
        UserError,
        match=r"^launcher=srun is invalid for algo=ps: it needs the service process\(es\) "
        r"server, which it does not start; pass launcher=local or launcher=threads$",
    ):
        Launcher.check.__func__(LAUNCHERS.get("srun"), cfg, ("server",))
    with pytest.raises(UserError, match="launcher=srun is invalid with -m"):
        LAUNCHERS.get("srun").sweep([], [])


def test_no_launcher_name_is_compared_outside_the_launchers() -> None:
    """``x == "slurm"``, ``name in ("slurm", "srun")``, a tuple of launcher names: what a launcher
    does is asked of its class (``LAUNCHERS.get(name)``), never decided by its name."""
    names = set(list(LAUNCHERS.all()))
    found = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Compare, ast.Tuple, ast.List, ast.Set)):
                if any(isinstance(c, ast.Constant) and c.value in names for c in ast.walk(node)):
                    found.append(f"{path.relative_to(SRC)}:{node.lineno}: {ast.unparse(node)}")
    assert not found, found


def _preloaded_modules(out) -> None:
    import sys

    out.put([name for name in ("torch._dynamo", "mlflow", "dlcomm.algorithms.sgp") if name in sys.modules])


def test_rank_processes_start_with_the_lazy_imports_already_done() -> None:
    """The fork server imported what a rank would import lazily (a spawned process has none of it)."""
    from dlcomm.launch.procstart import rank_processes

    context = rank_processes()
    out = context.Queue()
    process = context.Process(target=_preloaded_modules, args=(out,))
    process.start()
    assert out.get(timeout=120) == ["torch._dynamo", "mlflow", "dlcomm.algorithms.sgp"]
    process.join(timeout=30)
    assert process.exitcode == 0


def test_a_driver_counts_as_gone_once_it_exits_even_before_it_is_reaped() -> None:
    import os
    import subprocess
    import time

    from dlcomm.launch.procstart import is_alive

    assert is_alive(os.getpid())
    child = subprocess.Popen(["sleep", "0"])
    deadline = time.monotonic() + 10
    while is_alive(child.pid) and time.monotonic() < deadline:  # exits at once; a zombie until waited for
        time.sleep(0.05)
    assert not is_alive(child.pid)
    assert child.poll() == 0  # it was a zombie: the parent had not reaped it yet
    assert not is_alive(child.pid)


def test_the_jobs_store_master_does_not_wait_and_a_client_joins_it() -> None:
    """``join_store``: the master returns before anyone joins (a job of 3 with one process here),
    on 127.0.0.1 it is the loopback-only store, and a client reads what the master wrote."""
    import time
    from datetime import timedelta

    from dlcomm.launch.store import join_store

    started = time.monotonic()
    master = join_store("127.0.0.1", 0, 3, master=True, timeout=timedelta(seconds=5))
    assert time.monotonic() - started < 4  # did not wait for the other two
    master.set("dlcomm/run_id", "abc")
    for count_in in (True, False):
        client = join_store("127.0.0.1", master.port, 3, timeout=timedelta(seconds=5), count_in=count_in)
        assert client.get("dlcomm/run_id") == b"abc"
