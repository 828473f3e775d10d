"""Chunked top-k, the codec DeMo and SparseLoCo send a parameter tensor with (docs/algorithms.md).

Both reference codes cut each parameter tensor into chunks (bloc97/DeMo ``demo.py``:
``TransformDCT``, ``CompressDCT``; Templar's CCLoco/SparseLoCo ``src/tplr/ccloco.py``:
``ChunkingTransform``, ``TopKCompressor``) and keep, in every chunk, the ``k`` entries of largest
magnitude:

- a chunk edge ``c`` for a dimension of ``n`` is the largest divisor of ``n`` that is at most the
  target (``_get_smaller_split``): ``n`` itself when ``n <= target``;
- a matrix ``(rows, cols)`` is cut into blocks ``h x w`` (``h`` from ``rows``, ``w`` from ``cols``),
  a vector of ``n`` into pieces of ``c``; a tensor of more dimensions is taken as the matrix
  ``(shape[0], prod(shape[1:]))`` (dlcomm's: the references take matrices and vectors only);
- with ``dct`` (DeMo) every block is transformed by the orthonormal DCT-II along both edges
  (``B -> C_h B C_w^T``; a piece ``v -> C v``), and decoded by the transpose;
- ``k`` per chunk is ``min(topk, chunk entries)`` (at least 1), chosen by ``torch.topk`` of the
  magnitudes (``largest=True, sorted=False``: its tie rule is the references' too);
- several senders' ``(indices, values)`` of one chunk are combined by ``scatter_reduce`` with
  ``reduce="mean", include_self=False`` on zeros: an entry sent by ``m`` workers gets the mean of
  their ``m`` values (not the sum over all ``W``), an entry no one sent stays 0.

Payloads travel as one packed ``uint8`` message a tensor (values in their dtype, indices in the
narrowest integer type that holds a chunk's positions: ``uint8`` up to 256 entries, ``uint16`` up to
65536, else ``int32``, as Psyche's ``compress_idx`` in ``shared/modeling/src/distro.rs``; bloc97/DeMo
and CCLoco send torch.topk's ``int64``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    import torch


def chunk_edge(n: int, target: int) -> int:
    """The largest divisor of ``n`` that is at most ``target`` (``n`` when ``n <= target``)."""
    if n <= target:
        return n
    return max(d for d in range(1, target + 1) if n % d == 0)


def dct_matrix(size: int, dtype, device) -> torch.Tensor:
    """The orthonormal DCT-II matrix ``C[k, j] = s_k cos(pi (2j + 1) k / (2 size))``, ``s_0 =
    sqrt(1/size)``, ``s_k = sqrt(2/size)``: ``C v`` transforms, ``C^T`` inverts (built in float64)."""
    import torch

    k = torch.arange(size, dtype=torch.float64, device=device).unsqueeze(1)
    j = torch.arange(size, dtype=torch.float64, device=device).unsqueeze(0)
    matrix = torch.cos(math.pi * (2 * j + 1) * k / (2 * size)) * math.sqrt(2.0 / size)
    matrix[0] /= math.sqrt(2.0)
    return matrix.to(dtype)


def index_dtype(entries: int):
    """The narrowest integer type holding the positions ``0 .. entries - 1``."""
    import torch

    if entries <= 256:
        return torch.uint8
    if entries <= 2**16:
        return torch.uint16
    return torch.int32


def as_matrix(shape: Sequence[int]) -> tuple[int, ...]:
    """``(n,)`` for a vector (or a scalar), ``(rows, cols)`` for a matrix or more dimensions."""
    if len(shape) <= 1:
        return (math.prod(shape),)
    return (shape[0], math.prod(shape[1:]))


class Chunks:
    """How one tensor of ``shape`` is cut (and, with ``dct``, transformed): :meth:`encode` gives
    ``(chunks, entries)``, :meth:`decode` the inverse."""

    def __init__(self, shape: Sequence[int], target: int, dct: bool, dtype, device) -> None:
        self.shape = tuple(shape)
        self.dims = as_matrix(self.shape)
        self.edges = tuple(chunk_edge(n, target) for n in self.dims)
        self.grid = tuple(n // c for n, c in zip(self.dims, self.edges))
        self.chunks, self.entries = math.prod(self.grid), math.prod(self.edges)
        self.bases = [dct_matrix(c, dtype, device) for c in self.edges] if dct else None

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        import torch

        if len(self.dims) == 1:
            pieces = x.reshape(self.grid[0], self.edges[0])
            return pieces @ self.bases[0].T if self.bases else pieces
        (ny, nx), (h, w) = self.grid, self.edges
        blocks = x.reshape(ny, h, nx, w).permute(0, 2, 1, 3)
        if self.bases:
            blocks = torch.einsum("yxhw,bh,dw->yxbd", blocks, self.bases[0], self.bases[1])
        return blocks.reshape(self.chunks, self.entries)

    def decode(self, chunks: torch.Tensor) -> torch.Tensor:
        import torch

        if len(self.dims) == 1:
            pieces = chunks @ self.bases[0] if self.bases else chunks
            return pieces.reshape(self.shape)
        (ny, nx), (h, w) = self.grid, self.edges
        blocks = chunks.reshape(ny, nx, h, w)
        if self.bases:
            blocks = torch.einsum("yxbd,bh,dw->yxhw", blocks, self.bases[0], self.bases[1])
        return blocks.permute(0, 2, 1, 3).reshape(self.shape)

    def kept(self, topk: int) -> int:
        return max(1, min(topk, self.entries))

    def index_dtype(self):
        return index_dtype(self.entries)


def top_k(chunks: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(indices, values)`` of the ``k`` largest magnitudes of every chunk (row)."""
    import torch

    indices = torch.topk(chunks.abs(), k=k, dim=-1, largest=True, sorted=False).indices
    return indices, torch.gather(chunks, -1, indices)


def scatter_mean(like: torch.Tensor, indices: Sequence[torch.Tensor], values: Sequence[torch.Tensor]) -> torch.Tensor:
    """Zeros shaped as ``like`` (chunks, entries), every sent entry the mean of the values sent for it."""
    import torch

    out = torch.zeros_like(like)
    index = torch.cat([i.long() for i in indices], dim=-1)
    return out.scatter_reduce_(-1, index, torch.cat(list(values), dim=-1).to(like.dtype), "mean", include_self=False)


def check_knobs(chunk: int, topk: int, model: torch.nn.Module) -> None:
    """Refuse ``algo.chunk`` beyond the model's largest dimension (it cuts nothing) and ``algo.topk``
    beyond the entries of the model's largest chunk (every entry would be sent), in one line."""
    from dlcomm.errors import UserError

    shapes = [as_matrix(p.shape) for p in model.parameters() if p.requires_grad]
    largest = max(n for dims in shapes for n in dims)
    if chunk > largest:
        raise UserError(
            f"algo.chunk={chunk} is invalid: the model's largest dimension is {largest}, and a chunk edge beyond it "
            f"cuts nothing; pass algo.chunk={largest} or less"
        )
    entries = max(math.prod(chunk_edge(n, chunk) for n in dims) for dims in shapes)
    if topk > entries:
        raise UserError(
            f"algo.topk={topk} is invalid: the largest chunk of this model (algo.chunk={chunk}) holds {entries} "
            f"entries, and more would send every entry; pass algo.topk={entries} or less"
        )
