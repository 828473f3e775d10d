"""The groups the other plugin tests leave out, one throwaway member each from a package on the
path: a task and a launcher (one .py and one .yaml each) and a network preset (a preset is data:
one .yaml). They compose, train together for a few steps, and what goes wrong is one line naming
the package, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dlcomm.metrics import names

from fake_plugins import run_dlcomm, write_plugin

TASK = """
from dataclasses import dataclass, field

from dlcomm.config.schema import TaskConfig, doc
from dlcomm.tasks.base import Task


@dataclass
class MarginTaskConfig(TaskConfig):
    name: str = "margin"
    margin: float = field(default=1.0, metadata=doc("the hinge's margin"))


class MarginTask(Task):
    \"\"\"Classification by the multi-class hinge loss (1/B) sum_b (1/K) sum_{k != y_b} max(0, m - f_y + f_k).\"\"\"

    name = "margin"
    Config = MarginTaskConfig

    def __init__(self, cfg):
        super().__init__(cfg)
        self.total, self.count = 0.0, 0

    def loss(self, model, inputs, labels):
        import torch  # inside: composing a configuration imports this module

        value = torch.nn.functional.multi_margin_loss(model(inputs), labels, margin=self.cfg.task.margin)
        self.total, self.count = self.total + float(value.detach()), self.count + 1
        return value

    def take_epoch_losses(self):
        mean, self.total, self.count = self.total / max(1, self.count), 0.0, 0
        return {"hinge_loss": mean}
"""

LAUNCHER = """
from dlcomm.launch.threads import ThreadsLauncher


class EchoThreads(ThreadsLauncher):
    \"\"\"The threads launcher that says so first.\"\"\"

    name = "echo_threads"

    @classmethod
    def launch(cls, spec):
        print(f"echo_threads: launching {spec.config['nodes']} ranks", flush=True)
        return super().launch(spec)
"""

NETWORK = """# A 3 ms, 2 Gb/s cluster (a test's plugin): a preset is YAML alone.
defaults:
  - network_schema
  - _self_

name: lan_3ms
mode: simulate
inter:
  latency_ms: 3
  bandwidth_gbps: 2
"""

GOOD = """
    [dlcomm.tasks]
    margin = fake_groups.task:MarginTask

    [dlcomm.launchers]
    echo_threads = fake_groups.launcher:EchoThreads

    [dlcomm.configs]
    fake_groups = fake_groups.configs
"""


def _plugin(root: Path, entry_points: str = GOOD) -> None:
    write_plugin(
        root,
        "fake_groups",
        {"task.py": TASK, "launcher.py": LAUNCHER},
        {
            "task/margin.yaml": "defaults:\n  - margin_schema\n  - _self_\n",
            "launcher/echo_threads.yaml": "defaults:\n  - echo_threads_launcher_schema\n  - _self_\n\nname: echo_threads\n",
            "network/lan_3ms.yaml": NETWORK,
        },
        entry_points,
    )


def _refused(result) -> str:
    assert result.returncode == 2 and result.stdout == "", (result.stdout, result.stderr)
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    return result.stderr


def test_a_plugin_task_launcher_and_network_preset_compose(tmp_path) -> None:
    _plugin(tmp_path)
    shown = run_dlcomm(tmp_path, "config", "task=margin", "task.margin=0.5", "launcher=echo_threads", "network=lan_3ms")
    assert shown.returncode == 0, shown.stderr
    assert "task:\n  name: margin\n  margin: 0.5\n" in shown.stdout
    assert "launcher:\n  name: echo_threads\n" in shown.stdout and "  semantics: gloo\n" in shown.stdout
    assert "  name: lan_3ms\n" in shown.stdout and "    latency_ms: 3.0\n" in shown.stdout
    explained = run_dlcomm(tmp_path, "config", "--explain", "task", "task=margin")
    assert "the hinge's margin" in explained.stdout
    typo = run_dlcomm(tmp_path, "config", "task=margin", "task.margn=1")
    assert "no key task.margn" in _refused(typo)


@pytest.mark.slow  # real processes / a real run
def test_a_plugin_task_trains_under_a_plugin_launcher_on_a_plugin_network(tmp_path) -> None:
    _plugin(tmp_path)
    args = [
        "task=margin",
        "launcher=echo_threads",
        "network=lan_3ms",
        "nodes=2",
        "dataset=synthetic",
        "dataset.train_size=512",
        "dataset.test_size=128",
        "train.max_steps=3",
        "train.epochs=1",
    ]
    result = run_dlcomm(tmp_path, "train", *args, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "echo_threads: launching 2 ranks" in result.stdout  # the plugin's launcher ran the job
    assert "done: test accuracy" in result.stdout and "train.max_steps=3 ended the run" in result.stdout
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/results/mlflow.db")
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    hinge = run.data.metrics["epoch/hinge_loss"]  # the plugin task's own loss part, logged per epoch
    assert 0 < hinge < 1.0 + 1e-6  # a hinge loss of 10 classes starts below its margin
    assert run.data.params["network.inter.latency_ms"] == "3.0"
    # the preset's 3 ms are on the modelled clock: the allreduce of every step pays at least one latency
    assert run.data.metrics[names.FINAL_COMM_MODELLED_PER_ITER] >= 0.003, json.dumps(run.data.metrics, indent=1)


def test_a_broken_task_or_launcher_plugin_is_one_line_naming_its_package(tmp_path) -> None:
    _plugin(tmp_path, GOOD.replace("fake_groups.task:MarginTask", "fake_groups.nothing:MarginTask"))
    said = _refused(run_dlcomm(tmp_path, "config"))
    assert said.startswith("dlcomm: error: plugin fake_groups 1.0 failed to load its dlcomm.tasks entry point margin")
    other = tmp_path / "clash"
    _plugin(
        other,
        GOOD.replace("echo_threads = fake_groups.launcher:EchoThreads", "threads = fake_groups.launcher:EchoThreads"),
    )
    said = _refused(run_dlcomm(other, "config", "launcher=threads"))
    assert "whose name is 'echo_threads'" in said  # the entry point's name must be the class's
    wrong = tmp_path / "wrong"
    _plugin(wrong, GOOD.replace("fake_groups.task:MarginTask", "fake_groups.task:MarginTaskConfig"))
    said = _refused(run_dlcomm(wrong, "config"))
    assert "is not a task class (a subclass of dlcomm.tasks.base.Task)" in said
