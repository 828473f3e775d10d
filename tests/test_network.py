"""The network model: cost formulas by hand, presets, links, and clocks on real ranks."""

from __future__ import annotations

import math

import pytest
from omegaconf import OmegaConf

from dlcomm.comm import cost
from dlcomm.comm.cost import Link
from dlcomm.comm.layout import ClusterLayout
from dlcomm.comm.network import NetworkModel
from dlcomm.compose import compose
from dlcomm.config.typed import plain
from dlcomm.launch.harness import run_ranks

import rank_programs

MS = 1e-3
GBIT = 1e9 / 8  # bytes/s


def network(preset: str, *overrides: str) -> dict:
    """The composed ``network`` config of a preset, as a plain dict."""
    return plain(compose([f"network={preset}", *overrides]).network)


# ---- cost formulas against hand-computed values ---------------------------------------
LINK = Link(latency_s=1 * MS, bandwidth_Bps=1e6)  # 1 ms, 1 MB/s: S bytes take S microseconds


def test_point_to_point() -> None:
    assert cost.point_to_point_s(5000, LINK) == pytest.approx(0.001 + 0.005)


def test_ring_allreduce() -> None:
    # p=4, S=8000: 2*3*(1 ms + 2000 B / 1 MB/s) = 6 * 3 ms
    assert cost.ring_allreduce_s(8000, [LINK] * 4) == pytest.approx(0.018)
    assert cost.ring_allreduce_s(8000, [LINK]) == 0.0
    # the slowest link sets every step: one 0.5 MB/s link and one 3 ms link in the ring
    mixed = [LINK, Link(3 * MS, 1e6), LINK, Link(1 * MS, 0.5e6)]
    assert cost.ring_allreduce_s(8000, mixed) == pytest.approx(6 * (0.003 + 0.004))


def test_ring_allgather_broadcast_reduce() -> None:
    assert cost.ring_allgather_s(1000, [LINK] * 5) == pytest.approx(4 * (0.001 + 0.001))
    assert cost.ring_broadcast_s(8000, [LINK] * 4) == pytest.approx(6 * (0.001 + 0.002))
    assert cost.ring_reduce_s(8000, [LINK] * 4) == pytest.approx(6 * (0.001 + 0.002))


def test_binomial_tree_broadcast_and_reduce() -> None:
    uniform = lambda a, b: LINK  # noqa: E731
    # ceil(log2 p) rounds of (1 ms + 1 ms) for S = 1000 B
    for p, rounds in [(1, 0), (2, 1), (3, 2), (4, 2), (5, 3), (8, 3), (9, 4), (16, 4)]:
        assert cost.tree_broadcast_s(1000, p, uniform) == pytest.approx(rounds * 0.002), p
        assert cost.tree_reduce_s(1000, p, uniform) == pytest.approx(rounds * 0.002), p
    assert cost.binomial_children(0, 8) == [1, 2, 4] and cost.binomial_children(1, 8) == [3, 5]
    # p=4 with a slow link 0->2 (4 ms per message): the root sends to 1 (2 ms), then to 2
    # (ends 6 ms); 1 sends to 3 at 2..4 ms. The last rank is 2 at 6 ms.
    slow = lambda a, b: Link(1 * MS, 1e6 / 3) if {a, b} == {0, 2} else LINK  # noqa: E731
    assert cost.tree_broadcast_s(1000, 4, slow) == pytest.approx(0.002 + 0.004)


def test_parameter_server_incast() -> None:
    # 4 workers x 1000 B into a 1 MB/s server link: 1 ms + 4 ms
    assert cost.ps_incast_s([1000] * 4, [LINK] * 4, 1e6) == pytest.approx(0.005)
    # a server 10x faster than the workers: each worker's own link is the bottleneck
    assert cost.ps_incast_s([1000] * 4, [LINK] * 4, 1e7) == pytest.approx(0.001 + 0.001)
    # mixed: worker 1 at 0.25 MB/s needs 4 ms alone, more than the shared 2 ms at 2 MB/s
    links = [LINK, Link(2 * MS, 0.25e6), LINK, LINK]
    assert cost.ps_incast_s([1000] * 4, links, 2e6) == pytest.approx(0.002 + 0.004)


# ---- presets and links --------------------------------------------------------------
def test_presets_give_the_papers_links() -> None:
    expected = {  # preset: (inter latency ms, inter Gb/s)
        "ib_100g": (0.002, 100),
        "eth_56g": (0.01, 56),
        "eth_10g": (0.05, 10),
        "eth_1g": (0.05, 1),
        "lat_0.1ms": (0.1, 1),
        "lat_5ms": (5, 1),
        "wan_hetero": (5, 1),
    }
    for preset, (latency, gbps) in expected.items():
        cfg = network(preset)
        assert (cfg["inter"]["latency_ms"], cfg["inter"]["bandwidth_gbps"]) == (latency, gbps), preset
        intra = cfg["intra"]  # the shared-memory / NVLink class: faster than any inter-node link
        assert intra["bandwidth_gbps"] > gbps and intra["latency_ms"] <= latency
        assert cfg["mode"] == "simulate"
    assert network("off")["mode"] == "off"
    assert network("wan_hetero")["wide_workers"] == 2


