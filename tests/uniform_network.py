"""One network for the tests that compare modelled communication with the cost model's closed
forms: every link, inside a node or between nodes, ``alpha = 1 ms`` and ``beta = 0.1 Gb/s``,
collectives charged by the textbook formulas (ring allreduce and all-gather, binomial trees)."""

from dlcomm.comm.cost import Link

LINK = Link(latency_s=1e-3, bandwidth_Bps=0.1e9 / 8)
NETWORK = {
    "name": "uniform",
    "mode": "simulate",
    "intra": {"latency_ms": 1.0, "bandwidth_gbps": 0.1},
    "inter": {"latency_ms": 1.0, "bandwidth_gbps": 0.1},
    "wide_workers": 0,
    "wide_bandwidth_gbps": 10.0,
    "worker_bandwidth_gbps": [],
    "compute_scale": 1.0,
    "collectives": "textbook",  # the closed forms: ring allreduce, binomial-tree broadcast and reduce
}
