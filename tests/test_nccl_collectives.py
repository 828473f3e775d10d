"""network.collectives=nccl: collectives charged as NCCL runs them (docs/network.md, "Collectives
as NCCL runs them"), every expected value computed here by hand; textbook kept as it was."""

from __future__ import annotations

import pytest

from dlcomm.comm import cost
from dlcomm.comm.cost import Link
from dlcomm.comm.layout import ClusterLayout
from dlcomm.comm.network import NetworkModel
from dlcomm.compose import compose

MS = 1e-3
GBIT = 1e9 / 8  # bytes/s
CHUNK = 4 * 2**20 / 8  # NCCL Simple: a 4 MiB buffer in 8 slots = 524,288 bytes
LINK = Link(latency_s=1 * MS, bandwidth_Bps=1e6)  # 1 ms, 1 MB/s: S bytes take S microseconds


def model(preset: str, nodes: int, workers_per_node: int = 1, *overrides: str) -> NetworkModel:
    cfg = compose([f"network={preset}", f"nodes={nodes}", f"workers_per_node={workers_per_node}", *overrides]).network
    return NetworkModel.from_config(cfg, ClusterLayout(nodes=nodes, workers_per_node=workers_per_node))


# ---- the formulas of comm/cost.py ----------------------------------------------------
def test_chain_broadcast_and_reduce_pipeline_chunks_of_512_kib() -> None:
    assert cost.NCCL_CHUNK_BYTES == CHUNK == 524_288
    # p=4 (3 links), S = 2 MB: (p-1) alpha + S/beta + (p-2) C/beta = 3 ms + 2 s + 2 * 0.524288 s
    expected = 0.003 + 2.0 + 2 * 0.524288
    assert cost.chain_broadcast_s(2e6, [LINK] * 3) == pytest.approx(expected)
    assert cost.chain_reduce_s(2e6, [LINK] * 3) == pytest.approx(expected)
    # S below a chunk: one chunk of S through 3 links, (p-1)(alpha + S/beta) = 3 * 2 ms
    assert cost.chain_broadcast_s(1000, [LINK] * 3) == pytest.approx(0.006)
    assert cost.chain_broadcast_s(1000, [LINK]) == pytest.approx(0.002)  # p=2: one message
    assert cost.chain_broadcast_s(1000, []) == 0.0 and cost.chain_reduce_s(1000, []) == 0.0  # p=1
    # a slow second link (2 ms, 0.5 MB/s): the first chunk crosses both links, the rest follow at
    # the slow link's pace: (1 ms + 0.524288 s) + (2 ms + 1.048576 s) + (2e6 - 524288) / 0.5e6
    slow = Link(2 * MS, 0.5e6)
    assert cost.chain_broadcast_s(2e6, [LINK, slow]) == pytest.approx(0.525288 + 1.050576 + 2.951424)


def test_tree_allreduce_goes_up_and_down_a_binary_tree_in_chunks() -> None:
    # p=8: depth 3; S = 2 MB: 2*3*(1 ms + 0.524288 s) + 2*(2e6 - 524288)/1e6
    assert cost.tree_allreduce_s(2e6, 8, LINK) == pytest.approx(6 * 0.525288 + 2 * 1.475712)
    # p=5: depth ceil(log2 5) = 3; a tiny message is one chunk: 2*3*(1 ms + 1 ms)
    assert cost.tree_allreduce_s(1000, 5, LINK) == pytest.approx(0.012)
    assert cost.tree_allreduce_s(1000, 2, LINK) == pytest.approx(2 * 0.002)
    assert cost.tree_allreduce_s(1000, 1, LINK) == 0.0
    assert [cost.tree_depth(p) for p in (1, 2, 3, 4, 5, 8, 9, 64)] == [0, 1, 2, 2, 3, 3, 4, 6]


def test_nccl_allreduce_takes_the_faster_of_ring_and_tree() -> None:
    # p=4, 1000 B: ring 6*(1 ms + 250 us) = 7.5 ms; tree 2*2*(1 ms + 1 ms) = 8 ms
    assert cost.nccl_allreduce(1000, [LINK] * 4, LINK) == ("ring", pytest.approx(0.0075))
    # p=16, 1000 B: ring 30*(1 ms + 62.5 us) = 31.875 ms; tree 2*4*2 ms = 16 ms
    assert cost.nccl_allreduce(1000, [LINK] * 16, LINK) == ("tree", pytest.approx(0.016))
    assert cost.nccl_allreduce(1000, [LINK], LINK) == ("ring", 0.0)


# ---- the acceptance checks on the network model -----------------------------------------
def test_reduce_plus_broadcast_of_100_mb_on_8_ranks_costs_about_two_transfers() -> None:
    """8 ranks, one per node, 10 Gb/s and 0.05 ms everywhere: NCCL's chains charge close to
    2 S/beta for a reduce and a broadcast; the binomial trees log2(8) = 3 times that."""
    nbytes, alpha, beta = 100e6, 0.05 * MS, 10 * GBIT
    members = list(range(8))
    nccl = model("eth_10g", 8)  # the defaults: collectives=nccl, launch_us=0
    charged = nccl.reduce_s(nbytes, members, 0) + nccl.broadcast_s(nbytes, members, 0)
    two_transfers = 2 * nbytes / beta  # 160 ms
    assert abs(charged - two_transfers) <= 0.10 * two_transfers
    # exactly: 2 * (7 alpha + S/beta + 6 C/beta)
    assert charged == pytest.approx(2 * (7 * alpha + nbytes / beta + 6 * CHUNK / beta))
    textbook = model("eth_10g", 8, 1, "network.collectives=textbook")
    charged_textbook = textbook.reduce_s(nbytes, members, 0) + textbook.broadcast_s(nbytes, members, 0)
    assert charged_textbook == pytest.approx(2 * 3 * (alpha + nbytes / beta))
    assert 2.8 < charged_textbook / charged < 3.0
    assert (nccl.collectives, nccl.launch_s, textbook.collectives) == ("nccl", 0.0, "textbook")