def test_links_intra_inter_and_slower_end() -> None:
    cfg = OmegaConf.create(network("wan_hetero", "nodes=4", "workers_per_node=2"))
    model = NetworkModel.from_config(cfg, ClusterLayout(nodes=4, workers_per_node=2))
    assert model.link(0, 1) == model.intra  # same node
    assert model.link(0, 1).bandwidth_Bps == 800 * GBIT
    assert model.link(0, 2) == Link(5 * MS, 1 * GBIT)  # wide rank 0 with narrow rank 2: the slower end
    assert model.link(1, 0) == model.link(0, 1)
    cfg.wide_workers = 4
    model = NetworkModel.from_config(cfg, ClusterLayout(nodes=4, workers_per_node=2))
    assert model.link(1, 2) == Link(5 * MS, 10 * GBIT)  # both wide
    assert model.link(3, 4) == Link(5 * MS, 1 * GBIT)  # 4 is narrow
    cfg.worker_bandwidth_gbps = [25, 25, 40, 40, 1, 1, 1, 1]  # per-rank values win
    model = NetworkModel.from_config(cfg, ClusterLayout(nodes=4, workers_per_node=2))
    assert model.link(0, 2) == Link(5 * MS, 25 * GBIT)


def test_allreduce_over_nodes_is_bound_by_the_inter_node_link() -> None:
    cfg = OmegaConf.create(network("eth_1g"))
    model = NetworkModel.from_config(cfg, ClusterLayout(nodes=2, workers_per_node=2))
    nbytes = 4_000_000
    expected = 2 * 3 * (0.05 * MS + nbytes / 4 / GBIT)
    assert model.allreduce_s(nbytes, [0, 1, 2, 3]) == pytest.approx(expected)
    assert model.allreduce_s(nbytes, [0, 1]) == pytest.approx(2 * (0.002 * MS + nbytes / 2 / (800 * GBIT)))


def test_a_scaled_virtual_clock_moves_by_the_scaled_compute_and_the_unscaled_waits() -> None:
    """network.compute_scale: devices 4x faster count a quarter of the measured compute; a modelled
    wait (advance_to) and time outside iterations are as before."""
    from dlcomm.comm.clock import VirtualClock

    from rank_programs import FakeCompute

    compute = FakeCompute()
    clock = VirtualClock(compute, scale=0.25)
    compute.seconds = 5.0  # before the iteration: not counted
    clock.resume()
    compute.seconds += 2.0
    assert clock.now() == pytest.approx(0.5)
    clock.advance_to(3.0)  # a transfer modelled to end at 3 s
    assert clock.now() == pytest.approx(3.0)
    compute.seconds += 4.0
    assert clock.now() == pytest.approx(4.0)
    clock.pause()
    compute.seconds += 10.0
    assert clock.now() == pytest.approx(4.0)
    unscaled = VirtualClock(compute)
    unscaled.resume()
    compute.seconds += 2.0
    assert unscaled.now() == pytest.approx(2.0)


# ---- clocks on real ranks -----------------------------------------------------------
def test_simulated_collective_ends_at_max_entry_plus_modelled_on_every_rank() -> None:
    compute = [0.010, 0.250, 0.040, 0.120]
    numel = 100_000  # 400 kB
    out = run_ranks(rank_programs.collective_clocks, 4, compute, numel, network=network("eth_1g"))
    modelled = 2 * 3 * (0.05 * MS + 4 * numel / 4 / GBIT)
    entries = [result["entry"] for result in out]
    assert entries == pytest.approx(compute, abs=1e-12)  # the clock is the compute so far, nothing else
    for result in out:
        assert result["mean"] == pytest.approx(1.5)
        assert result["modelled"] == pytest.approx(modelled)
        assert result["end"] == pytest.approx(max(entries) + modelled, abs=1e-12)
        assert result["after"] == pytest.approx(max(entries) + modelled, abs=1e-12)
        # back to back on one group: the second starts when the first ends
        first_ready, first_end = result["first"]
        second_ready, second_end, second_modelled = result["second"]
        assert first_ready == pytest.approx(result["after"], abs=1e-12)
        assert second_ready == pytest.approx(first_end, abs=1e-12)
        assert result["after_both"] == pytest.approx(second_end, abs=1e-12)
        assert second_end == pytest.approx(first_end + second_modelled, abs=1e-12)
        clock_time, clock_exposed, modelled_total, _ = result["iteration"]
        assert clock_time == pytest.approx(second_end, abs=1e-12)  # the iteration started at clock 0
    # every rank waited exactly from its own entry to the common end
    for rank, result in enumerate(out):
        clock_time, clock_exposed, _, _ = result["iteration"]
        assert clock_exposed == pytest.approx(clock_time - compute[rank], abs=1e-12)


