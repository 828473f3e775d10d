"""The compute profile as a fact the user chose and can see (issue 56): measured on a clock that
other work cannot stretch, refused in one line (and not cached) when the machine is too busy,
named with its provenance on the run's screens and tags, never reused from another host, checked
as `dlcomm train` checks its config, and measured again when its cache entry is damaged."""

from __future__ import annotations

import json
import time

import torch

import dlcomm.train.profile as profile_module
import dlcomm.train.profile_measure as profile_measure
from dlcomm.train.profile import ComputeProfile
from dlcomm.train.profile_measure import Measurement, busy_reason, measure_step

from conftest import FAST, mlflow_run


class _Sleepy(torch.nn.Module):
    """A linear layer whose forward also sleeps: wall time that is not this thread's computing
    (what a step taking turns with other processes looks like to the wall clock)."""

    def __init__(self, sleep_s: float) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 2)
        self.sleep_s = sleep_s

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        time.sleep(self.sleep_s)
        return self.linear(inputs)


def _loss(model, inputs, labels):
    return torch.nn.functional.cross_entropy(model(inputs), labels)


def _batches():
    torch.manual_seed(0)
    inputs, labels = torch.randn(16, 8), torch.randint(0, 2, (16,))
    while True:
        yield inputs, labels


def test_a_cpu_profile_counts_the_measuring_threads_own_time_not_the_wall() -> None:
    """20 ms of sleep in every forward: the wall clock would put >= 20 ms in ``lead_s``; the
    thread's CPU time puts there only what the thread computed (well under 5 ms for 8x2 weights)."""
    model = _Sleepy(0.020)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    found = measure_step(model, optimizer, _loss, _batches(), torch.device("cpu"), check_load=False)
    assert found.lead_s < 0.005, found
    assert found.clock == "thread CPU time, 1 thread" and found.threads == 1
    assert found.cpu_share < 0.5  # the thread ran a small part of each (sleeping) step's wall time
    assert found.windows == 4 and found.steps >= 8
    assert len(found.ready_s) == 2 and all(0 <= r <= found.backward_s * 1.5 for r in found.ready_s)


def _measurement(**changes) -> Measurement:
    base = dict(
        lead_s=0.01, backward_s=0.02, optimizer_s=0.001, ready_s=(0.01,), steps=9, windows=3, spread=0.02,
        clock="thread CPU time, 1 thread", threads=1, cpu_share=0.9, runnable=2, cores=2,
        measured_at="2026-11-28 15:00 UTC", host="here",
    )  # fmt: skip
    return Measurement(**{**base, **changes})


def test_busy_reason_names_the_spread_or_the_share_and_passes_a_quiet_measurement() -> None:
    assert busy_reason(_measurement()) == ""
    assert "windows differ by 20% (limit 15%; 7 runnable tasks on 2 cores)" in busy_reason(
        _measurement(spread=0.20, runnable=7)
    )
    assert "the measuring thread ran 40% of the time (at least 50% needed" in busy_reason(_measurement(cpu_share=0.4))


def test_a_busy_machine_is_refused_in_one_line_and_nothing_is_cached(home, monkeypatch, cli_here) -> None:
    monkeypatch.setenv("DLCOMM_PROFILES", str(home / "profiles"))
    monkeypatch.delenv("DLCOMM_PROFILE_BUSY", raising=False)
    monkeypatch.setattr(profile_measure, "SPREAD_LIMIT", -1.0)  # every measurement is "too noisy"
    refused = cli_here(home, "profile", *FAST, "model=mlp")
    assert refused.returncode == 2
    line = refused.stderr.strip().splitlines()[-1]
    assert line.startswith("dlcomm: error: the machine is too busy to measure a compute profile: its windows differ by")
    assert "nothing was cached" in line and "network.compute_ms=" in line and "network.compute_profile=" in line
    assert "Traceback" not in refused.stderr
    assert not list((home / "profiles").glob("*.json"))
    # the same refusal stops a run before anything is recorded
    run = cli_here(home, "train", *FAST, "model=mlp", "launcher=threads", "network=eth_10g", "train.max_steps=2")
    assert run.returncode == 2 and "too busy to measure" in run.stderr
    assert not (home / "results" / "mlflow.db").exists() or "mlflow run" not in run.stdout


def test_a_damaged_cache_entry_is_measured_again_and_said(home, monkeypatch, cli_here) -> None:
    monkeypatch.setenv("DLCOMM_PROFILES", str(home / "profiles"))
    first = cli_here(home, "profile", *FAST, "model=mlp")
    assert first.returncode == 0, first.stderr
    (cached,) = (home / "profiles").glob("*.json")
    for garbage in ("", "{not json", "[1, 2]", json.dumps({"lead_s": 1})):
        cached.write_text(garbage)
        again = cli_here(home, "profile", *FAST, "model=mlp")
        assert again.returncode == 0, again.stderr
        assert "the cached copy was damaged" in again.stdout, (garbage, again.stdout)
        assert ComputeProfile.from_json(cached.read_text()).step_s > 0


