"""What the benchmark scripts share: one ``dlcomm train`` as a user runs it, and its timing table."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

RUN_ID = re.compile(r"mlflow run ([0-9a-f]{32})")


def train_timings(overrides: list[str], home: str | None = None, script: str = "bench") -> pd.DataFrame:
    """``dlcomm train <overrides>`` in a subprocess with results under ``home`` (a fresh folder when
    None); the run's timings.csv. A failed run ends the script with its stderr's tail."""
    if home is None:
        with tempfile.TemporaryDirectory(prefix="dlcomm-bench-") as fresh:
            return train_timings(overrides, fresh, script)
    env = dict(os.environ, DLCOMM_HOME=home, PYTHONWARNINGS="ignore")
    done = subprocess.run(
        [sys.executable, "-m", "dlcomm.cli", "train", *overrides], cwd=home, env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        sys.exit(f"{script}: `dlcomm train {' '.join(overrides)}` failed:\n{done.stderr[-3000:]}")
    run_id = RUN_ID.findall(done.stdout)[-1]
    return pd.read_csv(Path(home) / "results" / "runs" / run_id / "timings.csv")


class PlainStep:
    """One AllReduce-SGD step as a careful user writes it in plain torch, on its own replica of
    ``model`` (built by the caller as dlcomm builds it: same seed, same optimizer)::

        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model, inputs, labels)
        loss.backward()
        torch._foreach_copy_(bucket_views, grads)      # the gradients into one flat bucket
        all_reduce(bucket)                             # torch.distributed.all_reduce (None: none)
        bucket.div_(world_size)                        # only where world_size != 1
        torch._foreach_copy_(grads, bucket_views)      # and back
        optimizer.step()

    Beyond the four lines of a one-process step it does what dlcomm's ``algo=allreduce`` does at
    every world size, 1 included, so that both sides do the same work: each way one multi-tensor
    copy of the gradients into one flat, preallocated bucket (``torch._foreach_copy_``, as dlcomm's
    ``Bucket`` does, and as DDP copies into its buckets by default), the ``all_reduce`` of the bucket
    where the caller gives one (``all_reduce(bucket)``: a callable that sums it over the job in
    place and returns once done; None: no collective, as dlcomm calls none on a group of one rank),
    the division only where it divides. What is left out is what a careful user leaves out: no
    per-tensor Python loop, no recording, no timing, no scheduler for a constant rate."""

    def __init__(self, model, optimizer, loss_fn, all_reduce, world_size: int = 1) -> None:
        import torch

        self.model, self.optimizer, self.loss_fn = model, optimizer, loss_fn
        self.all_reduce, self.world_size = all_reduce, world_size
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.bucket = torch.zeros(sum(p.numel() for p in self.params), device=self.params[0].device)
        self.views = [v.view_as(p) for v, p in zip(self.bucket.split([p.numel() for p in self.params]), self.params)]
        self._foreach_copy = torch._foreach_copy_

    def __call__(self, inputs, labels):
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.model, inputs, labels)
        loss.backward()
        grads = [p.grad for p in self.params]
        self._foreach_copy(self.views, grads)
        if self.all_reduce is not None:
            self.all_reduce(self.bucket)
        if self.world_size != 1:
            self.bucket.div_(self.world_size)
        self._foreach_copy(grads, self.views)
        self.optimizer.step()
        return loss
