"""Compressors inside the algorithms: what travels is the payload (``bytes_sent`` and the
modelled time are the compressor's payload sizes through the cost model), every compressor runs
with every algorithm that carries it, and a combination that does not is refused before launch
in one line, exit 2."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

from dlcomm.algorithms.registry import ALGORITHMS
from dlcomm.comm import cost, traffic
from dlcomm.compress.registry import COMPRESSORS
from dlcomm.compress.topk import kept
from dlcomm.launch import harness
from uniform_network import LINK, NETWORK

import rank_programs
from conftest import FAST

# the algorithms, not processes: ranks are threads on the in-process fabric
run_ranks = partial(harness.run_ranks, in_process="serial")

WORLD = 4


def _payload_bytes(name: str, numel: int) -> int:
    """A bucket's payload as each compressor defines it (values + indices + scales)."""
    if name == "topk":
        return kept(numel, 0.05) * (4 + 4)  # float32 values, int32 indices
    if name == "qsgd":
        return numel * 1 + -(-numel // 128) * 4  # int8 levels, one float32 norm per 128 entries
    if name == "sign":
        return -(-numel // 8)  # eight signs a byte
    raise AssertionError(name)


@pytest.mark.parametrize("name", ["topk", "qsgd", "sign"])
def test_bytes_sent_and_modelled_time_are_the_payloads_through_the_cost_model(name: str) -> None:
    knobs = {"name": name, **({"ratio": 0.05} if name == "topk" else {})}
    results = run_ranks(rank_programs.compressed_trajectory, WORLD, knobs, 3, 0.0, nodes=WORLD, network=NETWORK)
    buckets = results[0]["buckets"]  # bucket_mb=0: one bucket a parameter tensor
    payloads = [_payload_bytes(name, sum(sizes)) for sizes in buckets]
    expected_bytes = sum(traffic.ring_allgather_traffic(size, WORLD)[0] for size in payloads)
    expected_modelled = sum(cost.ring_allgather_s(size, [LINK] * WORLD) for size in payloads)
    for result in results:
        assert result["bytes"] == [expected_bytes] * 3
        assert result["modelled"] == pytest.approx([expected_modelled] * 3, rel=1e-9)
    uncompressed = sum(traffic.ring_allreduce_traffic(4 * sum(sizes), WORLD)[0] for sizes in buckets)
    # what compression is for; an all-gather sends (W-1) S to a ring allreduce's 2 (W-1)/W x 4 bytes an entry
    assert expected_bytes < uncompressed / {"topk": 5, "qsgd": 1.9, "sign": 15}[name]


def test_summable_compressors_allreduce_their_payloads() -> None:
    results = run_ranks(
        rank_programs.compressed_trajectory, WORLD, {"name": "fp16"}, 2, 0.0, nodes=WORLD, network=NETWORK
    )
    buckets = results[0]["buckets"]
    expected = sum(traffic.ring_allreduce_traffic(2 * sum(sizes), WORLD)[0] for sizes in buckets)
    assert results[0]["bytes"] == [expected, expected]


@pytest.mark.parametrize(
    ("algo", "knobs"),
    [("local_sgd", {"period": 2}), ("allreduce_hier", {}), ("node_based", {"k_prime": 1})],
    ids=["local_sgd", "allreduce_hier", "node_based"],
)
def test_a_lossless_compressor_gives_the_uncompressed_numbers(algo: str, knobs: dict) -> None:
    """top-k of every entry (ratio 1) loses nothing: Local-SGD's compressed rule (the average of
    the changes since the last averaging, added to it), the hierarchical leaders' compressed
    stage (the mean of the node sums over workers_per_node) and node-based's two levels (the node's
    gradient, the change since the last consensus point) give the plain algorithm's parameters.
    (node-based with a consensus point every step: a local step after one moves a max-pool's argmax
    on a rounding-level difference, 3e-8 -> 3e-5 here, as in test_cli_runs' 4 x 16 = 1 x 64.)"""
    lossless = {"name": "topk", "ratio": 1.0, "error_feedback": True}
    plain = run_ranks(rank_programs.compressed_trajectory, WORLD, {"name": "none"}, 4, 0.0, algo, knobs, nodes=2)
    compressed = run_ranks(rank_programs.compressed_trajectory, WORLD, lossless, 4, 0.0, algo, knobs, nodes=2)
    for ours, theirs in zip(compressed, plain):
        assert float(np.abs(ours["params"] - theirs["params"]).max()) <= 1e-6
    lossy = run_ranks(
        rank_programs.compressed_trajectory, WORLD, {**lossless, "ratio": 0.01}, 4, 0.0, algo, knobs, nodes=2
    )
    assert float(np.abs(lossy[0]["params"] - plain[0]["params"]).max()) > 1e-4  # the comparison can fail


TENSOR_PAIRS = [
    pytest.param(algo, name, id=f"{algo}+{name}")
    for algo, cls in sorted(ALGORITHMS.all().items())
    if set(cls.compression) & {"tensor", "payload"}
    for name, codec in sorted(COMPRESSORS.all().items())
    if set(codec.kinds) & set(cls.compression) and not codec.identity
]
KNOBS = {
    "local_sgd": {"period": 1},
    "diloco": {"period": 1},
    "muloco": {"period": 1},
    "streaming_diloco": {"period": 1, "fragments": 1, "overlap_steps": 0, "alpha": 0.0},  # DiLoCo's restart
    "node_based": {"k_prime": 1},
    "sesgd": {"groups": 2},
    "local_sesgd": {"groups": 2},
}  # average every step: the replicas are equal after each


@pytest.mark.parametrize(("algo", "name"), TENSOR_PAIRS)
def test_every_compressor_runs_with_every_algorithm_that_carries_it(algo: str, name: str) -> None:
    """Five steps of each (algorithm, compressor) pair, 2 nodes x 2 workers: the parameters moved,
    and where every replica steps with the same aggregate (not gossip) they stay equal."""
    knobs = {"name": name, **({"start_iter": 2} if name == "powersgd" else {})}
    results = run_ranks(rank_programs.compressed_trajectory, WORLD, knobs, 5, 0.0, algo, KNOBS.get(algo), nodes=2)
    first = results[0]["params"]
    if "tensor" in ALGORITHMS.all()[algo].compression:
        for result in results[1:]:
            assert np.array_equal(result["params"], first)
    initial = run_ranks(rank_programs.compressed_trajectory, 1, {"name": "none"}, 0, 0.0)[0]["params"]
    assert float(np.abs(first - initial).max()) > 1e-4


@pytest.mark.parametrize(("kind", "algo"), [("tensor", "allreduce"), ("layers", "ps")])
def test_every_compressor_trains_through_the_cli_for_five_steps(home, kind: str, algo: str, cli_here) -> None:
    """Composed, launched and recorded: every compressor of a kind with an algorithm that carries it."""
    able = [algo]
    names = sorted(n for n, cls in COMPRESSORS.all().items() if kind in cls.kinds and not cls.identity)
    assert kind in ALGORITHMS.all()[algo].compression and names
    result = cli_here(
        home,
        "train",
        "-m",
        f"algo={','.join(able)}",
        f"compress={','.join(names)}",
        "launcher=threads",
        "nodes=2",
        "train.max_steps=5",
        "train.epochs=1",
        *FAST,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"sweep done: {len(able) * len(names)} of {len(able) * len(names)} runs finished" in result.stdout


@pytest.mark.parametrize("algo", sorted(n for n, cls in ALGORITHMS.all().items() if not cls.compression)[:3])
def test_an_algorithm_that_carries_no_compressor_is_refused_in_one_line(home, algo: str, cli_here) -> None:
    result = cli_here(home, "train", f"algo={algo}", "compress=topk", "launcher=threads", *FAST)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert f"compress=topk is not supported with algo={algo}" in result.stderr
    assert "pass compress=none" in result.stderr


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("compress.ratio=0", "compress.ratio=0.0 is invalid: the fraction of entries sent must be in (0, 1]"),
        ("compress.ratio=1.5", "compress.ratio=1.5 is invalid"),
    ],
)
def test_a_bad_compressor_knob_is_one_line(home, override: str, says: str, cli_here) -> None:
    result = cli_here(home, "config", "compress=topk", override)
    assert result.returncode == 2 and says in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_powersgd_refuses_a_warm_start_without_plain_steps(home, cli_here) -> None:
    result = cli_here(home, "config", "compress=powersgd", "compress.start_iter=1")
    assert result.returncode == 2 and "compress.start_iter=1 is invalid" in result.stderr


@pytest.mark.parametrize(
    ("algo", "name", "algo_knobs"),
    [
        ("allreduce", "powersgd", {"overlap": True}),
        ("allreduce", "topk", {"overlap": True}),
        ("local_sgd", "qsgd", {"period": 1}),
        ("node_based", "powersgd", {"k_prime": 2}),
        ("dpsgd", "sign", None),
        ("crossover", "qsgd", None),
        ("sgp", "randomk", {"overlap": True}),
        ("local_sesgd", "topk", {"groups": 2}),
    ],
)
def test_compressed_runs_pass_under_nccl_rules(algo: str, name: str, algo_knobs: dict | None) -> None:
    """The in-process fabric under NCCL's rules (no buffering, a group's operations matched in
    posting order): what would hang on GPUs hangs here. PowerSGD's three allreduces a bucket (launched
    from backward's hooks with overlap), the
    all-gathers of packed payloads and CHOCO's exchanges all complete, with the numbers of gloo's rules."""
    knobs = {"name": name, **({"start_iter": 2} if name == "powersgd" else {})}
    args = (rank_programs.compressed_trajectory, WORLD, knobs, 4, 0.0, algo, algo_knobs)
    nccl = harness.run_ranks(*args, nodes=2, in_process="serial", semantics="nccl")
    gloo = harness.run_ranks(*args, nodes=2, in_process="serial", semantics="gloo")
    for ours, theirs in zip(nccl, gloo):
        assert np.array_equal(ours["params"], theirs["params"])


RESUME_KNOBS = {
    "node_based": {"k_prime": 2},
    "sesgd": {"groups": 2},
}  # consensus points before and after the checkpoint


@pytest.mark.parametrize(
    ("algo", "knobs"),
    [
        ("allreduce", {"name": "powersgd", "start_iter": 2, "rank": 2}),
        ("allreduce", {"name": "topk", "ratio": 0.05}),
        ("local_sgd", {"name": "qsgd", "error_feedback": True}),
        ("node_based", {"name": "topk", "ratio": 0.1}),
        ("dpsgd", {"name": "topk", "ratio": 0.1}),
        ("crossover", {"name": "topk", "ratio": 0.1}),
        ("sgp", {"name": "topk", "ratio": 0.1}),
        ("sesgd", {"name": "qsgd"}),
    ],
    ids=[
        "powersgd",
        "topk",
        "local_sgd-qsgd",
        "node_based-topk",
        "dpsgd-choco",
        "crossover-choco",
        "sgp-choco",
        "sesgd-choco",
    ],
)
def test_a_resumed_compressed_run_takes_the_steps_of_an_uninterrupted_one(algo: str, knobs: dict) -> None:
    """What a compressor remembers (error feedback, PowerSGD's Qs and its numpy generator, CHOCO's
    public copies, per pair for Crossover, Local-SGD's anchors) goes through a checkpoint loaded with weights_only=True."""
    results = run_ranks(rank_programs.compressed_resume, WORLD, knobs, 6, 3, algo, RESUME_KNOBS.get(algo), nodes=2)
    for result in results:
        assert np.array_equal(result["straight"], result["resumed"])
