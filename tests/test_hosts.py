"""Runs across hosts: scripts/cluster_local.sh's SLURM cluster of network namespaces (2 hosts here),
and the choice of the network interface between hosts."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from conftest import FAST, mlflow_run, run_cli
from dlcomm.errors import UserError
from dlcomm.launch.netif import choose_interface, interface_addresses, interface_towards

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "cluster_local.sh"
CLUSTER_CONF = "/etc/dlcomm-cluster/slurm.conf"


def _why_no_hosts() -> str:
    """Empty when this machine can make hosts; else the one-line reason to skip."""
    if os.geteuid() != 0:
        return "cluster_local.sh needs root (network namespaces)"
    if shutil.which("slurmd") is None:
        return "no slurmd here: run scripts/slurm_local.sh up once (installs slurm-wlm)"
    probe = subprocess.run(["ip", "netns", "add", "dlc-test-probe"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"network namespaces are not allowed here: {probe.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", "dlc-test-probe"], check=True)
    return ""


WHY = _why_no_hosts()


@pytest.fixture(scope="module")
def two_hosts():
    if WHY:
        pytest.skip(WHY)
    up = subprocess.run([str(SCRIPT), "up", "--hosts", "2", "--gbps", "1"], capture_output=True, text=True, timeout=180)
    assert up.returncode == 0, up.stdout + up.stderr
    yield
    down = subprocess.run([str(SCRIPT), "down"], capture_output=True, text=True, timeout=120)
    assert down.returncode == 0, down.stderr
    assert not {"h1", "h2"} & set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())
    assert subprocess.run(["ip", "link", "show", "dlcbr0"], capture_output=True).returncode != 0
    assert "h1" not in Path("/etc/hosts").read_text().split()


def test_a_forced_interface_that_does_not_exist_is_one_line_naming_the_real_ones() -> None:
    with pytest.raises(UserError) as refused:
        choose_interface("nope0", "127.0.0.1")
    message = str(refused.value)
    assert "launcher.ifname=nope0 is invalid" in message and "lo" in message and "\n" not in message


def test_loopback_rendezvous_leaves_the_interface_to_the_backend(monkeypatch) -> None:
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    assert interface_towards("127.0.0.1") is None
    assert choose_interface("", "127.0.0.1") is None and "GLOO_SOCKET_IFNAME" not in os.environ
    assert interface_addresses()["lo"] == "127.0.0.1"


def test_each_host_reaches_the_others_through_its_own_link(two_hosts) -> None:
    """From this machine the hosts are behind the bridge; from h1, h2 is behind h1's eth0 and h1's
    own address is held by eth0 too (rank 0's host must not pick loopback)."""
    assert interface_towards("h1") == "dlcbr0"
    for target in ("h2", "h1"):
        seen = subprocess.run(
            [str(SCRIPT), "exec", "h1", os.sys.executable, "-c",
             f"from dlcomm.launch.netif import interface_towards; print(interface_towards('{target}'))"],
            capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        )
        assert seen.stdout.strip() == "eth0", seen.stderr
    assert socket.gethostbyname("h2") == "10.77.0.12"


def test_a_two_host_run_puts_one_rank_on_each_host(two_hosts, home, monkeypatch) -> None:
    monkeypatch.setenv("SLURM_CONF", CLUSTER_CONF)
    result = run_cli(home, "train", *FAST, "launcher=slurm", "nodes=2", "workers_per_node=1", "train.max_steps=20",
                     "launcher.wait=true", timeout=300)
    assert result.returncode == 0, result.stderr
    run = mlflow_run(result)
    assert run.info.status == "FINISHED"
    assert run.data.metrics["final/steps"] == 20
    assert run.data.tags["rank_hosts"] == "h1,h2" and run.data.tags["num_hosts"] == "2"
