"""DeMo (``algo=demo``) against the authors' ``DeMo.step`` (bloc97/DeMo ``demo.py``), transcribed.

1. A float64 transcription of the reference's step (its own momentum per worker, decay then
   ``+ lr g``, the orthonormal DCT-II of every chunk, top-k per chunk by magnitude, the sent part
   subtracted from the momentum, the all-gathered payloads averaged entry by entry over the workers
   that sent it, the sign of the decoded aggregate, decoupled weight decay, ``p -= lr sign``) gives
   dlcomm's parameters after 10 steps at 2, 3 and 4 workers; the transcription with any one slip
   (no sign, the DCT unnormalised, the chunk edge rounded up, the sent part not subtracted, the
   aggregate subtracted instead, the sum over all workers divided by W, ties broken by a stable
   sort) ends elsewhere, so the comparison can fail. Every worker's inputs leave four features at
   zero, so whole DCT blocks of its momentum are zero and the top-k picks among ties there.
2. The same under NCCL's rules at 2, 3, 4 workers and 2 nodes x 2.
3. The bytes counted are the payload tensors' sizes: per tensor, chunks x k values (float64 here)
   and as many uint8 indices, all-gathered: (W - 1) payloads sent by every rank.
4. A run preempted mid-epoch and resumed from its checkpoint ends with the uninterrupted run's
   parameters: the momenta are in the checkpoint.

Every rank is a thread of this process on the in-process fabric (``launcher=threads``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dlcomm.algorithms.demo import DeMo, DeMoConfig
from dlcomm.train.loop import cross_entropy_loss, hooked_step
from outer_fixtures import assert_resumed_equal, blind_batch, flat, gap, run_ranks, tiny_mlp

import rank_programs

KNOBS = {"decay": 0.9, "topk": 3, "chunk": 5}  # edges: 12 -> 4, 16 -> 4, 4 -> 4 (largest divisors <= 5)
LR, WD = 0.01, 0.05
STEPS = 10


def _lr(step: int) -> float:
    """A learning rate that changes every step (a schedule): lr inside the momentum then matters."""
    return LR * (0.5 + 0.1 * step)


def _mlp() -> torch.nn.Module:
    return tiny_mlp(activation=torch.nn.ReLU, dtype=torch.float64)


def _optimizer(model: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=LR, weight_decay=WD)


def _run(cluster, channel, knobs: dict, steps: int) -> dict:
    model = _mlp()
    optimizer = _optimizer(model)
    algorithm = DeMo(DeMoConfig(**knobs), cluster, channel)
    algorithm.setup(model, optimizer)
    sent = []
    for step in range(steps):
        inputs, labels = blind_batch(cluster.rank, step)  # a chunk of columns without gradient
        for group in optimizer.param_groups:
            group["lr"] = _lr(step)
        channel.begin_iteration()
        hooked_step(algorithm, model, optimizer, cross_entropy_loss, inputs, labels, step)
        sent.append(channel.end_iteration().bytes_sent)
    return {"params": flat(model), "bytes": sent, "shapes": [tuple(p.shape) for p in model.parameters()]}


# ---- the transcription -------------------------------------------------------------------------


def _edge(n: int, target: int, up: bool = False) -> int:
    """The reference's _get_smaller_split: the largest divisor of n not above target (n if n <= target)."""
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    if up:  # slip: the smallest divisor at or above the target
        return min([d for d in divisors if d >= target] or [n])
    return max(d for d in divisors if d <= target)


def _dct(n: int, ortho: bool = True) -> np.ndarray:
    """D[k, j]: DCT-II of e_j at frequency k; orthonormal (scipy's norm='ortho') or unnormalised (2 sum)."""
    d = np.array([[2.0 * math.cos(math.pi * k * (2 * j + 1) / (2 * n)) for j in range(n)] for k in range(n)])
    if ortho:
        d[0] *= math.sqrt(1.0 / (4 * n))
        d[1:] *= math.sqrt(1.0 / (2 * n))
    return d


class Slip:
    sign = True  # the sign of the decoded aggregate
    ortho = True  # orthonormal DCT
    edge_up = False  # chunk edge: largest divisor <= target
    subtract = "own"  # what leaves the momentum: own | none | aggregate
    mean = "senders"  # an entry's aggregate: the mean over its senders | "world": sum / W | "sum"
    lr_inside = True  # the momentum takes lr g (False: g)
    ties = "topk"  # torch.topk | "stable": a stable sort of the magnitudes


