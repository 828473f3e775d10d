"""Commands that only compose and check a configuration (``dlcomm config``, ``--help``, a refused
bad input) never import torch or MLflow: those imports cost 1.5-2 s before the first line. Every
algorithm and launcher module loads without them (torch is imported where a rank runs)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ALGORITHMS

_PROBE = """
import json, sys
from dlcomm.cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "torch": "torch" in sys.modules, "mlflow": "mlflow" in sys.modules}))
"""


def _heavy_imports(*args: str) -> dict:
    done = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, timeout=120)
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "args",
    [
        ["config"],
        ["config", "algo=crossover", "launcher=threads"],
        ["config", "launcher=slurm", "algo=gossip_pull"],
        ["config", "--explain", "network", "network=eth_1g"],
        ["train", "nodes=0"],
        ["train", "train.max_stepz=5"],
        ["train", "-m", "algo=allreduce,nope"],
    ],
    ids=" ".join,
)
def test_composing_and_refusing_import_neither_torch_nor_mlflow(args) -> None:
    seen = _heavy_imports(*args)
    assert seen["code"] == (0 if args[0] == "config" else 2)
    assert not seen["torch"] and not seen["mlflow"], seen


def test_every_algorithm_and_launcher_composes_without_torch() -> None:
    script = (
        "import sys\n"
        "from dlcomm.compose import compose\n"
        "from dlcomm.algorithms.registry import ALGORITHMS\n"
        "from dlcomm.launch.registry import LAUNCHERS\n"
        f"for name in {ALGORITHMS!r}:\n"
        "    compose([f'algo={name}', 'nodes=2', 'workers_per_node=2'])\n"
        "assert len(ALGORITHMS.all()) >= 10 and LAUNCHERS.all()\n"
        "print('torch' in sys.modules, 'mlflow' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"], done.stdout
