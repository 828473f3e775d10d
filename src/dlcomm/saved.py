"""Reading the state an algorithm or a compressor saved in a checkpoint, checked against this run.

A checkpoint holds what a run of some configuration saved; a run resumed from it may have another
model, bucket size, number of fragments or peers (its configuration hash guards a SLURM resume,
but a checkpoint folder can be copied, hand-edited or damaged). A ``load_state_dict`` reads its
part through these helpers, which check every entry before anything of it is used: a missing key,
a list of another length, a tensor of another shape or an index out of range raises
:class:`StateMismatch` in words, and the train loop names the checkpoint file in one line
(:meth:`dlcomm.train.loop.TrainLoop._restore`) instead of an ``IndexError`` deep inside a step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:
    import torch


class StateMismatch(Exception):
    """A saved state that does not fit this run: what does not fit, in words (one line)."""


def entry(state: Any, key: str, where: str) -> Any:
    """``state[key]``; ``where`` names ``state`` in the refusal (e.g. ``the algorithm's state``)."""
    if not isinstance(state, Mapping):
        raise StateMismatch(f"{where} is a {type(state).__name__}, not a mapping")
    if key not in state:
        raise StateMismatch(f"{where} holds no {key!r} (it holds {', '.join(map(repr, state)) or 'nothing'})")
    return state[key]


def tensors(saved: Any, like: Sequence[torch.Tensor], what: str) -> list[torch.Tensor]:
    """``saved`` checked to be as many tensors as ``like`` (this run's), each of its shape."""
    import torch

    if not isinstance(saved, (list, tuple)):
        raise StateMismatch(f"{what} is a {type(saved).__name__}, not a list of tensors")
    if len(saved) != len(like):
        raise StateMismatch(f"{what} holds {len(saved)} tensors where this run has {len(like)}")
    for number, (theirs, mine) in enumerate(zip(saved, like)):
        if not isinstance(theirs, torch.Tensor):
            raise StateMismatch(f"{what}[{number}] is a {type(theirs).__name__}, not a tensor")
        if theirs.shape != mine.shape:
            raise StateMismatch(
                f"{what}[{number}] has shape {tuple(theirs.shape)} where this run's has {tuple(mine.shape)}"
            )
    return list(saved)


def copy_into(mine: Sequence[torch.Tensor], saved: Any, what: str) -> None:
    """Copy ``saved`` into this run's tensors ``mine``, once all of it is checked (:func:`tensors`)."""
    for target, value in zip(mine, tensors(saved, mine, what)):
        target.copy_(value)


def index(saved: Any, count: int, what: str) -> int:
    """``saved`` checked to be an integer from 0 to ``count - 1`` (an index into this run's ``count``)."""
    if isinstance(saved, bool) or not isinstance(saved, int):
        raise StateMismatch(f"{what}={saved!r} is not an index")
    if not 0 <= saved < count:
        raise StateMismatch(f"{what}={saved} is out of range: this run has {count} (0 to {count - 1})")
    return saved
