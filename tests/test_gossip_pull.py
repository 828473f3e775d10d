"""Overlapped pull-gossip: the manager's rules alone, then real processes (workers, manager)."""

from __future__ import annotations

import math

import pytest

from dlcomm.algorithms.pull_schedule import PullManager, scheduled_start, update_time
from dlcomm.launch.harness import run_ranks

import rank_programs

# ---- the rules -------------------------------------------------------------------------------


def test_update_time_replaces_a_far_measurement_and_averages_a_near_one() -> None:
    theta = 0.1
    assert update_time(1.0, 0.5, theta) == 0.5  # below (1 - theta) c: replaced
    assert update_time(1.0, 0.95, theta) == pytest.approx(0.975)  # within (1 - theta) c .. (1 + theta) c: averaged
    assert update_time(1.0, 1.05, theta) == pytest.approx(1.025)
    assert update_time(1.0, 2.0, theta) == 2.0  # at or above (1 + theta) c: replaced
    assert update_time(math.inf, 0.3, theta) == 0.3  # never measured: the measurement


def test_scheduled_start_is_end_minus_transfer_time_clipped_at_now() -> None:
    assert scheduled_start(end=10.0, estimate=3.0, now=2.0) == 7.0
    assert scheduled_start(end=10.0, estimate=9.5, now=2.0) == 2.0  # would have to start in the past
    assert scheduled_start(end=10.0, estimate=math.inf, now=2.0) == 2.0  # unknown pair: at once


def test_the_manager_hands_a_worker_to_one_puller_at_a_time() -> None:
    manager = PullManager(workers=3, theta=0.1)
    first = manager.request(0, end=5.0, now=1.0)
    assert [(a.puller, a.peer, a.start) for a in first] == [(0, 1, 1.0)]  # queue front other than 0; c = inf
    second = manager.request(2, end=6.0, now=1.5)
    assert [(a.puller, a.peer) for a in second] == [(2, 0)]
    assert [(a.puller, a.peer) for a in manager.request(1, end=7.0, now=2.0)] == [(1, 2)]
    assert list(manager.queue) == [] and list(manager.waiting) == []
    # everybody is held now: a fourth request waits until a release
    assert manager.request(0, end=8.0, now=3.0) == []
    answers = manager.release(0, 1, measured=2.0)
    assert [(a.puller, a.peer, a.start) for a in answers] == [(0, 1, 6.0)]  # end 8 - c_01 2
    assert manager.estimate(1, 0) == 2.0  # c_ji follows too
    manager.release(1, 2, measured=1.0)
    with pytest.raises(ValueError):
        manager.release(1, 2, measured=1.0)  # 2 is free again: released twice


def test_a_request_only_its_own_puller_could_take_lets_later_ones_pass() -> None:
    manager = PullManager(workers=2, theta=0.1)
    assert [(a.puller, a.peer) for a in manager.request(0, 1.0, 0.0)] == [(0, 1)]
    assert manager.request(0, 2.0, 0.0) == []  # only 0 is free: 0 cannot pull itself
    assert [(a.puller, a.peer) for a in manager.request(1, 2.0, 0.0)] == [(1, 0)]  # 1 passes the waiting 0


# ---- real processes ----------------------------------------------------------------------------


def _never_two_at_once(results: list[dict]) -> int:
    """Check that no peer was held by two pullers at overlapping times; the number of holds."""
    by_peer: dict[int, list[tuple[float, float]]] = {}
    for puller, result in enumerate(results):
        for peer, granted, released in result["holds"]:
            assert peer != puller
            assert not math.isnan(released), (puller, peer)  # every hold was given back
            by_peer.setdefault(peer, []).append((granted, released))
    for peer, spans in by_peer.items():
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:]):
            assert end <= start, (peer, spans)
    return sum(len(spans) for spans in by_peer.values())


# "": every rank a process; "serial", "parallel": every rank a thread (launcher=threads)
TRANSPORTS = ["", "serial", "parallel"]


