"""MuLoCo: DiLoCo with Muon as the inner optimizer (Thérien, Huang, Defazio, Rish, Belilovsky,
"MuLoCo: Muon is a practical inner optimizer for DiLoCo", arXiv 2505.23725).

The outer loop is DiLoCo's (:mod:`dlcomm.algorithms.diloco`, every knob, ``compress=`` and
``overlap`` included); what differs is the inner optimizer, ``optim=muon`` (torch's Muon on the
hidden matrices, AdamW on the rest: :mod:`dlcomm.train.muon`), which ``configs/algo/muloco.yaml``
makes the default, and the outer defaults, those of the reference code's DiLoCo-with-Muon config
(facebookresearch/MuLoCo, torchtitan/config/diloco/2x_4gpu_muloco.py: ``outer_optimizer`` SGD
lr 0.9, momentum 0.8, Nesterov; ``sync_steps`` 30).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dlcomm.algorithms.diloco import DiLoCo, DiLoCoConfig
from dlcomm.algorithms.registry import register
from dlcomm.config.schema import domain


@dataclass
class MuLoCoConfig(DiLoCoConfig):
    """``algo=muloco``, MuLoCo (Thérien et al. 2025, arXiv 2505.23725): DiLoCo (algo=diloco, all its
    knobs) whose inner optimizer is Muon (optim=muon, the default here); the outer SGD's defaults are
    the MuLoCo reference config's (lr 0.9, momentum 0.8, Nesterov, H = 30)."""

    name: str = "muloco"
    period: int = field(
        default=30,
        metadata=domain(
            low=1, means="H, the number of inner steps between outer steps,", doc="the reference config's sync_steps"
        ),
    )
    outer_lr: float = field(
        default=0.9,
        metadata=domain(above=0, means="the outer SGD's learning rate", doc="the reference config's outer lr"),
    )
    outer_momentum: float = field(
        default=0.8,
        metadata=domain(
            low=0, below=1, means="the outer SGD's momentum", doc="the reference config's outer momentum (Nesterov)"
        ),
    )


@register
class MuLoCo(DiLoCo):
    display_name = "MuLoCo"
    Config = MuLoCoConfig
