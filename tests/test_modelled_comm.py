"""Every algorithm's modelled communication per iteration against its closed form.

Setting: 4 workers on 2 nodes (ranks 0, 1 and 2, 3; leaders 0 and 2), every link, inside a
node or between nodes, ``alpha = 1 ms`` and ``beta = 0.1 Gb/s``, and the two-layer model of
``rank_programs._mlp``: parameter tensors of 384, 24, 96 and 16 bytes (520 in all), segments of
408 and 112 bytes. An iteration's modelled communication sums the cost model's durations of the
collectives a rank joins and of the messages it sends: a message counts once, at its sender
(the receive only moves the receiver's clock), so a rank that sends one message of ``S`` bytes
and receives one has ``alpha + S/beta``, not twice that.
"""

from __future__ import annotations

from functools import partial

import pytest

from dlcomm.comm import cost
from dlcomm.launch import harness
from uniform_network import LINK, NETWORK

import rank_programs

# The rank programs run as threads on the in-process fabric (launcher=threads): they test the
# algorithms, not processes (those are tests/test_inprocess.py's and test_threads_launcher.py's).
run_ranks = partial(harness.run_ranks, in_process="serial")

TENSORS = (384, 24, 96, 16)  # bytes of each parameter tensor
SEGMENTS = (408, 112)  # the model's two top-level blocks
MODEL = sum(TENSORS)


def m(nbytes: float) -> float:
    """One message: ``alpha + S/beta``."""
    return cost.point_to_point_s(nbytes, LINK)


def ring(nbytes: float, p: int) -> float:
    return cost.ring_allreduce_s(nbytes, [LINK] * p)


def tree(nbytes: float, p: int) -> float:
    return cost.tree_broadcast_s(nbytes, p, lambda a, b: LINK)


def _run(cases: list, services: tuple[str, ...] = ()) -> dict:
    """Every case on one set of 4 worker processes: ``{case name: [worker results by rank]}``."""
    by_rank = run_ranks(
        rank_programs.modelled_comm_per_step,
        4,
        [case[1:] for case in cases],
        nodes=2,
        network=NETWORK,
        services=services,
        timeout=300,
    )
    workers = [results for results in by_rank if results[0]["role"] == "worker"]
    return {case[0]: [results[index] for results in workers] for index, case in enumerate(cases)}


@pytest.fixture(scope="module")
def runs() -> dict:
    """Each algorithm once (a few steps); the parameter servers on a job with a server process."""
    cases = [(name, name, knobs, 1) for name, knobs, _ in COLLECTIVES + MESSAGES]
    cases += [
        ("local_sesgd", "local_sesgd", {"groups": 2, "period": 2}, 2),
        ("crossover_unfair", "crossover", {"fair": False}, 3),
        ("gossip_pull", "gossip_pull", {"period": 1, "overlap": "none"}, 2),
    ]
    servers = [(name, name, knobs, 2) for name, knobs in PARAMETER_SERVERS]
    return {**_run(cases), **_run(servers, services=("server",))}


def test_the_closed_forms_are_what_the_cost_model_says() -> None:
    """The helpers above, by hand: 1 ms + S / 12.5 MB/s."""
    assert m(520) == pytest.approx(1e-3 + 520 / 12.5e6)
    assert ring(520, 4) == pytest.approx(6 * (1e-3 + 130 / 12.5e6))
    assert tree(520, 2) == pytest.approx(m(520)) and tree(520, 4) == pytest.approx(2 * m(520))


# name, knobs, steps, services, closed form of the last step for (rank, is_leader)
COLLECTIVES = [
    ("allreduce", {}, lambda leader: ring(MODEL, 4)),
    ("local_sgd", {"period": 1}, lambda leader: ring(MODEL, 4)),
    ("allreduce_hier", {}, lambda leader: tree(MODEL, 2) + (ring(MODEL, 2) if leader else 0.0) + tree(MODEL, 2)),
    ("node_based", {"k_prime": 1}, lambda leader: ring(MODEL, 2) + ring(MODEL, 4)),
]
MESSAGES = [
    ("dpsgd", {}, lambda leader: 2 * m(MODEL)),  # to the left and to the right neighbour
    ("sgp", {}, lambda leader: m(MODEL + 4)),  # the push-sum weight travels in a trailing slot
    ("crossover", {}, lambda leader: sum(m(s) for s in SEGMENTS)),  # fair: one receiver per segment
    (
        "crossover_hier",
        {},
        lambda leader: (
            sum(tree(t, 2) for t in TENSORS)
            + sum(tree(s, 2) for s in SEGMENTS)
            + (sum(m(s) for s in SEGMENTS) if leader else 0.0)
        ),
    ),  # per-tensor reduce, leaders' round, broadcast
    ("sesgd", {"groups": 2}, lambda leader: sum(2 * m(t / 2) for t in TENSORS)),  # each tensor's two halves
]