def _blocks(matrix: np.ndarray, h: int, w: int) -> np.ndarray:
    """(rows, cols) -> rows of chunks (row-block major, then column-block), each h*w flattened row-major."""
    rows, cols = matrix.shape
    return np.stack([matrix[y : y + h, x : x + w].reshape(-1) for y in range(0, rows, h) for x in range(0, cols, w)])


def _unblocks(chunks: np.ndarray, rows: int, cols: int, h: int, w: int) -> np.ndarray:
    out = np.zeros((rows, cols))
    at = 0
    for y in range(0, rows, h):
        for x in range(0, cols, w):
            out[y : y + h, x : x + w] = chunks[at].reshape(h, w)
            at += 1
    return out


class Codec:
    """One tensor's chunking and DCT as the reference's TransformDCT (a vector: one row of pieces)."""

    def __init__(self, shape: tuple, slip: Slip) -> None:
        self.shape = shape
        rows, cols = (1, shape[0]) if len(shape) == 1 else shape
        self.rows, self.cols = rows, cols
        self.h = 1 if len(shape) == 1 else _edge(rows, KNOBS["chunk"], slip.edge_up)
        self.w = _edge(cols, KNOBS["chunk"], slip.edge_up)
        self.dh, self.dw = _dct(self.h, slip.ortho), _dct(self.w, slip.ortho)

    def encode(self, x: np.ndarray) -> np.ndarray:
        chunks = _blocks(x.reshape(self.rows, self.cols), self.h, self.w)
        return np.stack([(self.dh @ c.reshape(self.h, self.w) @ self.dw.T).reshape(-1) for c in chunks])

    def decode(self, chunks: np.ndarray) -> np.ndarray:
        inverse_h, inverse_w = np.linalg.inv(self.dh), np.linalg.inv(self.dw)
        spatial = np.stack([(inverse_h @ c.reshape(self.h, self.w) @ inverse_w.T).reshape(-1) for c in chunks])
        return _unblocks(spatial, self.rows, self.cols, self.h, self.w).reshape(self.shape)


def _pick(chunks: np.ndarray, k: int, ties: str) -> np.ndarray:
    if ties == "stable":
        return np.argsort(-np.abs(chunks), axis=-1, kind="stable")[:, :k]
    return torch.topk(torch.from_numpy(np.abs(chunks)), k, dim=-1, largest=True, sorted=False).indices.numpy()


def _reference(world: int, steps: int, slip: type[Slip] = Slip) -> list[np.ndarray]:
    params = [[p.detach().numpy().copy() for p in _mlp().parameters()] for _ in range(world)]
    codecs = [Codec(p.shape, slip) for p in params[0]]
    momenta = [[np.zeros_like(p) for p in params[0]] for _ in range(world)]
    for step in range(steps):
        grads = []
        for rank in range(world):
            model = _mlp()
            torch.nn.utils.vector_to_parameters(
                torch.from_numpy(np.concatenate([p.reshape(-1) for p in params[rank]])), model.parameters()
            )
            inputs, labels = blind_batch(rank, step)
            cross_entropy_loss(model, inputs, labels).backward()
            grads.append([p.grad.numpy().copy() for p in model.parameters()])
        lr = _lr(step)
        for t, codec in enumerate(codecs):
            sent = []
            for rank in range(world):
                params[rank][t] = params[rank][t] * (1.0 - lr * WD)
                momenta[rank][t] = KNOBS["decay"] * momenta[rank][t] + (lr if slip.lr_inside else 1.0) * grads[rank][t]
                encoded = codec.encode(momenta[rank][t])
                k = min(KNOBS["topk"], encoded.shape[1])
                picked = _pick(encoded, k, slip.ties)
                values = np.take_along_axis(encoded, picked, axis=1)
                own = np.zeros_like(encoded)
                np.put_along_axis(own, picked, values, axis=1)
                if slip.subtract == "own":
                    momenta[rank][t] = momenta[rank][t] - codec.decode(own)
                sent.append((picked, values))
            total, count = np.zeros_like(encoded), np.zeros_like(encoded)
            for picked, values in sent:  # rank order
                for row in range(encoded.shape[0]):
                    total[row, picked[row]] += values[row]
                    count[row, picked[row]] += 1
            aggregate = total / {"world": world, "sum": 1}.get(slip.mean, np.maximum(count, 1))
            decoded = codec.decode(aggregate)
            for rank in range(world):
                if slip.subtract == "aggregate":
                    momenta[rank][t] = momenta[rank][t] - decoded
                params[rank][t] = params[rank][t] - lr * (np.sign(decoded) if slip.sign else decoded)
    return [np.concatenate([p.reshape(-1) for p in rank_params]) for rank_params in params]


