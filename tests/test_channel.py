"""The Channel: results, recorded traffic and blocked time, named groups (real processes)."""

from __future__ import annotations

import pytest

from dlcomm.comm import traffic
from dlcomm.comm.device_timing import union_length as _union_length
from dlcomm.comm.layout import ClusterLayout
from dlcomm.launch.harness import run_ranks

import rank_programs


def test_layout_maps_ranks_to_nodes() -> None:
    layout = ClusterLayout(nodes=3, workers_per_node=2)
    assert layout.world_size == 6
    assert [layout.node_of(r) for r in range(6)] == [0, 0, 1, 1, 2, 2]
    assert [layout.local_rank(r) for r in range(6)] == [0, 1, 0, 1, 0, 1]
    assert layout.node_ranks(2) == [4, 5]
    assert layout.leaders() == [0, 2, 4]


def test_traffic_formulas_by_hand() -> None:
    assert traffic.ring_allreduce_traffic(4800, 3) == (6400, 4)  # 2*(3-1)/3*4800, 2*(3-1)
    assert traffic.ring_allreduce_traffic(1000, 1) == (0, 0)
    # binomial tree with 8 ranks: the root sends to 1, 2, 4; rank 1 to 3, 5; rank 2 to 6; rank 3 to 7
    children = [traffic.tree_broadcast_traffic(10, 8, v)[1] for v in range(8)]
    assert children == [3, 2, 1, 1, 0, 0, 0, 0]
    assert sum(children) == 7
    assert [traffic.tree_reduce_traffic(10, 8, v) for v in (0, 5)] == [(0, 0), (10, 1)]


def test_union_length_merges_overlaps() -> None:
    assert _union_length([(0.0, 1.0), (0.5, 2.0), (3.0, 4.0)]) == pytest.approx(3.0)
    assert _union_length([]) == 0.0


def test_channel_records_and_groups() -> None:
    out = run_ranks(rank_programs.channel_accounting, 4, nodes=2)
    for rank, result in enumerate(out):
        assert result["allreduce_mean"] == pytest.approx(1.5)  # mean of 0, 1, 2, 3
        assert (result["allreduce_bytes"], result["allreduce_messages"]) == traffic.ring_allreduce_traffic(4800, 4)
        assert result["broadcast_value"] == 1.0
        assert result["intra_mean"] == pytest.approx(0.5 if rank < 2 else 2.5)
        assert result["leader"] == (rank in (0, 2))
        assert result["metric_ops_counted"]
    # broadcast from rank 1 over 4 ranks: 3 messages in all
    assert sum(result["broadcast_messages"] for result in out) == 3
    # ranks other than the late one were blocked for most of its 0.3 s sleep
    assert min(out[r]["exposed_s"] for r in (0, 2, 3)) >= 0.2
    assert out[1]["exposed_s"] < 0.2


@pytest.mark.parametrize("in_process", ["", "serial"], ids=["gloo", "threads"])
def test_a_group_of_one_completes_every_collective_in_place_without_the_transport(in_process) -> None:
    """On a group whose only member is the calling rank (``intra`` with one rank per node) a sum
    or mean of one is the rank's own value, a broadcast or reduce rooted at itself leaves it, a
    gather holds it once: the Channel gives exactly that, sends no bytes and calls the transport
    for none of it; the same calls on ``world`` (two ranks) do go through the transport."""
    out = run_ranks(rank_programs.collectives_of_one, 2, nodes=2, in_process=in_process, timeout=60)
    for rank, result in enumerate(out):
        value = float(rank + 1)
        assert result["intra"] == {
            "sum": [value] * 5,
            "mean": [value] * 5,
            "broadcast": [value] * 3,
            "reduce": [value] * 3,
            "allgather": [[value] * 2],
            "bytes": 0,
        }
        assert [call for call in result["calls"] if call[1] == "intra"] == []
        world = result["world"]
        assert world["sum"] == [3.0] * 5 and world["mean"] == [1.5] * 5 and world["broadcast"] == [1.0] * 3
        assert world["allgather"] == [[1.0] * 2, [2.0] * 2] and world["bytes"] > 0
        assert sorted(name for name, group in result["calls"] if group == "world") == sorted(
            ["all_reduce", "all_reduce", "broadcast", "reduce", "all_gather"]
        )


def test_a_pull_answer_is_counted_with_its_bytes_in_the_iteration_that_holds_them() -> None:
    """gossip_pull's ``pulls_served`` is ``Channel.answers_counted``: the answers whose bytes an
    iteration's ``bytes_sent`` holds, taken in the same step as those bytes, so that served models x
    model bytes = the bytes served, exactly (a count kept by the responder itself once counted an
    answer sent between the last iteration's end and its statistics, whose bytes no row held)."""
    [result] = run_ranks(rank_programs.answers_between_iterations, 1, in_process="serial", timeout=60)
    assert result["seen"] == [(100, 1), ("between", 1), (30, 2), ("after", 2)]
