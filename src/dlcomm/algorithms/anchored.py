"""Averaging parameters through a compressor by their change since the last average
(Qsparse-local-SGD's rule, Basu et al., NeurIPS 2019, Alg. 1), shared by ``local_sgd`` and
``node_based``'s consensus points:

    d_i = x_i - a,    x_i <- a + C-mean_i(d_i),    a <- x_i

``a`` (the anchor) is the last average, the same on every member, so only the local change is
compressed (a compressor of the parameters themselves would average sparse or quantised models);
with no loss it is the plain average, ``a + mean(x_i - a) = mean(x_i)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from dlcomm.algorithms.buckets import Bucket
    from dlcomm.comm.channel import Channel
    from dlcomm.compress.base import Compressor


class ChangeAverage:
    """The rule above over flat parameter ``buffers`` (each the view of its bucket in ``buckets``),
    their compressor keys ``first_key``, ``first_key + 1``, ...; the anchors start as the buffers."""

    def __init__(
        self, compressor: Compressor, buffers: list[torch.Tensor], buckets: list[Bucket], first_key: int = 0
    ) -> None:
        self.compressor, self.buffers, self.buckets, self.first_key = compressor, buffers, buckets, first_key
        self.anchors = [buffer.clone() for buffer in buffers]

    def average(self, channel: Channel, group: str, step: int) -> None:
        import torch

        changes = [buffer - anchor for buffer, anchor in zip(self.buffers, self.anchors)]
        handles = [
            self.compressor.start(
                change, self.first_key + index, step, channel, group, [p.shape for p in bucket.params]
            )
            for index, (change, bucket) in enumerate(zip(changes, self.buckets))
        ]
        with torch.no_grad():
            for buffer, anchor, change, handle in zip(self.buffers, self.anchors, changes, handles):
                handle.wait()
                anchor.add_(change)
                buffer.copy_(anchor)

    def state_dict(self) -> dict:
        return {"compressor": self.compressor.state_dict(), "anchors": [a.clone() for a in self.anchors]}

    def load_state_dict(self, state: dict) -> None:
        from dlcomm.saved import copy_into, entry, tensors

        if "compressor" in state:
            anchors = tensors(entry(state, "anchors", "the algorithm's state"), self.anchors, "the algorithm's anchors")
            self.compressor.load_state_dict(state["compressor"])
            copy_into(self.anchors, anchors, "the algorithm's anchors")
