"""The simulated clock's compute from a profile (issue 35, item 1) and its stragglers (item 2): the
charge moves only at the step's instants, is the same under every launcher and rank count, and the
jitter's draws are the distribution they claim. Whole runs go through ``cli.main`` in-process
(launcher=threads) or as a process (launcher=local)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from dlcomm.config.schema import NetworkConfig
from dlcomm.train.loop import hooked_step
from dlcomm.train.profile import ComputeProfile, ProfiledCompute, step_factor

from conftest import FAST, mlflow_run


class _NoComm:
    accumulating = False

    def found_inf_group(self):
        return None

    def before_step(self, step):
        pass

    def reduce_gradients(self, step):
        pass

    def after_step(self, step):
        pass


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))


def _loss(model, inputs, labels):
    return torch.nn.functional.cross_entropy(model(inputs), labels)


PROFILE = ComputeProfile(lead_s=0.010, backward_s=0.020, optimizer_s=0.005, ready_s=(0.018, 0.016, 0.006, 0.004))


def test_the_charge_moves_only_at_the_step_instants_and_a_hook_sees_its_ready_time() -> None:
    model = _model()
    factors = {0: 1.0, 1: 2.0}
    compute = ProfiledCompute(PROFILE, factors.__getitem__, model)
    seen: list[float] = []  # what an algorithm's gradient hook (registered after) reads
    for param in model.parameters():
        param.register_post_accumulate_grad_hook(lambda p: seen.append(compute()))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    inputs, labels = torch.randn(8, 4), torch.randint(0, 2, (8,))
    hooked_step(_NoComm(), model, optimizer, _loss, inputs, labels, 0, meter=compute)
    assert compute() == pytest.approx(PROFILE.step_s)
    # backward visits the last layer first: parameters 3, 2 (its bias and weight), then 1, 0
    assert sorted(seen) == pytest.approx(sorted(PROFILE.lead_s + r for r in PROFILE.ready_s))
    seen.clear()
    hooked_step(_NoComm(), model, optimizer, _loss, inputs, labels, 1, meter=compute)
    assert compute() == pytest.approx(PROFILE.step_s * 3)  # the second step at factor 2
    assert min(seen) == pytest.approx(PROFILE.step_s + 2 * (PROFILE.lead_s + min(PROFILE.ready_s)))


def test_with_micro_batches_hooks_are_charged_on_the_last_backward_only() -> None:
    model = _model()
    compute = ProfiledCompute(PROFILE, lambda step: 1.0, model)
    seen: list[float] = []
    for param in model.parameters():
        param.register_post_accumulate_grad_hook(lambda p: seen.append(compute()))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    hooked_step(
        _NoComm(),
        model,
        optimizer,
        _loss,
        torch.randn(8, 4),
        torch.randint(0, 2, (8,)),
        0,
        micro_batches=2,
        meter=compute,
    )
    assert seen[:4] == [0.0] * 4  # the first micro-batch's backward: before the profile's lead ends
    assert sorted(seen[4:]) == pytest.approx(sorted(PROFILE.lead_s + r for r in PROFILE.ready_s))


def test_a_profile_of_another_model_is_refused() -> None:
    with pytest.raises(ValueError, match="has 3 parameters, the model 4"):
        ProfiledCompute(ComputeProfile(0.01, 0.01, 0.01, (0.0, 0.0, 0.0)), lambda step: 1.0, _model())


def test_compute_ms_keeps_the_shape_and_sets_the_step() -> None:
    scaled = PROFILE.with_step_s(0.070)
    assert scaled.step_s == pytest.approx(0.070)
    assert scaled.lead_s / scaled.backward_s == pytest.approx(PROFILE.lead_s / PROFILE.backward_s)
    assert ComputeProfile.from_json(scaled.to_json()) == scaled


def test_the_jitter_is_lognormal_with_mean_1_and_the_asked_coefficient_of_variation() -> None:
    network = NetworkConfig(compute_jitter=0.3, straggler_prob=0.0)
    draws = np.array([step_factor(network, 7, 3)(step) for step in range(20000)])
    assert draws.mean() == pytest.approx(1.0, rel=0.01)
    assert draws.std() / draws.mean() == pytest.approx(0.3, rel=0.03)
    assert step_factor(network, 7, 3)(11) == step_factor(network, 7, 3)(11)  # (seed, rank, step) decide
    assert step_factor(network, 7, 3)(11) != step_factor(network, 7, 4)(11)


def test_stragglers_and_per_rank_factors() -> None:
    network = NetworkConfig(straggler_prob=0.1, straggler_slowdown=3.0, rank_compute_scale=[1.0, 1.5])
    draws = np.array([step_factor(network, 0, 1)(step) for step in range(20000)])
    assert set(np.round(draws, 9)) == {1.5, 4.5}
    assert (draws == 4.5).mean() == pytest.approx(0.1, abs=0.01)
    assert step_factor(NetworkConfig(), 0, 0)(5) == 1.0


def _profile_file(tmp_path, lead=0.010, backward=0.020, optimizer=0.005) -> str:
    """A profile with round numbers for the synthetic MLP (its 6 parameters ready evenly in backward)."""
    path = tmp_path / "profile.json"
    ready = tuple(backward * (6 - i) / 6 for i in range(6))  # the first layer's last
    path.write_text(ComputeProfile(lead, backward, optimizer, ready).to_json())
    return str(path)


def _one_bucket_on_the_profile(profile: str) -> list[str]:
    """3 steps at 10 Gb/s simulated, compute from ``profile``, one bucket allreduced after backward."""
    return [
        "network=eth_10g",
        "network.compute=profile",
        f"network.compute_profile={profile}",
        "train.max_steps=3",
        "algo.overlap=false",
        "algo.bucket_mb=1000",
    ]


def _run(cli_here, home, *overrides: str) -> pd.DataFrame:
    """A short threads run of the MLP with ``overrides``, in this process; its timings.csv."""
    result = cli_here(home, "train", *FAST, "model=mlp", "launcher=threads", "train.epochs=1", *overrides)
    assert result.returncode == 0, result.stderr
    return pd.read_csv(home / "results" / "runs" / result.run_id / "timings.csv")


def test_allreduce_at_16_workers_is_the_profiled_step_plus_the_modelled_allreduce(tmp_path, cli_here) -> None:
    """No overlap, one bucket: every rank's simulated iteration = lead + backward, then the
    allreduce (everyone starts together), then the optimizer; compute per iteration identical at
    1 and 16 workers."""
    from dlcomm.comm.layout import ClusterLayout
    from dlcomm.comm.network import NetworkModel

    profile = _profile_file(tmp_path)
    common = _one_bucket_on_the_profile(profile)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    many = _run(cli_here, tmp_path / "a", "nodes=16", *common)
    one = _run(cli_here, tmp_path / "b", "nodes=1", *common)
    assert set(many["sim_compute_s"].round(12)) == set(one["sim_compute_s"].round(12)) == {0.035}
    params = sum(
        p.numel()
        for p in torch.nn.Sequential(
            torch.nn.Linear(784, 512), torch.nn.Linear(512, 256), torch.nn.Linear(256, 10)
        ).parameters()
    )
    from dlcomm.compose import compose

    network = NetworkModel.from_config(compose(["network=eth_10g"]).network, ClusterLayout(16, 1))
    allreduce_s = network.allreduce_s(4 * params, range(16))
    assert many["sim_time_s"].to_numpy() == pytest.approx(0.035 + allreduce_s, rel=1e-9)


@pytest.mark.parametrize("algo", ["allreduce", "ps"])
def test_the_same_job_gives_the_same_simulated_figures_under_threads_and_local(home, tmp_path, algo, cli_here) -> None:
    """ps: the server's clock, which the workers wait on, is charged the profile's optimizer step
    for its update (not its own measured time), so it too is the same under both launchers. Both
    runs go through ``cli.main`` in this process (an interpreter start saved): the threads run's
    ranks are its threads, the local run's ranks processes of the fork server either way."""
    overrides = [
        *FAST,
        "model=mlp",
        "nodes=4",
        "train.max_steps=8",
        "train.epochs=1",
        "network=eth_10g",
        f"algo={algo}",
        "network.compute=profile",
        f"network.compute_profile={_profile_file(tmp_path)}",
        "network.compute_jitter=0.2",
    ]
    tables = []
    for launcher in ("threads", "local"):
        result = cli_here(home, "train", *overrides, f"launcher={launcher}")
        assert result.returncode == 0, result.stderr
        timings = pd.read_csv(result.run_dir / "timings.csv").sort_values(["rank", "step"]).reset_index(drop=True)
        tables.append(timings[[c for c in timings.columns if c.startswith("sim_")]])
        if algo == "ps":
            assert mlflow_run(result).data.metrics["final/ps_server_compute_s"] == pytest.approx(0.005, rel=1e-6)
    pd.testing.assert_frame_equal(tables[0], tables[1], check_exact=True)