PARAMETER_SERVERS = [("ps", {}), ("ps_layerdrop", {"ratio": 0.5})]


@pytest.mark.parametrize("name,knobs,expected", COLLECTIVES + MESSAGES, ids=[c[0] for c in COLLECTIVES + MESSAGES])
def test_modelled_communication_per_iteration_is_the_closed_form(runs, name, knobs, expected) -> None:
    for rank, result in enumerate(runs[name]):
        assert result["modelled"][0] == pytest.approx(expected(result["leader"]), rel=1e-9), (name, rank)


def test_local_sesgd_communicates_only_at_the_end_of_a_period(runs) -> None:
    for result in runs["local_sesgd"]:
        assert result["modelled"] == pytest.approx([0.0, sum(2 * m(t / 2) for t in TENSORS)], rel=1e-9)


def test_unfair_crossover_sends_as_many_copies_as_there_are_receivers(runs) -> None:
    """Every rank receives one copy of each segment, so the four ranks send four of each in all."""
    results = runs["crossover_unfair"]
    for step in range(3):
        total = sum(result["modelled"][step] for result in results)
        assert total == pytest.approx(4 * sum(m(s) for s in SEGMENTS), rel=1e-9), step


def test_a_pull_counts_once_at_the_puller(runs) -> None:
    for result in runs["gossip_pull"]:
        assert result["modelled"] == pytest.approx([m(MODEL)] * 2, rel=1e-9)


@pytest.mark.parametrize("name", [name for name, _ in PARAMETER_SERVERS])
def test_a_parameter_server_worker_counts_its_header_and_its_payload(runs, name) -> None:
    """A worker sends a header of 5 floats and the layers it keeps (4 bytes when it keeps none);
    the server's answers count on the server, whose receives count nothing."""
    for result in runs[name]:
        for step, keep in enumerate(result["sent"]):
            payload = sum(size for size, kept in zip(TENSORS, keep) if kept) or 4
            assert result["modelled"][step] == pytest.approx(m(20) + m(payload), rel=1e-9), (name, step, keep)


def _one_worker_run(tmp_path, name: str) -> dict:
    from dlcomm.compose import compose
    from dlcomm.data import build_dataset
    from dlcomm.spec import RunSpec

    cfg = compose(
        [
            "nodes=1",
            "algo=allreduce",
            "model=mlp",
            "dataset=synthetic",
            "dataset.train_size=64",
            "dataset.test_size=32",
            "train.batch_size=8",
            "train.max_steps=8",  # epochs do not end a run with a time budget
            "train.time_budget_s=1000",  # the training clock agreed after every step (max_over_workers)
            "network=eth_1g",  # simulate: every collective's entry clock is max-reduced
            "network.compute_ms=2.5",  # the simulated clock's numbers depend on nothing measured
            "network.launch_us=40",  # and a collective of one takes modelled time
            "train.save_model=false",
        ]
    )
    spec = RunSpec.from_config(cfg, tracking_uri="").with_run("test", tmp_path / name)
    (tmp_path / name).mkdir()
    program = rank_programs.train_counting_all_reduces
    return run_ranks(program, 1, spec, build_dataset(cfg.dataset), nodes=1, timeout=60)[0]


def test_a_one_worker_run_exchanges_no_clocks_and_keeps_the_clocks_numbers(tmp_path, monkeypatch) -> None:
    """A reduction over a group of one is the rank's own value: the payload's all_reduce, the
    modelled clock's entry-clock exchange and the training clock's agreement ask the transport
    for nothing (before: three gloo calls a step under launcher=local), and every number of the
    run (loss, accuracy, modelled clock, bytes) is what the exchanges gave."""
    from dlcomm.comm.channel import Channel

    alone = _one_worker_run(tmp_path, "alone")
    steps = alone["summary"]["final/steps"]
    assert steps == 8
    assert alone["all_reduce"] == []

    monkeypatch.setattr(Channel, "sole_member", lambda self, group: False)  # exchange as in a group of many
    exchanged = _one_worker_run(tmp_path, "exchanged")
    maxima = [call for call in exchanged["all_reduce"] if call[1] == "max"]
    assert len(maxima) >= 2 * steps  # an entry clock and the training clock, a step
    assert len([call for call in exchanged["all_reduce"] if call[1] == "sum"]) >= steps  # the payloads
    modelled = ("sim_", "clock_time_s", "comm_modelled", "bytes_sent", "train_loss", "test_acc_mean", "steps")
    numbers = {key: value for key, value in alone["summary"].items() if any(name in key for name in modelled)}
    assert len(numbers) >= 10 and numbers["final/sim_time_s"] == pytest.approx(8 * 2.5e-3)
    assert numbers == {key: exchanged["summary"][key] for key in numbers}
