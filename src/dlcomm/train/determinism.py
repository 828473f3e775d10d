"""``train.deterministic=true``: torch's deterministic algorithms for every rank of the run.

* ``torch.use_deterministic_algorithms(True)``: operations with a deterministic implementation use
  it (cuDNN convolutions among them); an operation that has none stops the rank with torch's
  error naming it (``... does not have a deterministic implementation``), rather than varying.
* ``torch.backends.cudnn.benchmark = False`` (and ``cudnn.deterministic = True``): cuDNN picks
  its convolution algorithm by rule, not by timing, which may choose differently on every run.
* ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` unless the environment already sets it (``:16:8`` is the
  other value cuBLAS documents): cuBLAS's bitwise reproducibility holds for one stream, and with
  several streams only under this setting (cuBLAS docs, "Results reproducibility"). cuBLAS reads
  it when a handle is created, so it is set where a rank starts, before CUDA is first used:
  :func:`dlcomm.launch.rank.run_rank` (a process per rank) and
  :func:`dlcomm.launch.threads.launch_threads` (ranks as threads), and again in
  :func:`dlcomm.launch.rank.train_rank` (idempotent).

What repeats bit for bit, and what cannot, is in docs/metrics.md ("Reproducibility").
"""

from __future__ import annotations

import os

CUBLAS_WORKSPACE_CONFIG = ":4096:8"


def apply_determinism(enabled: bool) -> None:
    """Switch this process to deterministic algorithms when ``enabled`` (``train.deterministic``);
    nothing otherwise (torch's defaults, or what the site set, stay)."""
    if not enabled:
        return
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE_CONFIG)
    import torch

    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
