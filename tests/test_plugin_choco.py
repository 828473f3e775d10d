"""The example plugin dlcomm-choco (examples/plugin): CHOCO-SGD found through entry points, its math
against a NumPy transcription of the paper's Algorithm 2, and ``algo=choco`` through the CLI.

Runs where the plugin is installed (CI: ``pip install -e examples/plugin``); skipped elsewhere.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from functools import partial

import numpy as np
import pytest

pytest.importorskip(
    "dlcomm_choco",
    reason="the example plugin is not installed: pip install --no-deps -e examples/plugin",
)

import torch  # noqa: E402

from dlcomm.launch import harness  # noqa: E402
from dlcomm.train.loop import hooked_step  # noqa: E402

import rank_programs  # noqa: E402
from conftest import FAST, mlflow_run, run_cli  # noqa: E402

# Ranks as threads on the in-process fabric (launcher=threads), as tests/test_gossip.py runs them.
run_ranks = partial(harness.run_ranks, in_process="serial")

IN, OUT, BATCH = 5, 3, 4  # a linear model: 15 weights and 3 biases, least squares per rank
SIZES = {1: [OUT * IN + OUT], 2: [OUT * IN, OUT]}  # the segments' sizes (segments=2: weight, bias)


# ---- on the ranks ---------------------------------------------------------------------------


def _squared_error(model: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return 0.5 * ((model(inputs) - targets) ** 2).sum(dim=1).mean()


def _flat(model: torch.nn.Module) -> np.ndarray:
    """Parameters in registration order: the weight row by row, then the bias."""
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy().astype(np.float64)


def _build(cluster, channel, name: str, knobs: dict, lr: float):
    from dlcomm.algorithms.registry import ALGORITHMS

    torch.manual_seed(0)
    model = torch.nn.Linear(IN, OUT)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    cls = ALGORITHMS.get(name)
    algorithm = cls(cls.Config(**knobs), cluster, channel, seed=5)
    algorithm.setup(model, optimizer)
    return model, optimizer, algorithm


def _make_different(model: torch.nn.Module, rank: int) -> None:
    with torch.no_grad():
        noise = torch.Generator().manual_seed(300 + rank)
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=noise))


def _step(algorithm, model, optimizer, batch, step: int) -> None:
    inputs, targets = (torch.from_numpy(a) for a in batch)
    hooked_step(algorithm, model, optimizer, _squared_error, inputs, targets, step)


def choco_steps(cluster, channel, knobs: dict, lr: float, data: list) -> dict:
    """Replicas made different, then ``len(data[rank])`` steps of CHOCO-SGD: this rank's
    parameters before and after each, and its copies x̂_i and x̂_{i-1} + x̂_{i+1} at the end."""
    model, optimizer, algorithm = _build(cluster, channel, "choco", knobs, lr)
    _make_different(model, cluster.rank)
    states = [_flat(model)]
    for step, batch in enumerate(data[cluster.rank]):
        _step(algorithm, model, optimizer, batch, step)
        states.append(_flat(model))
    return {
        "x": states,
        "hat_self": torch.cat(algorithm.hat_self).numpy().astype(np.float64),
        "hat_neighbours": torch.cat(algorithm.hat_neighbours).numpy().astype(np.float64),
    }


def choco_and_dpsgd(cluster, channel, knobs: dict, lr: float, data: list) -> tuple[np.ndarray, np.ndarray]:
    """The same replicas and batches through CHOCO-SGD and D-PSGD: both final parameters."""
    finals = []
    for name, algo_knobs in (("choco", knobs), ("dpsgd", {})):
        model, optimizer, algorithm = _build(cluster, channel, name, algo_knobs, lr)
        _make_different(model, cluster.rank)
        for step, batch in enumerate(data[cluster.rank]):
            _step(algorithm, model, optimizer, batch, step)
        finals.append(_flat(model))
    return finals[0], finals[1]


def resumed_step(cluster, channel, knobs: dict, lr: float, data: list) -> tuple[np.ndarray, np.ndarray]:
    """The last step taken straight on, and again from a checkpoint of the state before it
    (model, optimizer, algorithm: as the train loop saves and loads them) in fresh objects."""
    batches = data[cluster.rank]
    model, optimizer, algorithm = _build(cluster, channel, "choco", knobs, lr)
    _make_different(model, cluster.rank)
    for step, batch in enumerate(batches[:-1]):
        _step(algorithm, model, optimizer, batch, step)
    saved = copy.deepcopy(
        {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "algorithm": algorithm.state_dict()}
    )
    last = len(batches) - 1
    _step(algorithm, model, optimizer, batches[last], last)
    straight = _flat(model)
    model, optimizer, algorithm = _build(cluster, channel, "choco", knobs, lr)
    model.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    algorithm.load_state_dict(saved["algorithm"])
    _step(algorithm, model, optimizer, batches[last], last)
    return straight, _flat(model)


# ---- the reference: Algorithm 2 of Koloskova, Stich, Jaggi (ICML 2019), in NumPy ----------------


def _data(world: int, steps: int, seed: int = 7) -> list:
    """Per rank, per step: a batch (inputs, targets) of its own, float32."""
    rng = np.random.default_rng(seed)
    return [
        [
            (rng.standard_normal((BATCH, IN)).astype(np.float32), rng.standard_normal((BATCH, OUT)).astype(np.float32))
            for _ in range(steps)
        ]
        for _ in range(world)
    ]


def _gradient(x: np.ndarray, inputs: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """d/dx of 0.5 * mean_b ||W a_b + c - y_b||^2 with x = (W row by row, c)."""
    weight, bias = x[: OUT * IN].reshape(OUT, IN), x[OUT * IN :]
    a, y = inputs.astype(np.float64), targets.astype(np.float64)
    residual = a @ weight.T + bias - y  # (BATCH, OUT)
    return np.concatenate([(residual.T @ a / len(a)).reshape(-1), residual.mean(axis=0)])


def _top_k(v: np.ndarray, ratio: float, sizes: list[int], by_magnitude: bool = True) -> np.ndarray:
    """Q: in every segment, the ceil(ratio * size) entries largest in magnitude kept, the rest zero."""
    out, start = np.zeros_like(v), 0
    for size in sizes:
        part = v[start : start + size]
        keep = int(np.ceil(ratio * size))
        order = np.argsort(-np.abs(part) if by_magnitude else -part, kind="stable")[:keep]
        out[start + order] = part[order]
        start += size
    return out


def reference(x0: list, data: list, lr: float, gamma: float, ratio: float, sizes: list[int], wrong: str = "") -> dict:
    """CHOCO-SGD on the ring of len(x0) workers, w_ij = 1/3 for j in {i-1, i, i+1}. Worker i holds
    x_i and, for every j in its neighbourhood, its own copy hat[i][j] of worker j's public x̂_j,
    all starting at 0. Per step: x_i' = x_i - lr * grad; q_i = Q(x_i' - hat[i][i]); every worker
    adds q_j to its copy of x̂_j for each j of its neighbourhood (itself included); then
    x_i = x_i' + gamma * sum_j w_ij (hat[i][j] - hat[i][i]).

    ``wrong`` names a deliberate mistake, to show that the comparison catches it."""
    n = len(x0)

    def neighbourhood(i: int) -> list[int]:
        return [(i - 1) % n, i, (i + 1) % n]

    x = [np.array(v, dtype=np.float64) for v in x0]
    hat = [
        {j: (x[j].copy() if wrong == "hats start at x0" else np.zeros_like(x[j])) for j in neighbourhood(i)}
        for i in range(n)
    ]
    for t in range(len(data[0])):
        half = [x[i] - lr * _gradient(x[i], *data[i][t]) for i in range(n)]
        q = [_top_k(half[i] - hat[i][i], ratio, sizes, by_magnitude=wrong != "top-k by value") for i in range(n)]
        for i in range(n):
            for j in neighbourhood(i):
                if not (wrong == "own copy not updated" and j == i):
                    hat[i][j] = hat[i][j] + q[j]
        weight = 1.0 if wrong == "no w_ij" else 1.0 / 3.0
        x = [half[i] + gamma * sum(weight * (hat[i][j] - hat[i][i]) for j in neighbourhood(i)) for i in range(n)]
    return {"x": x, "hat": [hat[i][i] for i in range(n)]}


# ---- the math --------------------------------------------------------------------------------

CASES = [  # (knobs, fabric's rules)
    ({"ratio": 0.25, "gamma": 0.5, "segments": 1}, "gloo"),
    ({"ratio": 1.0, "gamma": 0.3, "segments": 1}, "gloo"),
    ({"ratio": 0.25, "gamma": 0.5, "segments": 2}, "nccl"),  # top-k per segment; NCCL's matching rules
]
WORLD, STEPS, LR = 4, 3, 0.1


@pytest.mark.parametrize("knobs,semantics", CASES, ids=["top25%-gloo", "uncompressed-gloo", "top25%-2segments-nccl"])
def test_choco_matches_a_numpy_transcription_of_algorithm_2(knobs: dict, semantics: str) -> None:
    data = _data(WORLD, STEPS)
    per_rank = run_ranks(choco_steps, WORLD, knobs, LR, data, semantics=semantics)
    expected = reference(
        [r["x"][0] for r in per_rank], data, LR, knobs["gamma"], knobs["ratio"], SIZES[knobs["segments"]]
    )
    for rank, result in enumerate(per_rank):
        assert np.abs(result["x"][-1] - expected["x"][rank]).max() <= 1e-6, rank
        assert np.abs(result["hat_self"] - expected["hat"][rank]).max() <= 1e-6, rank
        # the copies agree across the ring: what i holds of its neighbours is what they hold of themselves
        neighbours = per_rank[rank - 1]["hat_self"] + per_rank[(rank + 1) % WORLD]["hat_self"]
        assert np.abs(result["hat_neighbours"] - neighbours).max() <= 1e-6, rank
    moved = max(np.abs(r["x"][-1] - r["x"][0]).max() for r in per_rank)
    assert moved > 0.1  # the steps did something


@pytest.mark.parametrize("wrong", ["no w_ij", "own copy not updated", "hats start at x0", "top-k by value"])
def test_the_comparison_tells_a_wrong_detail_apart(wrong: str) -> None:
    """The transcription with one detail changed misses the implementation by far more than 1e-6."""
    knobs = CASES[0][0]
    data = _data(WORLD, STEPS)
    per_rank = run_ranks(choco_steps, WORLD, knobs, LR, data)
    x0 = [r["x"][0] for r in per_rank]
    wrong_x = reference(x0, data, LR, knobs["gamma"], knobs["ratio"], SIZES[1], wrong=wrong)["x"]
    assert max(np.abs(r["x"][-1] - w).max() for r, w in zip(per_rank, wrong_x)) > 1e-3, wrong


@pytest.mark.parametrize("world", [4, 2])
def test_without_compression_and_gamma_1_choco_is_dpsgd(world: int) -> None:
    """ratio = 1: q_i = x_i' - x̂_i, so after the exchange x̂_j = x_j' (from x̂ = 0 on the first
    step too); gamma = 1 then gives sum_j w_ij x_j' = (x_{i-1}' + x_i' + x_{i+1}') / 3, D-PSGD."""
    data = _data(world, STEPS, seed=11)
    for choco, dpsgd in run_ranks(choco_and_dpsgd, world, {"ratio": 1.0, "gamma": 1.0}, LR, data):
        assert np.abs(choco - dpsgd).max() <= 1e-6


def test_the_gossip_step_keeps_the_mean_over_workers() -> None:
    """With lr = 0 only the gossip step moves x: sum_i sum_j w_ij (x̂_j - x̂_i) = 0 (W symmetric)."""
    data = _data(5, STEPS, seed=13)
    per_rank = run_ranks(choco_steps, 5, {"ratio": 0.2, "gamma": 0.7}, 0.0, data)
    for step in range(STEPS + 1):
        mean = np.mean([r["x"][step] for r in per_rank], axis=0)
        assert np.abs(mean - np.mean([r["x"][0] for r in per_rank], axis=0)).max() <= 1e-6, step
    assert max(np.abs(r["x"][-1] - r["x"][0]).max() for r in per_rank) > 0.01


def test_a_checkpoint_holds_the_public_copies() -> None:
    """state_dict/load_state_dict carry x̂: a step from a checkpoint is the step taken straight on."""
    data = _data(WORLD, STEPS, seed=17)
    for straight, resumed in run_ranks(resumed_step, WORLD, {"ratio": 0.25, "gamma": 0.5}, LR, data):
        assert np.array_equal(straight, resumed)


def test_under_fp16_an_inf_halves_only_the_loss_scale_of_its_own_rank() -> None:
    """Gradients stay local (x is gossiped, not gradients): no found-inf agreement, as D-PSGD."""
    results = run_ranks(rank_programs.fp16_loss_scales, 4, "choco", {}, 3, (1, 1), nodes=2)
    halved = {rank for rank, r in enumerate(results) if r["scales"][-1] < r["scales"][0]}
    assert halved == {1}
    assert all(r["flag_groups"] == [] for r in results)


# ---- through dlcomm --------------------------------------------------------------------------


def test_the_entry_points_register_choco_without_importing_torch() -> None:
    code = (
        "import sys\n"
        "from dlcomm.algorithms.registry import ALGORITHMS\n"
        "from dlcomm.compose import compose\n"
        "cls = ALGORITHMS.all()['choco']\n"
        "cfg = compose(['algo=choco'])\n"
        "assert (cls.__module__, cls.display_name) == ('dlcomm_choco.choco', 'CHOCO-SGD'), cls\n"
        "assert vars(cfg.algo) == {'name': 'choco', 'gamma': 0.04, 'ratio': 0.01, 'segments': 1}, cfg.algo\n"
        "assert 'torch' not in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_dlcomm_config_prints_the_knobs(home) -> None:
    result = run_cli(home, "config", "algo=choco", "algo.gamma=0.2")
    assert result.returncode == 0, result.stderr
    assert "name: choco\n  gamma: 0.2\n  ratio: 0.01\n  segments: 1\n" in result.stdout


def test_dlcomm_train_runs_choco_end_to_end(home, cli_here) -> None:
    # through cli.main in this process (ranks as threads either way); a fresh dlcomm process finding the
    # plugin through its entry points is the config and refusal tests' (run_cli)
    result = cli_here(home, "train", *FAST, "algo=choco", "launcher=threads", "train.max_steps=4", "train.epochs=1")
    assert result.returncode == 0, result.stderr[-3000:]
    tags = mlflow_run(result).data.tags
    assert tags["algo"] == "choco"


@pytest.mark.parametrize(
    "knob,rule",
    [
        ("algo.ratio=0", "algo.ratio=0.0 is invalid: the fraction of entries a message keeps must be in (0, 1]"),
        ("algo.gamma=0", "algo.gamma=0.0 is invalid: the consensus step size must be in (0, 1]"),
        ("algo.gamma=1.5", "algo.gamma=1.5 is invalid: the consensus step size must be in (0, 1]"),
    ],
    ids=["ratio=0", "gamma=0", "gamma=1.5"],
)
def test_a_bad_knob_is_refused_in_one_line(home, knob: str, rule: str) -> None:
    result = run_cli(home, "train", *FAST, "algo=choco", knob, "launcher=threads", timeout=60)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dlcomm: error: algo.") and rule in lines[0], lines
    assert "Traceback" not in result.stderr