@pytest.mark.parametrize("in_process", TRANSPORTS)
def test_managed_pulls_never_hand_a_worker_to_two_pullers(in_process: str) -> None:
    knobs = {"period": 2, "overlap": "scheduled", "scheduler": "managed"}
    results = run_ranks(
        rank_programs.gossip_pull_run, 4, knobs, 24, 0.01, services=("manager",), timeout=120, in_process=in_process
    )
    workers = results[:4]
    assert results[4] == {"role": "manager"}
    holds = _never_two_at_once(workers)
    assert holds >= 12  # most of the 4 x 12 windows got a peer
    # every hold is pulled, but for one per worker at most: an assignment that reaches a worker
    # while it finishes (the manager answered before it saw the CANCEL) is released unpulled
    pulls = sum(w["pulls"] for w in workers)
    assert holds - len(workers) <= pulls <= holds, (pulls, holds)
    assert all(w["pending"] is None and w["assigned"] is None for w in workers)


@pytest.mark.alone  # the collisions need the 5 workers to run at once; a busy second core serialises them
@pytest.mark.parametrize("in_process", TRANSPORTS)
def test_autonomous_reservations_are_exclusive_and_every_conflict_is_resolved(in_process: str) -> None:
    knobs = {"period": 1, "overlap": "naive", "scheduler": "autonomous"}
    results = run_ranks(rank_programs.gossip_pull_run, 5, knobs, 30, 0.005, timeout=120, in_process=in_process)
    holds = _never_two_at_once(results)
    assert holds >= 30
    conflicts = sum(r["conflicts"] for r in results)
    assert conflicts > 0  # 5 workers pulling every step do collide
    assert all(r["resolved"] == r["conflicts"] for r in results)  # each refusal ended in a grant or a given-up round
    assert all(r["pending"] is None and r["assigned"] is None and r["reserved_by"] is None for r in results)


def test_scheduled_pulls_are_fresher_than_naive_ones() -> None:
    """Naive pulls start with the window: the model averaged in is a whole window old; scheduled
    ones start late enough to end with the window (here, within the last steps)."""
    staleness = {}
    for overlap in ("naive", "scheduled"):
        knobs = {"period": 8, "overlap": overlap, "scheduler": "managed"}
        results = run_ranks(
            rank_programs.gossip_pull_run,
            3,
            knobs,
            48,
            0.0,
            services=("manager",),
            timeout=120,
            network={
                "name": "t",
                "mode": "simulate",
                "intra": {"latency_ms": 0.002, "bandwidth_gbps": 800},
                "inter": {"latency_ms": 0.01, "bandwidth_gbps": 100},
                "wide_workers": 0,
                "wide_bandwidth_gbps": 10,
                "worker_bandwidth_gbps": [],
                "compute_scale": 1.0,
            },
        )
        later = [s for r in results[:3] for s in r["staleness"][2:]]  # after c_ij was learnt
        staleness[overlap] = sum(later) / len(later)
    # naive: issued at the window's start, or a step or two later when the answer came late
    assert staleness["naive"] >= 5.0, staleness
    assert staleness["scheduled"] <= 2.0, staleness


# ---- whole runs ---------------------------------------------------------------------------------

GOSSIP = (
    "train",
    "algo=gossip_pull",
    "algo.period=2",
    "nodes=4",
    "dataset=synthetic",
    "model=mlp",
    "network=wan_hetero",
    "train.batch_size=32",
    "train.eval_batch_size=512",
)


@pytest.mark.timeout(180)  # the bound its process had
def test_killing_the_manager_ends_a_managed_run_with_a_clear_error(home, cli_here) -> None:
    """The manager is a rank process (launcher=local) killed by SIGKILL; the driver, through cli.main in
    this process (an interpreter start saved), names it and fails the run."""
    from conftest import mlflow_run

    result = cli_here(home, *GOSSIP, "train.epochs=400", "debug.fail_rank=4", "debug.fail_step=4")
    assert result.returncode == 1
    assert "rank 4 (manager) was killed by SIGKILL" in result.stderr
    assert mlflow_run(result).info.status == "FAILED"