def _expected_max(n: int, c: float, draws: int = 200_000) -> float:
    """E[max of n lognormal factors of mean 1, coefficient of variation c], by an independent Monte Carlo."""
    sigma = math.sqrt(math.log1p(c * c))
    rng = np.random.default_rng(12345)
    return float(rng.lognormal(-sigma * sigma / 2, sigma, size=(draws // n, n)).max(axis=1).mean())


@pytest.mark.slow  # two 16-rank runs, 40 s here
def test_with_jitter_allreduce_waits_for_the_slowest_and_gossip_grows_more_slowly(tmp_path, cli_here) -> None:
    """Acceptance: the simulated AllReduce step at n workers = E[max of n draws] x step (the links
    nearly free), within 3% over 200 steps, at 2 and 8 workers; D-PSGD's step grows more slowly from
    2 to 8 workers (a rank waits only for its neighbours, not for the slowest of all)."""
    c = 0.3
    profile = _profile_file(tmp_path, lead=0.010, backward=0.020, optimizer=0.0)
    common = [
        "network=eth_10g",
        "network.inter.latency_ms=0",
        "network.inter.bandwidth_gbps=100000",
        "network.compute=profile",
        f"network.compute_profile={profile}",
        f"network.compute_jitter={c}",
        "train.max_steps=200",
        "dataset.train_size=20000",
        "train.batch_size=4",
        "train.eval_size=64",
    ]
    step: dict[tuple[str, int], float] = {}
    for n in (2, 8):
        for algo in ("allreduce", "dpsgd"):
            (tmp_path / f"{algo}{n}").mkdir()
            extra = ["algo.overlap=false"] if algo == "allreduce" else []
            timings = _run(cli_here, tmp_path / f"{algo}{n}", f"nodes={n}", f"algo={algo}", *extra, *common)
            # the clock's long-run rate: simulated training time over the steps, mean over ranks
            step[algo, n] = timings.groupby("rank")["sim_time_s"].sum().mean() / timings["step"].nunique()
        assert step["allreduce", n] == pytest.approx(_expected_max(n, c) * 0.030, rel=0.03)
    print(
        {key: round(value * 1e3, 3) for key, value in step.items()},
        "ms; E[max] x 30 ms:",
        [round(_expected_max(n, c) * 30, 3) for n in (2, 8)],
    )
    assert step["dpsgd", 8] / step["dpsgd", 2] < step["allreduce", 8] / step["allreduce", 2]


def test_dlcomm_profile_measures_caches_and_writes_a_profile_a_run_then_uses(home, monkeypatch, cli_here) -> None:
    monkeypatch.setenv("DLCOMM_PROFILES", str(home / "profiles"))
    out = home / "mlp.json"
    measured = cli_here(home, "profile", *FAST, "model=mlp", "--out", str(out))
    assert measured.returncode == 0, measured.stderr
    printed = measured.stdout
    assert "compute profile: mlp b64 fp32: " in printed and "; measured now, cached in" in printed
    assert f"written to {out}" in printed
    profile = ComputeProfile.from_json(out.read_text())
    assert profile.steps >= 8 and len(profile.ready_s) == 6 and profile.step_s > 0
    assert profile.origin == "" and profile.measured_at and profile.host  # a file travels without this machine's path
    assert all(0 <= r <= profile.backward_s * 1.5 for r in profile.ready_s)
    cached = cli_here(home, "profile", *FAST, "model=mlp")
    assert cached.returncode == 0 and "; read from the cache" in cached.stdout, cached.stderr
    timings = _run(cli_here, home, "nodes=2", "network=eth_10g", f"network.compute_profile={out}", "train.max_steps=2")
    assert set(timings["sim_compute_s"].round(12)) <= {round(profile.step_s, 12)}


def test_a_compressors_own_compute_is_charged_beside_the_profile(tmp_path, monkeypatch, cli_here) -> None:
    """The profile holds forward and backward only: under compute=profile a compressor's compute
    blocks are measured where they run and added. With a timer that moves 1 ms per reading, every
    block costs 1 ms: top-k on one bucket at 2 workers is compress, the memory's decompress of its
    own payload, the 2 members' decompressions and their mean, 5 blocks a step; uncompressed, none."""
    import itertools

    import dlcomm.launch.rank as rank_module

    def ticking_timer(device, alone):  # one per rank: ranks that are threads never share its readings
        ticks = itertools.count()
        return lambda: next(ticks) * 1e-3

    monkeypatch.setattr(rank_module, "compute_timer", ticking_timer)
    common = [*_one_bucket_on_the_profile(_profile_file(tmp_path)), "nodes=2"]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    compressed = _run(cli_here, tmp_path / "a", "compress=topk", *common)
    plain = _run(cli_here, tmp_path / "b", *common)
    assert set(plain["sim_compute_s"].round(12)) == {0.035}
    assert set(compressed["sim_compute_s"].round(12)) == {0.035 + 5e-3}
