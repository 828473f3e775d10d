"""Streaming DiLoCo (``algo=streaming_diloco``, Douillard et al. 2025, arXiv 2501.18512) against its rule.

1. One fragment, no overlap, ``alpha=0`` is DiLoCo (``algo=diloco``), bit for bit, step by step.
2. A float64 transcription of the rule (docs/algorithms.md, "Streaming DiLoCo": fragments in turn at
   offsets ``floor(p H / P)``, the outer gradient sent after inner step ``t`` and applied ``tau``
   steps later by DiLoCo's outer Nesterov SGD, the merge ``alpha x + (1 - alpha) theta``), its
   replicas trained with plain torch on the same batches, gives dlcomm's parameters after 3
   periods (2 and 3 fragments, ``tau`` 1 and 2, ``alpha`` 0.5 and 0.25); the transcription with a
   stagger offset off by one, ``alpha`` swapped with ``1 - alpha``, or the outer gradient's sign
   flipped does not (the comparison can fail).
3. The same under NCCL's rules (``launcher.semantics=nccl``) at 2, 3, 4 workers and 2 nodes x 2.
4. A run preempted with an exchange in flight (mid-period, mid-epoch) and resumed from its
   checkpoint ends with the uninterrupted run's parameters.
5. The outer gradients through a compressor: ``compress=lowbit`` (the paper's 4-bit E3M0) equals
   the transcription with each replica's outer gradient quantised; a lossless compressor gives
   the uncompressed numbers, for ``diloco`` and ``streaming_diloco``.
6. The split in layer order, the offsets, and the knobs' refusals.

Every rank is a thread of this process on the in-process fabric (``launcher=threads``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dlcomm.algorithms.diloco import DiLoCo, DiLoCoConfig
from dlcomm.algorithms.streaming_diloco import (
    StreamingDiLoCo,
    StreamingDiLoCoConfig,
    fragment_offsets,
    split_layers,
)
from dlcomm.compress.registry import COMPRESSORS
from dlcomm.train.loop import cross_entropy_loss, hooked_step
from outer_fixtures import (
    PAPER,
    agree,
    assert_resumed_equal,
    flat,
    hooked_steps,
    inner_optimizer,
    rank_batch,
    replicas_step,
    run_ranks,
    tiny_mlp,
)

import rank_programs


def _mlp() -> torch.nn.Module:
    """Three layers of 204, 156 and 52 parameters: 2 fragments are [L0, L2], [L1] strided (the
    default), [L0, L1], [L2] sequential; 3 are one layer each either way."""
    return tiny_mlp(16, 12, 12, 4)


LAYER_SIZES = [204, 156, 52]
FRAGMENT_LAYERS = {
    "sequential": {1: [[0, 1, 2]], 2: [[0, 1], [2]], 3: [[0], [1], [2]]},
    "strided": {1: [[0, 1, 2]], 2: [[0, 2], [1]], 3: [[0], [1], [2]]},
}


def _compress(knobs: dict | None):
    return None if knobs is None else COMPRESSORS.get(knobs["name"]).Config(**knobs)


# ---- 1. one fragment, no overlap, alpha 0: DiLoCo ---------------------------------------------


def _streaming_and_diloco(cluster, channel, knobs: dict, period: int, steps: int, compress: dict | None) -> float:
    """Both on the same batches, side by side; the largest |streaming - DiLoCo| after any step."""
    ours, theirs = _mlp(), _mlp()
    ours_opt, theirs_opt = inner_optimizer(ours), inner_optimizer(theirs)
    one = StreamingDiLoCoConfig(period=period, fragments=1, overlap_steps=0, alpha=0.0, **knobs)
    streaming = StreamingDiLoCo(one, cluster, channel, compress=_compress(compress))
    diloco = DiLoCo(DiLoCoConfig(period=period, **knobs), cluster, channel, compress=_compress(compress))
    streaming.setup(ours, ours_opt)
    diloco.setup(theirs, theirs_opt)
    worst = 0.0
    for step in range(steps):
        inputs, labels = rank_batch(cluster.rank, step)
        hooked_step(streaming, ours, ours_opt, cross_entropy_loss, inputs, labels, step)
        hooked_step(diloco, theirs, theirs_opt, cross_entropy_loss, inputs, labels, step)
        worst = max(worst, float(np.abs(flat(ours) - flat(theirs)).max()))
    return worst


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("period", [1, 3])
def test_one_fragment_without_overlap_or_mixing_is_diloco_bit_for_bit(world: int, period: int) -> None:
    assert max(run_ranks(_streaming_and_diloco, world, PAPER, period, 4 * period, None)) == 0.0


def test_one_fragment_is_diloco_through_a_compressor_too() -> None:
    worst = run_ranks(_streaming_and_diloco, 2, PAPER, 2, 8, {"name": "lowbit", "bits": 4, "block_size": 32})
    assert max(worst) == 0.0


# ---- 2. and 3. the rule, transcribed ----------------------------------------------------------


def _run(
    cluster, channel, knobs: dict, inner: str, steps: int, compress: dict | None = None, finish: bool = False
) -> np.ndarray:
    model = _mlp()
    optimizer = inner_optimizer(model, inner)
    algorithm = StreamingDiLoCo(StreamingDiLoCoConfig(**knobs), cluster, channel, compress=_compress(compress))
    hooked_steps(algorithm, model, optimizer, cluster.rank, steps)
    if finish:
        algorithm.finish()
    return flat(model)


def _slices(fragments: int, pattern: str) -> list[np.ndarray]:
    """Each fragment's entries in the flat parameter vector (layers in order, weight then bias)."""
    starts = np.cumsum([0, *LAYER_SIZES])
    return [
        np.concatenate([np.arange(starts[i], starts[i + 1]) for i in layers])
        for layers in FRAGMENT_LAYERS[pattern][fragments]
    ]


