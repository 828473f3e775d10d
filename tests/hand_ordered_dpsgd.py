"""``dlcomm`` with D-PSGD's exchange replaced by a hand-ordered one, as a user's own algorithm
might write it: each rank posts its send to the right, then its receive from the left, as two
messages of their own, and waits for both. gloo's delivery lets it through; under NCCL's rules
the receive is queued behind a send whose match is queued behind another send: a deadlock.

Usage: ``python tests/hand_ordered_dpsgd.py train algo=dpsgd ...``; tests/test_threads_launcher.py
patches :func:`hand_ordered_after_step` into DPSGD and runs ``cli.main`` in the test's process.
"""

from __future__ import annotations

import sys

from dlcomm.algorithms.dpsgd import DPSGD
from dlcomm.cli import main
from dlcomm.topology.graphs import ring_neighbours


def hand_ordered_after_step(self: DPSGD, step: int) -> None:
    left, right = ring_neighbours(self.cluster.rank, self.cluster.world_size)
    transport = self.cluster.transport
    for buffer, (from_left, _) in zip(self.buffers, self.received):
        send = transport.isend(buffer, right, "world", 0)
        receive = transport.irecv(from_left, left, "world", 0)
        send.wait()
        receive.wait()
        buffer.add_(from_left).div_(2.0)


if __name__ == "__main__":
    DPSGD.after_step = hand_ordered_after_step  # type: ignore[method-assign]  # replacing it is the point
    sys.exit(main())