def test_allreduce_picks_the_tree_for_a_tiny_message_and_the_ring_for_a_large_one_at_64_ranks() -> None:
    alpha, beta = 0.05 * MS, 10 * GBIT
    nccl = model("eth_10g", 64)
    members = list(range(64))
    tiny, large = 1024, 1e9
    tiny_tree = 2 * 6 * (alpha + tiny / beta)  # depth 6, one chunk
    tiny_ring = 2 * 63 * (alpha + tiny / 64 / beta)
    assert tiny_tree < tiny_ring
    assert nccl.allreduce_s(tiny, members) == pytest.approx(tiny_tree)
    assert nccl.allreduce_algorithm(tiny, members) == "tree"
    large_ring = 2 * 63 * (alpha + large / 64 / beta)
    large_tree = 2 * 6 * (alpha + CHUNK / beta) + 2 * (large - CHUNK) / beta
    assert large_ring < large_tree
    assert nccl.allreduce_s(large, members) == pytest.approx(large_ring)
    assert nccl.allreduce_algorithm(large, members) == "ring"
    textbook = model("eth_10g", 64, 1, "network.collectives=textbook")
    assert textbook.allreduce_algorithm(tiny, members) == "ring"
    assert textbook.allreduce_s(tiny, members) == pytest.approx(tiny_ring)


def test_launch_overhead_is_charged_once_per_collective_on_more_than_one_rank() -> None:
    alpha, beta, launch = 0.05 * MS, 1 * GBIT, 7e-6
    nccl = model("eth_1g", 4, 1, "network.launch_us=7")
    members, nbytes = [0, 1, 2, 3], 4_000_000
    assert nccl.allreduce_s(nbytes, members) == pytest.approx(6 * (alpha + nbytes / 4 / beta) + launch)  # ring wins
    assert nccl.allgather_s(1000, members) == pytest.approx(3 * (alpha + 1000 / beta) + launch)
    chain = 3 * alpha + nbytes / beta + 2 * CHUNK / beta
    assert nccl.broadcast_s(nbytes, members, 2) == pytest.approx(chain + launch)
    assert nccl.reduce_s(nbytes, members, 1) == pytest.approx(chain + launch)
    one = [2]  # p=1: nothing moves, nothing is launched
    assert nccl.allreduce_s(nbytes, one) == 0.0 and nccl.allgather_s(nbytes, one) == 0.0
    assert nccl.broadcast_s(nbytes, one, 2) == 0.0 and nccl.reduce_s(nbytes, one, 2) == 0.0
    textbook = model("eth_1g", 4, 1, "network.launch_us=7", "network.collectives=textbook")
    assert textbook.allgather_s(1000, members) == pytest.approx(3 * (alpha + 1000 / beta))  # no launch
    assert nccl.launch_s == pytest.approx(launch)


def test_chain_on_mixed_links_crosses_each_link_of_the_rooted_order() -> None:
    """2 nodes x 2 ranks on eth_1g: a broadcast from rank 1 runs along 1 -> 2 -> 3 -> 0, an inter-node
    link, an intra-node one (2 us, 800 Gb/s) and an inter-node one; the 1 Gb/s links pace it."""
    alpha, beta, intra_alpha, intra_beta = 0.05 * MS, 1 * GBIT, 0.002 * MS, 800 * GBIT
    nccl = model("eth_1g", 2, 2)
    nbytes = 4_000_000
    first = 2 * (alpha + CHUNK / beta) + (intra_alpha + CHUNK / intra_beta)
    expected = first + (nbytes - CHUNK) / beta
    assert nccl.broadcast_s(nbytes, [0, 1, 2, 3], 1) == pytest.approx(expected)
    assert nccl.reduce_s(nbytes, [0, 1, 2, 3], 1) == pytest.approx(expected)


def test_textbook_is_the_closed_forms_exactly_and_nccl_is_the_default() -> None:
    textbook = model("eth_1g", 2, 2, "network.collectives=textbook")
    members = [0, 1, 2, 3]
    ring = textbook.ring(tuple(members))
    order = [2, 3, 0, 1]
    tree_link = lambda a, b: textbook.link(order[a], order[b])  # noqa: E731
    assert textbook.allreduce_s(4_000_000, members) == cost.ring_allreduce_s(4_000_000, ring)
    assert textbook.allgather_s(1000, members) == cost.ring_allgather_s(1000, ring)
    assert textbook.broadcast_s(4_000_000, members, 2) == cost.tree_broadcast_s(4_000_000, 4, tree_link)
    assert textbook.reduce_s(4_000_000, members, 2) == cost.tree_reduce_s(4_000_000, 4, tree_link)
    # a preset that does not set the keys (eth_1g's YAML): the schema's defaults, nccl and no launch cost
    preset = compose(["network=eth_1g"]).network
    plain = NetworkModel.from_config(preset, ClusterLayout(nodes=4, workers_per_node=1))
    assert (plain.collectives, plain.launch_s) == ("nccl", 0.0)
