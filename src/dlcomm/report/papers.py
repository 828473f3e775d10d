"""The papers' own numbers that ``dlcomm report`` marks beside ours on a figure.

Only numbers that mean the same at our scale are marked: ratios such as a speedup, not
milliseconds or accuracies of another model on another data set. Each entry names where in the
paper it comes from; ``x`` is in the figure's units (workers for ``speedup_vs_workers``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PaperMarks:
    """Points ``(x, y)`` of a paper, drawn as markers labelled ``label``."""

    label: str
    points: tuple[tuple[float, float], ...]


# experiment -> figure (file stem) -> the paper's points on it
MARKS: dict[str, dict[str, PaperMarks]] = {
    # Node-based paper, Table III, ResNet-18 on CIFAR-10: speedup in % over the baseline per GPU
    # count ("@1" at 4 GPUs: about 1%), as a ratio.
    "node_based_table3": {
        "speedup_vs_workers": PaperMarks(
            "paper, Table III (ResNet-18, CIFAR-10)",
            ((4, 1.01), (8, 1.0497), (12, 1.1512), (16, 1.0562), (20, 1.0155)),
        ),
    },
}


def marks(experiment: str, figure: str) -> PaperMarks | None:
    """The paper's points for ``figure`` of ``experiment``, if the paper gives any."""
    return MARKS.get(experiment, {}).get(figure)
