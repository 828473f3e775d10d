"""A ``dlcomm train`` whose rank 0 trains on one fixed batch and records when it asks for each.

For ``scripts/bench_step_overhead.py``'s separate-process measurement: the run goes through the
real command and launcher (``dlcomm.cli.main``: the driver, its status line and system-metrics
sampler, the rank with its reporter, bar, metric stream and memory sampler, a real MLflow run),
and only the data set's training batches are replaced: one batch made once on the rank's device,
handed again and again, the ``perf_counter`` of every request kept. The gaps between requests are
the loop's whole iteration minus producing the batch (which here is nothing), as the interleaved
measurement times it.

The replacement is installed by :func:`install` when the environment holds :data:`STEPS_FILE`
(the file that receives the gaps, as JSON, once there are ``DLCOMM_BENCH_STEPS`` of them):

* ``launcher=threads``: the ranks are threads of this process and load the data through
  ``dlcomm.data.build_dataset``, patched here;
* ``launcher=local``: the ranks are forked from a server that preloads
  ``dlcomm.launch.procstart.PRELOAD``; this module joins that list (its folder joins
  ``PYTHONPATH``, which the server inherits), and on its import there
  patches ``dlcomm.launch.rank.build_dataset`` (the environment is the driver's: the server
  starts at the first launch).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from time import perf_counter

STEPS_FILE = "DLCOMM_BENCH_STEPS_FILE"
STEPS = "DLCOMM_BENCH_STEPS"  # gaps after which they are written (warm-up + measured steps)
WARMUP = "DLCOMM_BENCH_WARMUP"  # steps before the turns begin
TURNS = "DLCOMM_BENCH_TURNS"  # a folder with two FIFOs: take turns with a plain process (FixedBatches)
BLOCK = 50  # steps of each turn
DEVICE = "DLCOMM_BENCH_DEVICE"  # cpu or cuda: where the fixed batch lives (the run's train.device)


class FixedBatches:
    """``data`` (a dlcomm data set) whose training batches are one fixed batch (module docstring).

    With :data:`TURNS` set (a folder holding the FIFOs ``to_plain`` and ``to_dlcomm``), the run
    takes turns with a plain-torch process: after the warm-up, every :data:`BLOCK` steps it hands
    the turn over (a byte to ``to_plain``) and waits for it to come back (a byte from
    ``to_dlcomm``), outside the timed gaps, and at the end it says ``q``. The two processes so
    alternate block by block, and a change in the machine's speed hits both alike."""

    def __init__(self, data, seed: int) -> None:
        self._data, self._seed = data, seed

    def __getattr__(self, name):
        return getattr(self._data, name)

    def train_batches(self, indices, batch_size, seed):
        return self._batches(batch_size)

    def _batches(self, batch_size: int):
        import torch

        # the rank has set its device by now; on the device, the loop's .to() is a no-op
        on_cuda = os.environ.get(DEVICE) == "cuda"
        device = torch.device("cuda", torch.cuda.current_device()) if on_cuda else torch.device("cpu")
        batch = fixed_batch(self._data, batch_size, self._seed, device)
        wanted, warmup = int(os.environ.get(STEPS, "0")), int(os.environ.get(WARMUP, "0"))
        target, turns = os.environ.get(STEPS_FILE, ""), os.environ.get(TURNS, "")
        fifos: tuple[int, int] | None = None  # (to_plain, to_dlcomm) while taking turns
        if turns:  # the plain process opens them in the same order
            to_plain = os.open(Path(turns) / "to_plain", os.O_WRONLY)
            fifos = to_plain, os.open(Path(turns) / "to_dlcomm", os.O_RDONLY)
        gaps: list[float] = []
        handed = None
        while True:
            if handed is not None:
                gaps.append(perf_counter() - handed)
            if len(gaps) == wanted and target:
                Path(target).write_text(json.dumps(gaps))
                if fifos is not None:
                    os.write(fifos[0], b"q")
                    os.close(fifos[0])
                    os.close(fifos[1])
                    fifos = None
            elif fifos is not None and len(gaps) >= warmup and (len(gaps) - warmup) % BLOCK == 0:
                os.write(fifos[0], b"g")
                os.read(fifos[1], 1)
            handed = perf_counter()
            yield batch


def fixed_batch(data, batch_size: int, seed: int, device):
    """The benchmark's batch: Gaussian inputs of the data set's shape and uniform labels, drawn
    from ``seed`` (the same on both sides of every comparison)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    return (
        torch.randn(batch_size, *data.input_shape, generator=generator).to(device),
        torch.randint(0, data.num_classes, (batch_size,), generator=generator).to(device),
    )


class _Patched:
    """``build_dataset`` whose data sets hand out fixed batches (:class:`FixedBatches`)."""

    bench_patched = True  # what _patch_ranks looks for (a class of another copy of this module has it too)

    def __init__(self, build) -> None:
        self._build = build

    def __call__(self, cfg, *args, **kwargs) -> FixedBatches:
        return FixedBatches(self._build(cfg, *args, **kwargs), seed=0)


def _patch_ranks() -> None:
    """Patch where rank code looks the data set up (idempotent)."""
    import dlcomm.data
    import dlcomm.launch.rank

    for module in (dlcomm.data, dlcomm.launch.rank):
        if not getattr(module.build_dataset, "bench_patched", False):
            setattr(module, "build_dataset", _Patched(module.build_dataset))


def install() -> None:
    """Fixed batches for every rank this process starts (module docstring)."""
    from dlcomm.launch import procstart

    _patch_ranks()
    # the fork server is a fresh interpreter that does not get this process's sys.path (Python 3.11
    # passes it to the ranks it forks, not to its own preload): it finds this module by PYTHONPATH
    here = str(Path(__file__).resolve().parent)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (here, os.environ.get("PYTHONPATH"))))
    if __name__ not in procstart.PRELOAD:
        procstart.PRELOAD = (*procstart.PRELOAD, __name__)


if os.environ.get(STEPS_FILE) and __name__ != "__main__":  # imported by the fork server: its ranks' data
    _patch_ranks()