def _paper(
    world: int,
    knobs: dict,
    inner: str,
    steps: int,
    *,
    offset_shift: int = 0,
    early_first: bool = False,
    other_pattern: bool = False,
    swap_alpha: bool = False,
    sign: float = 1.0,
    quantise=None,
    finish: bool = False,
) -> list[np.ndarray]:
    """The rule in float64 over ``world`` replicas (plain torch, each its own inner optimizer). After
    inner step ``t`` (1, 2, ...): a fragment ``p`` with ``(t - o_p - tau) mod H == 0`` whose exchange
    is in flight takes its average ``d``: ``v = mu v + d``, ``theta -= lr (d + mu v)`` (Nesterov) or
    ``lr v``, every replica ``x_p = alpha x_p + (1 - alpha) theta_p``; then a fragment with
    ``(t - o_p) mod H == 0`` and ``t - o_p >= H`` sends ``d = mean_i(theta_p - x_{i,p})``, applied at
    once when ``tau = 0``. ``o_p = floor(p H / P)``: every fragment takes H inner steps before its
    first exchange (the paper's "each fragment will always do H steps before being synchronized":
    with H = 100, P = 2 the second fragment at t = 150, 250, ...). Wrong rules: ``offset_shift``
    added to the offsets of fragments ``p >= 1``, ``early_first`` sends fragment p first after
    ``o_p < H`` steps, ``other_pattern`` groups the layers the other way (sequential for strided),
    ``swap_alpha`` mixes with ``1 - alpha``, ``sign=-1`` takes ``x - theta``. The fragments:
    ``knobs["pattern"]`` (default strided, the paper's: fragment p holds layers p, p + P, ...).
    ``quantise(vector) -> vector`` is applied to each replica's outer gradient of each bucket;
    ``finish``: an exchange in flight after the last step is applied then."""
    period, fragments, tau, alpha = knobs["period"], knobs["fragments"], knobs["overlap_steps"], knobs["alpha"]
    lr, mu, nesterov = knobs["outer_lr"], knobs["outer_momentum"], knobs["nesterov"]
    mix = 1 - alpha if swap_alpha else alpha
    offsets = [p * period // fragments + (offset_shift if p else 0) for p in range(fragments)]
    pattern = knobs.get("pattern", "strided")
    if other_pattern:
        pattern = "sequential" if pattern == "strided" else "strided"
    slices = _slices(fragments, pattern)
    models = [_mlp() for _ in range(world)]
    optimizers = [inner_optimizer(model, inner) for model in models]
    theta = flat(models[0]).astype(np.float64)
    velocity = np.zeros_like(theta)
    in_flight: tuple[int, np.ndarray] | None = None

    def apply(fragment: int, delta: np.ndarray) -> None:
        where = slices[fragment]
        velocity[where] = mu * velocity[where] + delta
        theta[where] -= lr * (delta + mu * velocity[where] if nesterov else velocity[where])
        for model in models:
            x = flat(model).astype(np.float64)
            x[where] = mix * x[where] + (1 - mix) * theta[where]
            torch.nn.utils.vector_to_parameters(torch.from_numpy(x).float(), model.parameters())

    for step in range(steps):
        replicas_step(models, optimizers, step)
        t = step + 1
        if tau > 0 and in_flight is not None and (t - offsets[in_flight[0]] - tau) % period == 0:
            apply(*in_flight)
            in_flight = None
        for fragment, offset in enumerate(offsets):
            if (t - offset) % period or (t - offset < period and not early_first):
                continue
            where = slices[fragment]
            gradients = [sign * (theta[where] - flat(model).astype(np.float64)[where]) for model in models]
            if quantise is not None:
                gradients = [quantise(fragment, g) for g in gradients]
            in_flight = (fragment, np.mean(gradients, axis=0))
            if tau == 0:
                apply(*in_flight)
                in_flight = None
    if finish and in_flight is not None:
        apply(*in_flight)
    return [flat(model) for model in models]


CASES = [
    pytest.param({**PAPER, "period": 4, "fragments": 2, "overlap_steps": 1, "alpha": 0.5}, "adamw", id="P2-tau1-a0.5"),
    pytest.param(
        {**PAPER, "period": 4, "fragments": 2, "overlap_steps": 1, "alpha": 0.5, "pattern": "sequential"},
        "adamw",
        id="P2-tau1-a0.5-sequential",
    ),
    pytest.param(
        {
            "outer_lr": 0.5,
            "outer_momentum": 0.5,
            "nesterov": False,
            "period": 8,
            "fragments": 3,
            "overlap_steps": 2,
            "alpha": 0.25,
        },
        "sgd",
        id="P3-tau2-a0.25-heavy-ball",
    ),
    pytest.param(
        {**PAPER, "period": 6, "fragments": 3, "overlap_steps": 1, "alpha": 0.25}, "adamw", id="P3-tau1-a0.25"
    ),
]


@pytest.mark.parametrize(("knobs", "inner"), CASES)
@pytest.mark.parametrize("world", [2, 4])
def test_the_rule_transcribed_gives_dlcomms_parameters(world: int, knobs: dict, inner: str) -> None:
    steps = 3 * knobs["period"]
    ours = run_ranks(_run, world, knobs, inner, steps)
    reference = _paper(world, knobs, inner, steps)
    assert agree(ours, reference) <= 1e-6
    # the comparison can fail: each wrong rule ends far from dlcomm's parameters
    assert agree(ours, _paper(world, knobs, inner, steps, offset_shift=1)) > 1e-3
    assert agree(ours, _paper(world, knobs, inner, steps, early_first=True)) > 1e-3
    if knobs["fragments"] == 2:  # 3 fragments of 3 layers are one layer each either way
        assert agree(ours, _paper(world, knobs, inner, steps, other_pattern=True)) > 1e-3
    assert agree(ours, _paper(world, knobs, inner, steps, sign=-1.0)) > 1e-3
    if knobs["alpha"] != 0.5:  # at 0.5, alpha is 1 - alpha
        assert agree(ours, _paper(world, knobs, inner, steps, swap_alpha=True)) > 1e-3


@pytest.mark.parametrize(("nodes", "per_node"), [(2, 1), (3, 1), (4, 1), (2, 2)], ids=["2", "3", "4", "2x2"])
def test_the_rule_under_nccls_rules(nodes: int, per_node: int) -> None:
    knobs, inner = CASES[3].values  # alpha 0.25: alpha swapped would show
    steps = 3 * knobs["period"]
    world = nodes * per_node
    ours = run_ranks(_run, world, knobs, inner, steps, nodes=nodes, semantics="nccl")
    assert agree(ours, _paper(world, knobs, inner, steps)) <= 1e-6


def test_an_exchange_in_flight_at_the_end_is_applied_by_finish() -> None:
    knobs, inner = CASES[0].values
    steps = 3 * knobs["period"] - 2  # fragment 1 sends after the last step (t = 10, offset 2, period 4)
    assert StreamingDiLoCo.plan_notes(StreamingDiLoCoConfig(**knobs), steps, steps)
    assert not StreamingDiLoCo.plan_notes(StreamingDiLoCoConfig(**knobs), steps + 1, steps + 1)
    ours = run_ranks(_run, 2, knobs, inner, steps, None, True)
    assert agree(ours, _paper(2, knobs, inner, steps, finish=True)) <= 1e-6
    assert agree(ours, _paper(2, knobs, inner, steps)) > 1e-3


# ---- 4. resumed with an exchange in flight -----------------------------------------------------

RESUME_STOP_AT = 5  # stopped after 6 of 12 steps: fragment 1 (offset 2 of period 4) sent after step 6, due after 7


def test_a_run_resumed_with_an_exchange_in_flight_ends_with_the_uninterrupted_runs_parameters(tmp_path) -> None:
    spec = rank_programs.run_spec(
        [
            "algo=streaming_diloco",
            "algo.period=4",
            "algo.fragments=2",
            "algo.overlap_steps=1",
            "algo.alpha=0.25",
            "optim=adamw",
            *rank_programs.SMALL_JOB,
            "seed=5",
        ]
    )
    folder = str(tmp_path / "checkpoints")
    results = assert_resumed_equal(spec, folder, RESUME_STOP_AT, StreamingDiLoCo, ("theta",), in_flight=True)
    assert np.array_equal(results[0]["straight"]["theta"], results[1]["straight"]["theta"])


# ---- 5. compressed outer gradients --------------------------------------------------------------


def test_lowbit_outer_gradients_equal_the_transcription_with_each_replicas_gradient_quantised() -> None:
    """compress=lowbit: every replica's outer gradient of every bucket rounded to E3M0 (blocks of
    32), the rounded gradients averaged: the transcription with that quantiser gives dlcomm's parameters."""
    from dlcomm.compress.lowbit import LowBit, LowBitConfig

    knobs, inner = CASES[0].values
    compress = {"name": "lowbit", "bits": 4, "block_size": 32}
    steps = 3 * knobs["period"]
    ours = run_ranks(_run, 2, knobs, inner, steps, compress)
    codec = LowBit(LowBitConfig(**compress))
    # a bucket holds its parameters in reverse order (dlcomm.algorithms.buckets): quantise in that layout
    layers = FRAGMENT_LAYERS["strided"][2]  # CASES[0]: the default pattern
    layout = {
        fragment: np.concatenate(
            [np.arange(start, start + size) for start, size in reversed(_param_ranges(layers[fragment]))]
        )
        for fragment in range(2)
    }
    offsets = {fragment: np.searchsorted(_slices(2, "strided")[fragment], layout[fragment]) for fragment in range(2)}

    def quantise(fragment: int, gradient: np.ndarray) -> np.ndarray:
        order = offsets[fragment]
        bucket = torch.from_numpy(gradient[order]).float()
        payload, ctx = codec.compress(bucket, 0)
        out = np.empty_like(gradient)
        out[order] = codec.decompress(payload, ctx).double().numpy()
        return out

    reference = _paper(2, knobs, inner, steps, quantise=quantise)
    assert agree(ours, reference) <= 1e-6
    assert agree(ours, _paper(2, knobs, inner, steps)) > 1e-4  # the quantisation shows


def _param_ranges(layers: list[int]) -> list[tuple[int, int]]:
    """(start, size) of each parameter tensor (weight, bias) of ``layers`` in the flat vector."""
    shapes = [(12 * 16, 12), (12 * 12, 12), (4 * 12, 4)]
    starts = np.cumsum([0, *LAYER_SIZES])
    ranges = []
    for layer in layers:
        weight, bias = shapes[layer]
        ranges += [(int(starts[layer]), weight), (int(starts[layer]) + weight, bias)]
    return ranges


@pytest.mark.parametrize("algo", ["diloco", "streaming_diloco"])
def test_a_lossless_compressor_gives_the_uncompressed_numbers(algo: str) -> None:
    knobs = {**PAPER, "period": 4, **({"fragments": 2, "overlap_steps": 1, "alpha": 0.5} if algo != "diloco" else {})}
    lossless = {"name": "topk", "ratio": 1.0}
    plain = run_ranks(_any_run, 2, algo, knobs, 12, None)
    compressed = run_ranks(_any_run, 2, algo, knobs, 12, lossless)
    assert agree(compressed, plain) <= 1e-6


def _any_run(cluster, channel, algo: str, knobs: dict, steps: int, compress: dict | None) -> np.ndarray:
    if algo == "streaming_diloco":
        return _run(cluster, channel, knobs, "adamw", steps, compress)
    model = _mlp()
    optimizer = inner_optimizer(model)
    algorithm = DiLoCo(DiLoCoConfig(**knobs), cluster, channel, compress=_compress(compress))
    hooked_steps(algorithm, model, optimizer, cluster.rank, steps)
    return flat(model)


# ---- 6. the split, the offsets, the refusals ------------------------------------------------------


def test_fragments_are_strided_layers_or_contiguous_runs_of_about_equal_size() -> None:
    model = _mlp()
    layers = [[m.weight, m.bias] for m in model if isinstance(m, torch.nn.Linear)]
    for pattern, by_count in FRAGMENT_LAYERS.items():
        for fragments, expected in by_count.items():
            split = split_layers(model, fragments, pattern)
            assert [[id(p) for p in f] for f in split] == [
                [id(p) for i in want for p in layers[i]] for want in expected
            ]
    five = torch.nn.Sequential(*[torch.nn.Linear(2, 2) for _ in range(5)])  # strided: p, p + P, ...
    assert [len(f) for f in split_layers(five, 2, "strided")] == [6, 4]  # layers 0, 2, 4 and 1, 3
    # one huge first layer: every fragment still gets a layer
    big = torch.nn.Sequential(torch.nn.Linear(100, 100), torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    assert [len(f) for f in split_layers(big, 3)] == [2, 2, 2]


def test_more_fragments_than_layers_is_refused_in_one_line() -> None:
    from dlcomm.errors import UserError

    with pytest.raises(UserError, match=r"^algo.fragments=4 is invalid: the model has 3 layers with parameters"):
        split_layers(_mlp(), 4)


def test_the_offsets_stagger_the_fragments_over_the_period() -> None:
    assert fragment_offsets(4, 2) == [0, 2]
    assert fragment_offsets(8, 3) == [0, 2, 5]
    assert fragment_offsets(20, 1) == [0]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["algo.overlap_steps=2", "algo.period=4"], "algo.overlap_steps=2 is invalid: tau * fragments must be below"),
        (["algo.fragments=5", "algo.period=4", "algo.overlap_steps=0"], "algo.fragments=5 is invalid"),
        (["algo.alpha=1.5"], "algo.alpha=1.5 is invalid"),
        (["algo.overlap_steps=-1"], "algo.overlap_steps=-1 is invalid"),
    ],
)
def test_knobs_out_of_their_domain_are_refused(overrides: list[str], message: str) -> None:
    from dlcomm.compose import compose
    from dlcomm.errors import UserError

    with pytest.raises(UserError, match=message.replace("*", r"\*")):
        compose(["algo=streaming_diloco", *overrides])