def test_dlcomm_profile_refuses_what_train_refuses_in_one_line(home, cli_here) -> None:
    """vgg16 on 28x28 synthetic images: five poolings leave nothing (torch: "Output size is too small")."""
    result = cli_here(home, "profile", "dataset=synthetic", "model=vgg16")
    trained = cli_here(home, "train", "dataset=synthetic", "model=vgg16")
    assert result.returncode == trained.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == trained.stderr.strip().splitlines()[-1]


def test_a_profile_of_another_host_is_never_found_in_the_cache(home, monkeypatch, cli_here) -> None:
    monkeypatch.setenv("DLCOMM_PROFILES", str(home / "profiles"))
    assert cli_here(home, "profile", *FAST, "model=mlp").returncode == 0
    monkeypatch.setattr(profile_module.platform, "node", lambda: "another-host")
    other = cli_here(home, "profile", *FAST, "model=mlp")
    assert other.returncode == 0 and "measured now" in other.stdout
    assert len(list((home / "profiles").glob("*.json"))) == 2


def test_every_screen_of_a_run_names_its_profile(home, monkeypatch, cli_here) -> None:
    """The opening line, the done line and the MLflow tags name the profile, its spread and origin."""
    monkeypatch.setenv("DLCOMM_PROFILES", str(home / "profiles"))
    common = ["train", *FAST, "model=mlp", "launcher=threads", "network=eth_10g", "train.max_steps=3"]
    first = cli_here(home, *common)
    assert first.returncode == 0, first.stderr
    printed = first.stdout + first.stderr
    assert "dlcomm: compute profile: mlp b" in printed and "measured now, cached in" in printed
    done = next(line for line in first.stdout.splitlines() if line.startswith("done: "))
    assert ", compute profile " in done and "ms/step ±" in done
    tags = mlflow_run(first).data.tags
    profile = ComputeProfile.from_json((home / "results" / "runs" / first.run_id / "compute_profile.json").read_text())
    assert tags["profile_ms"] == f"{profile.step_s * 1e3:.3f}"
    assert tags["profile"] == profile.provenance() and "thread CPU time" in tags["profile"]
    assert tags["profile_origin"].startswith("read from the cache")  # measured by this command, just before the run
    assert tags["profile_host"] and tags["profile_measured_at"].endswith("UTC")
    second = cli_here(home, *common)
    assert "read from the cache" in second.stdout + second.stderr
    assert mlflow_run(second).data.tags["profile_ms"] == tags["profile_ms"]


def test_a_shipped_profile_is_one_override_listed_with_its_provenance(home, monkeypatch, cli_here) -> None:
    """A library of one profile (as gpu_profiles.sh writes them): `--explain network` lists it with
    its device and date, `network.compute_profile=<device>/<workload>` charges it, and the run
    names it as the shipped profile; an unknown name is refused in one line that lists the library."""
    import dlcomm.profiles as library

    monkeypatch.setattr(library, "LIBRARY", home / "library")
    measured = cli_here(
        home, "profile", *FAST, "model=mlp", "--out", str(home / "library" / "testgpu" / "mlp_b64_fp32.json")
    )
    assert measured.returncode == 0, measured.stderr
    shipped = ComputeProfile.from_json((home / "library" / "testgpu" / "mlp_b64_fp32.json").read_text())
    listed = cli_here(home, "config", "--explain", "network")
    assert listed.returncode == 0, listed.stderr
    line = next(row for row in listed.stdout.splitlines() if "testgpu/mlp_b64_fp32" in row)
    assert f"{shipped.step_s * 1e3:.2f} ms per step" in line and shipped.device in line and shipped.measured_at in line
    common = ["train", *FAST, "model=mlp", "launcher=threads", "network=eth_10g", "train.max_steps=3"]
    run = cli_here(home, *common, "network.compute_profile=testgpu/mlp_b64_fp32")
    assert run.returncode == 0, run.stderr
    assert mlflow_run(run).data.tags["profile_origin"] == "the shipped profile testgpu/mlp_b64_fp32"
    assert mlflow_run(run).data.tags["profile_ms"] == f"{shipped.step_s * 1e3:.3f}"
    wrong = cli_here(home, *common, "network.compute_profile=testgpu/nothing")
    assert wrong.returncode == 2 and "pick a shipped one (testgpu/mlp_b64_fp32)" in wrong.stderr


def test_dlcomm_profile_leaves_the_launchers_checks_out(home, tmp_path, monkeypatch, cli_here) -> None:
    """A SLURM preset profiled on a GPU node without sbatch: `dlcomm profile` steps one replica here
    and launches nothing, so the launcher's refusal is train's alone."""
    monkeypatch.setenv("DLCOMM_PROFILES", str(home / "profiles"))
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # no sbatch on it
    trained = cli_here(home, "train", *FAST, "model=mlp", "launcher=slurm")
    assert trained.returncode == 2 and "no sbatch on PATH" in trained.stderr
    profiled = cli_here(home, "profile", *FAST, "model=mlp", "launcher=slurm")
    assert profiled.returncode == 0, profiled.stderr