@pytest.mark.parametrize("sender_ahead", [True, False], ids=["sender-ahead", "sender-behind"])
def test_simulated_receive_takes_max_of_own_and_sender_plus_modelled(sender_ahead) -> None:
    compute = [0.5, 0.1] if sender_ahead else [0.1, 0.5]
    numel = 250_000  # 1 MB: 8 ms at 1 Gb/s
    sender, receiver = run_ranks(rank_programs.p2p_clocks, 2, compute, numel, network=network("eth_1g"))
    modelled = 0.05 * MS + 4 * numel / GBIT
    assert receiver["payload_ok"]
    assert receiver["modelled"] == pytest.approx(modelled)
    assert receiver["ready"] == pytest.approx(compute[0], abs=1e-12)  # the sender's clock travelled
    assert receiver["after"] == pytest.approx(max(compute[1], compute[0] + modelled), abs=1e-12)
    if sender_ahead:
        assert receiver["exposed"] == pytest.approx(compute[0] + modelled - compute[1], abs=1e-12)
    else:
        assert receiver["exposed"] == pytest.approx(0.0, abs=1e-12)
    assert sender["after"] == pytest.approx(compute[0] + modelled, abs=1e-12)  # the send leaves at once


def test_simulated_message_between_wide_and_narrow_worker_uses_the_slower_end() -> None:
    numel = 250_000
    cfg = network("wan_hetero", "nodes=2", "network.wide_workers=1")  # rank 0 wide (10 Gb/s), rank 1 narrow
    _, receiver = run_ranks(rank_programs.p2p_clocks, 2, [0.0, 0.0], numel, network=cfg)
    assert receiver["modelled"] == pytest.approx(5 * MS + 4 * numel / (1 * GBIT))
    cfg = network("wan_hetero", "nodes=2", "network.wide_workers=2")  # both wide
    _, receiver = run_ranks(rank_programs.p2p_clocks, 2, [0.0, 0.0], numel, network=cfg)
    assert receiver["modelled"] == pytest.approx(5 * MS + 4 * numel / (10 * GBIT))


def test_emulated_allreduce_takes_the_modelled_time() -> None:
    # 4 ranks, 1 MB, a 50 Mb/s link: 6 * (2 ms + 250 kB / 6.25 MB/s) = 252 ms of model,
    # far above the real loopback transfer.
    cfg = network("eth_1g", "network.mode=emulate", "network.inter.bandwidth_gbps=0.05", "network.inter.latency_ms=2")
    out = run_ranks(rank_programs.emulated_allreduce, 4, 250_000, 3, network=cfg)
    for rank_results in out:
        for measured, modelled, overran in rank_results:
            assert modelled == pytest.approx(6 * (0.002 + 250_000 / (0.05 * GBIT)))
            assert not overran
            # at least the model's time; the slack above it is the wake-ups of 4 rank processes on this
            # machine's 2 cores (CI once measured 0.284 s of 0.252 modelled with a reproduction beside it)
            assert modelled <= measured <= modelled + 0.06


def test_operations_outside_iterations_are_not_modelled() -> None:
    out = run_ranks(rank_programs.unmodelled_outside_iterations, 2, network=network("eth_1g"))
    for modelled, end in out:
        assert math.isnan(modelled) and math.isnan(end)


def test_simulated_broadcast_and_allgather() -> None:
    compute = [0.2, 0.05, 0.1, 0.3]
    numel = 250_000  # 1 MB
    cfg = network("eth_1g", "network.collectives=textbook")
    out = run_ranks(rank_programs.broadcast_and_allgather_clocks, 4, compute, numel, network=cfg)
    tree = 2 * (0.05 * MS + 4 * numel / GBIT)  # binomial tree over 4 ranks: 2 rounds
    gather = 3 * (0.05 * MS + 4 / GBIT)  # ring all-gather of one float per rank
    for result in out:
        assert result["value"] == 1.0 and result["gathered"] == [0.0, 1.0, 2.0, 3.0]
        start, end, modelled = result["broadcast"]
        assert modelled == pytest.approx(tree)
        assert end == pytest.approx(max(compute) + tree, abs=1e-12)
        assert result["after"] == pytest.approx(max(compute) + tree + gather, abs=1e-9)


def test_a_preset_whose_links_are_overridden_is_named_with_the_values_it_ran_with() -> None:
    """Issue 35, item 4: `network=eth_10g network.inter.bandwidth_gbps=25` printed "simulated eth_10g"."""
    from dlcomm.compose import compose
    from dlcomm.spec import RunSpec

    overrides = ("network=eth_10g", "network.inter.bandwidth_gbps=25", "network.intra.latency_ms=0.01", "nodes=2")
    spec = RunSpec.from_config(compose(list(overrides)), "sqlite:///x.db", overrides)
    assert spec.network_label() == "eth_10g, inter 25 Gb/s, intra 0.01 ms"
    unchanged = RunSpec.from_config(compose(["network=eth_10g"]), "sqlite:///x.db", ("network=eth_10g",))
    assert unchanged.network_label() == "eth_10g"
