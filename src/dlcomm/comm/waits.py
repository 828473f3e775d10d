"""Waiting for peers, told apart from the transfer (docs/metrics.md, "Waiting is not communication").

A rank blocked in ``Handle.wait()`` between host times ``lo`` and ``returned`` (the works' own
``wait()`` returning) spent that time in one of two ways:

* **transfer**: the operation was moving data: every party had posted and it had not completed,
  i.e. inside some work's ``[started, finished]``;
* **waiting for peers**: before that (a member of the collective, or the other side of a message,
  had not reached it: its compute was still running, or, where ranks share cores or a GPU, had not
  had its turn yet) and after it (the data was there, but the rank's thread had not got a core or
  its turn back).

So ``peer_wait = (returned - lo) - |union_w [started_w, finished_w] ∩ [lo, returned]|``. What
follows ``returned`` inside ``Handle.wait`` (an emulated network's sleep to the modelled end) is
communication. A transfer the rank performs inside its own issuing call (the in-process fabric's
last member reduces for everyone) is communication too: :func:`transfer_within` over the call.

Only a transport whose works carry ``started`` and ``finished`` can tell the two apart: the
in-process fabric (``launcher=threads``) stamps them when the last party posts and when it
completes. torch.distributed's works (gloo, NCCL) do not say when the peer arrived, so under
processes the split is unknown (nan) and the blocked time stays one figure.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from dlcomm.comm.device_timing import union_length


def transfer_within(works: Sequence[Any], lo: float, hi: float) -> float:
    """Length of the union of the works' ``[started, finished]`` inside ``[lo, hi]`` (seconds);
    nan when a work does not carry those stamps, or carries them unset (not completed)."""
    if len(works) == 1:  # a collective's one work: no list, no sort (this runs at every wait)
        work = works[0]
        started, finished = getattr(work, "started", math.nan), getattr(work, "finished", math.nan)
        if started != started or finished != finished:  # nan
            return math.nan
        return max(0.0, min(hi, finished) - max(lo, started))
    intervals = []
    for work in works:
        started, finished = getattr(work, "started", math.nan), getattr(work, "finished", math.nan)
        if math.isnan(started) or math.isnan(finished):
            return math.nan
        low, high = max(lo, started), min(hi, finished)
        if high > low:
            intervals.append((low, high))
    return union_length(sorted(intervals))


def peer_wait(works: Sequence[Any], lo: float, returned: float) -> float:
    """The part of a wait ``[lo, returned]`` that was not the transfer (module docstring); nan
    where the works cannot say."""
    moving = transfer_within(works, lo, returned)
    return max(0.0, (returned - lo) - moving) if not math.isnan(moving) else math.nan