def _slip(**changes) -> type[Slip]:
    return type("Slipped", (Slip,), changes)


SLIPS = {
    "no sign": _slip(sign=False),
    "unnormalised DCT": _slip(ortho=False),
    "chunk edge rounded up": _slip(edge_up=True),
    "sent part kept in the momentum": _slip(subtract="none"),
    "aggregate subtracted": _slip(subtract="aggregate"),
    "sum over W": _slip(mean="world"),
    "sum": _slip(mean="sum"),
    "lr not inside the momentum": _slip(lr_inside=False),
    "stable-sort ties": _slip(ties="stable"),
}


@pytest.mark.parametrize("world", [2, 3, 4])
def test_the_reference_step_transcribed_gives_dlcomms_parameters(world: int) -> None:
    ours = run_ranks(_run, world, KNOBS, STEPS)
    for result in ours[1:]:  # every worker steps with the same aggregate: the replicas stay equal
        assert np.array_equal(result["params"], ours[0]["params"])
    assert gap(ours, _reference(world, STEPS)) <= 1e-12
    for name, slip in SLIPS.items():  # the comparison can fail, on each slip
        assert gap(ours, _reference(world, STEPS, slip)) > 1e-6, name


@pytest.mark.parametrize(("nodes", "per_node"), [(2, 1), (3, 1), (4, 1), (2, 2)], ids=["2", "3", "4", "2x2"])
def test_the_reference_step_under_nccls_rules(nodes: int, per_node: int) -> None:
    world = nodes * per_node
    ours = run_ranks(_run, world, KNOBS, STEPS, nodes=nodes, semantics="nccl")
    assert gap(ours, _reference(world, STEPS)) <= 1e-12


def test_the_bytes_counted_are_the_payloads() -> None:
    world = 4
    ours = run_ranks(_run, world, KNOBS, 2, nodes=world)
    payload = 0
    for shape in ours[0]["shapes"]:
        rows, cols = (1, shape[0]) if len(shape) == 1 else shape
        h = 1 if len(shape) == 1 else _edge(rows, KNOBS["chunk"])
        w = _edge(cols, KNOBS["chunk"])
        k = min(KNOBS["topk"], h * w)
        payload += (rows // h) * (cols // w) * k * (8 + 1)  # float64 values, uint8 indices (chunks of <= 256)
    for result in ours:
        assert result["bytes"] == [(world - 1) * payload] * 2


# ---- resumed mid-epoch -------------------------------------------------------------------------

RESUME_STOP_AT = 5  # stopped after 6 of 12 steps: 2 into epoch 2 of 4 steps


def test_a_run_resumed_mid_epoch_ends_with_the_uninterrupted_runs_parameters(tmp_path) -> None:
    spec = rank_programs.run_spec(
        ["algo=demo", "algo.chunk=16", "algo.topk=8", "optim.lr=0.001", *rank_programs.SMALL_JOB, "seed=5"]
    )
    assert_resumed_equal(spec, str(tmp_path / "checkpoints"), RESUME_STOP_AT, DeMo, ("momenta",), nonzero=True)


def test_indices_travel_at_the_narrowest_width() -> None:
    """A 64 x 64 chunk (4096 positions) sends uint16 indices, 16 x 16 uint8, as Psyche's compress_idx."""
    from dlcomm.algorithms.chunks import Chunks, top_k
    from dlcomm.compress.base import pack

    for edge, width in [(64, 2), (16, 1)]:
        chunks = Chunks((128, 64), edge, True, torch.float32, torch.device("cpu"))
        indices, values = top_k(chunks.encode(torch.randn(128, 64)), 32)
        message = pack([values, indices.to(chunks.index_dtype())])
        assert message.numel() == chunks.chunks * 32 * (4 + width)
        assert int(indices.max()) < chunks.entries