@pytest.mark.timeout(180)  # the bound its process had
def test_an_autonomous_run_has_no_manager_to_lose(home, cli_here) -> None:
    """The same fault aimed at rank 4: in an autonomous run there is no rank 4, so the fault could not
    happen and is refused in one line (issue 49: no knob silently without effect); the run itself
    has no manager and finishes. Both through cli.main in this process (the run's ranks are processes of
    its fork server either way)."""
    from dlcomm.algorithms.gossip_pull import GossipPull, GossipPullConfig

    from conftest import mlflow_run

    assert GossipPull.roles(GossipPullConfig(scheduler="autonomous")) == ()
    autonomous = [*GOSSIP, "algo.scheduler=autonomous", "train.epochs=3"]
    refused = cli_here(home, *autonomous, "debug.fail_rank=4", "debug.fail_step=4")
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "dlcomm: error: debug.fail_rank=4 is invalid: this job's ranks are 0 to 3 (4 workers); pass one of them, "
        "or -1 for no fault"
    ]
    result = cli_here(home, *autonomous)
    assert result.returncode == 0, result.stderr
    run = mlflow_run(result)
    assert run.info.status == "FINISHED"
    assert run.data.metrics["final/steps"] == 96  # 4096 samples / 4 workers / 32 x 3 epochs
    # the algorithm's statistics in MLflow: staleness per epoch and per averaging step, counts per worker
    from mlflow.tracking import MlflowClient

    client = MlflowClient(result.tracking_uri)
    staleness = client.get_metric_history(run.info.run_id, "epoch/pull_staleness_steps")
    assert sorted(point.step for point in staleness) == [1, 2, 3] and all(point.value >= 0 for point in staleness)
    assert client.get_metric_history(run.info.run_id, "iter/pull_staleness_steps")
    metrics = run.data.metrics
    assert metrics["final/pulls"] > 0 and metrics["final/pulls_served"] > 0 and metrics["final/pull_conflicts"] >= 0
    assert metrics["final/pull_staleness_steps"] >= 0
    # a pull's answer is its server's traffic (sent from the responder thread, outside any iteration):
    # the bytes the workers sent are exactly the models they served, M = 4 bytes x the MLP's parameters
    from dlcomm.models.registry import build_model
    from dlcomm.models.small import MLPConfig

    model_bytes = 4 * sum(p.numel() for p in build_model(MLPConfig(name="mlp"), (1, 28, 28), 10).parameters())
    served = metrics["final/bytes_sent_per_iter"] * metrics["final/steps"]  # per worker: mean x steps
    assert served == pytest.approx(metrics["final/pulls_served"] * model_bytes, rel=1e-9)
    # the busiest iteration served whole models (several when the others' windows ended meanwhile)
    peak = metrics["final/peak_bytes_sent_per_iter"]
    assert peak >= model_bytes and peak % model_bytes == 0


def test_a_time_budget_stops_every_worker_after_the_same_step_and_logs_accuracy_against_time(home) -> None:
    from conftest import mlflow_run, run_cli

    result = run_cli(
        home,
        *GOSSIP,
        "algo.overlap=none",
        "train.epochs=1000",
        "train.time_budget_s=0.5",
        "train.eval_every_s=0.2",
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    run = mlflow_run(result)
    metrics = run.data.metrics
    assert 0.5 <= metrics["final/clock_time_s"] < 0.5 + 0.2  # stopped at the first check past the budget
    assert metrics["final/sim_time_s"] <= metrics["final/clock_time_s"] + 1e-9
    from mlflow.tracking import MlflowClient

    history = MlflowClient(result.tracking_uri).get_metric_history(run.info.run_id, "clock/time_s")
    times = [point.value for point in history]
    assert len(times) >= 3 and times == sorted(times) and times[0] >= 0.0
    assert metrics["final/best_test_acc_mean"] >= metrics["final/test_acc_mean"] - 1e-12
    assert "best test accuracy" in result.stdout


def test_a_responder_waits_out_a_quiet_spell_longer_than_the_job_timeout() -> None:
    """Peers that evaluate for minutes send nothing meanwhile: the responder's any-source receive
    must not time out (a timed-out gloo receive closed the pairs under the training collectives)."""
    received, _ = run_ranks(rank_programs.control_quiet_spell, 2, 4.0, cluster_timeout_s=2.0, timeout=60)
    assert received[0] == 1 and received[1][:2] == [7.0, 42.0]
