"""The parameter server and layer dropping: the compressor and memory alone, then real processes."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
import torch

from dlcomm.algorithms.ps import ParameterServer
from dlcomm.compress import LayerDrop, ResidualMemory, drop_threshold, layer_scores
from dlcomm.launch import harness

import rank_programs

# The rank programs run as threads on the in-process fabric (launcher=threads): they test the
# algorithms, not processes (those are tests/test_inprocess.py's and test_threads_launcher.py's).
run_ranks = partial(harness.run_ranks, in_process="serial")


def test_placeholders_expand_to_zeros_of_the_layer_shape() -> None:
    params = [torch.nn.Parameter(torch.zeros(2, 3)), torch.nn.Parameter(torch.zeros(4))]
    optimizer = torch.optim.SGD(params, lr=1.0)
    # worker 0 sends both layers, worker 1 only the second: its first is a placeholder (zeros)
    payloads = [torch.cat([torch.ones(6), torch.full((4,), 2.0)]), torch.full((4,), 4.0)]
    changed = ParameterServer._apply(params, optimizer, [[True, True], [False, True]], payloads, lr=1.0)
    assert changed == [True, True]
    assert torch.equal(params[0].data, torch.full((2, 3), -0.5))  # -(1 + 0) / 2
    assert torch.equal(params[1].data, torch.full((4,), -3.0))  # -(2 + 4) / 2


def test_a_layer_no_worker_sent_is_left_alone_by_the_optimizer() -> None:
    params = [torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(2))]
    optimizer = torch.optim.SGD(params, lr=0.5, momentum=0.9, weight_decay=0.1)
    changed = ParameterServer._apply(
        params, optimizer, [[True, False], [True, False]], [torch.ones(3), torch.ones(3)], lr=0.5
    )
    assert changed == [True, False]
    assert torch.equal(params[1].data, torch.ones(2))  # no step, no decay
    assert not torch.equal(params[0].data, torch.ones(3))


def test_an_accumulated_layer_is_sent_once_it_crosses_the_threshold_and_its_cache_resets() -> None:
    memory = ResidualMemory([torch.Size([4]), torch.Size([4])], torch.device("cpu"))
    drop = LayerDrop(ratio=0.5, recompute_every=1000)
    small, large = torch.full((4,), 0.1), torch.full((4,), 1.0)
    keep = drop.select(memory.compensate([small, large]), step=0)  # threshold = 1.0: the small layer drops
    assert drop.threshold == pytest.approx(1.0) and keep == [False, True]
    memory.update(keep)
    assert torch.allclose(memory.accum[0], small) and torch.equal(memory.accum[1], torch.zeros(4))
    for step in range(1, 9):  # 0.1 per step: the cache's mean reaches 1.0 after 10 gradients
        keep = drop.select(memory.compensate([small, large]), step)
        memory.update(keep)
        assert keep == [False, True], step
    keep = drop.select(memory.compensate([small, large]), step=9)
    assert keep == [True, True]  # 10 x 0.1 >= 1.0: sent ...
    memory.update(keep)
    assert torch.equal(memory.accum[0], torch.zeros(4))  # ... and reset


def test_threshold_drops_the_lowest_scoring_layers_closest_to_the_ratio() -> None:
    scores, sizes = [0.5, 0.1, 0.3, 0.9], [10, 30, 40, 20]
    assert drop_threshold(scores, sizes, 0.0) == -1.0
    assert drop_threshold(scores, sizes, 0.3) == 0.3  # drop the 0.1 layer: 30 of 100
    assert drop_threshold(scores, sizes, 0.65) == 0.5  # 0.1 and 0.3: 70 of 100 (closer than 30 or 80)
    assert drop_threshold(scores, sizes, 0.05) == -1.0  # no prefix comes closer than dropping nothing


@pytest.mark.parametrize("ratio", [0.3, 0.6, 0.9])
def test_the_dropped_fraction_at_a_recomputation_step_is_close_to_r(ratio) -> None:
    from dlcomm.models import build_model
    from dlcomm.models.torchvision_models import ResNetConfig

    torch.manual_seed(0)
    model = build_model(ResNetConfig(name="resnet50", cifar_stem=True), (3, 32, 32), 100)
    loss = torch.nn.functional.cross_entropy(model(torch.randn(4, 3, 32, 32)), torch.randint(0, 100, (4,)))
    loss.backward()
    grads = [p.grad for p in model.parameters()]
    drop = LayerDrop(ratio, recompute_every=100)
    keep = drop.select(grads, step=0)
    assert abs(drop.last_dropped_fraction - ratio) <= 0.05, drop.last_dropped_fraction
    scores = layer_scores(grads)  # the dropped layers are exactly the lowest-scoring ones
    assert max(s for s, k in zip(scores, keep) if not k) <= min(s for s, k in zip(scores, keep) if k)


def test_the_server_sends_back_only_the_layers_that_changed() -> None:
    results = run_ranks(
        rank_programs.ps_run,
        3,
        "ps_layerdrop",
        {"ratio": 0.7, "recompute_every": 5},
        12,
        services=("server",),
        timeout=120,
    )
    workers = results[:3]
    sizes = workers[0]["sizes"]
    dropped_somewhere = 0
    for step in range(12):
        union = [any(w["stats"].sent[step][layer] for w in workers) for layer in range(len(sizes))]
        for w in workers:
            assert w["stats"].changed[step] == union  # changed = sent by some worker
            expected = (len(sizes) + 1 + sum(size for size, c in zip(sizes, union) if c)) * 4
            assert w["stats"].bytes_down[step] == (expected if any(union) else (len(sizes) + 2) * 4)
        dropped_somewhere += union.count(False)
    assert dropped_somewhere > 0
    assert all(w["unchanged_moved"] == 0 for w in workers)  # a layer not sent back stays as it was
    assert all(np.array_equal(w["final"], workers[0]["final"]) for w in workers)  # every worker holds the server's


def test_ps_with_compress_layerdrop_is_ps_layerdrop_exactly() -> None:
    """``algo=ps compress=layerdrop`` and its alias ``algo=ps_layerdrop``: the same layers sent,
    the same bytes, the same parameters, bit for bit."""
    knobs = {"ratio": 0.7, "recompute_every": 5}
    alias = run_ranks(rank_programs.ps_run, 2, "ps_layerdrop", knobs, 10, services=("server",), timeout=120)
    layerdrop = {"name": "layerdrop", **knobs}
    composed = run_ranks(rank_programs.ps_run, 2, "ps", {}, 10, 0.0, layerdrop, services=("server",), timeout=120)
    for ours, theirs in zip(composed[:2], alias[:2]):
        assert np.array_equal(ours["final"], theirs["final"])
        assert ours["stats"].sent == theirs["stats"].sent and ours["stats"].bytes_up == theirs["stats"].bytes_up
    assert any(not all(sent) for sent in composed[0]["stats"].sent)  # layers were dropped


def test_layerdrop_with_r_zero_is_the_plain_parameter_server_exactly() -> None:
    plain = run_ranks(rank_programs.ps_run, 2, "ps", {}, 6, services=("server",), timeout=120)
    zero = run_ranks(rank_programs.ps_run, 2, "ps_layerdrop", {"ratio": 0.0}, 6, services=("server",), timeout=120)
    assert np.array_equal(plain[0]["final"], zero[0]["final"])
    assert all(all(sent) for sent in zero[0]["stats"].sent)


def test_the_server_waits_out_workers_that_pause_longer_than_the_job_timeout() -> None:
    """Workers evaluating a large model send nothing for minutes: the server's receive must not
    time out (it did, after 300 s, in a ResNet-50 run)."""
    results = run_ranks(
        rank_programs.ps_run,
        2,
        "ps",
        {},
        3,
        4.0,
        services=("server",),
        cluster_timeout_s=2.0,
        in_process="",
        timeout=120,
    )
    assert results[2] == {"role": "server"}
    assert all(len(r["stats"].changed) == 3 for r in results[:2])


def test_the_parameter_server_takes_the_steps_of_sgd_on_the_mean_gradient() -> None:
    """ps with 2 workers = one SGD-with-momentum optimizer stepping on the workers' mean gradient
    (computed here in one process on the same batches), up to float rounding."""
    import torch
    import torch.nn.functional as F

    steps = 5
    results = run_ranks(rank_programs.ps_run, 2, "ps", {}, steps, services=("server",), timeout=120)
    model = rank_programs._model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    generators = [torch.Generator().manual_seed(700 + rank) for rank in range(2)]
    for _ in range(steps):
        grads = []
        for generator in generators:
            inputs, labels = rank_programs._batch(generator)
            model.zero_grad()
            F.cross_entropy(model(inputs), labels).backward()
            grads.append([p.grad.clone() for p in model.parameters()])
        for param, *per_worker in zip(model.parameters(), *grads):
            param.grad = sum(per_worker) / 2
        optimizer.step()
    reference = rank_programs._flat(model).numpy()
    for worker in results[:2]:
        assert abs(worker["final"] - reference).max() < 1e-5
