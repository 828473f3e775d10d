"""Checkpoints for preemption and time limits: save at epoch ends and when the scheduler warns,
resume where the last complete checkpoint left off.

Layout: ``<run_dir>/checkpoints/step<N>/rank<r>.pt``, one file per rank, and ``latest``, which
names the newest step that EVERY rank finished writing (rank 0 writes it after a barrier), so a
job killed halfway through saving resumes from the previous complete checkpoint.

The warning signal (SLURM sends ``SIGUSR2`` ``signal_delay_s`` before the time limit, or on
``scancel --signal=USR2``) reaches the ranks at slightly different moments, so a rank only
raises a flag; every ``check_every`` iterations the ranks take the MAX of their flags in a
one-integer allreduce (``Channel.any_rank``: outside the timed region and not recorded as the
algorithm's communication) and all of them stop after the same iteration.

Loading never runs code from the file: ``torch.load(weights_only=True)`` unpickles tensors and
plain containers only, and :data:`SAFE_GLOBALS` names the few classes of dlcomm's own a
checkpoint holds besides (the loop's timing rows and statistics). A file placed in the folder by
someone else that names any other class or callable is refused in one line
(:class:`~dlcomm.errors.UserError`), before anything of it runs.
"""

from __future__ import annotations

import os
import pickle
import signal
from pathlib import Path
from typing import Any, Callable, Protocol

import torch

from dlcomm.errors import UserError, first_line
from dlcomm.metrics.rows import IterationRow
from dlcomm.metrics.stats import Count, Mean, StatLog

# What a checkpoint holds beyond tensors, numbers, strings and containers (TrainLoop.state_dict).
SAFE_GLOBALS: list[Callable[..., Any] | tuple[Callable[..., Any], str]] = [IterationRow, StatLog, Mean, Count]


class Preempted(Exception):
    """Every rank saved a checkpoint at ``step`` after the warning signal; the job should requeue."""

    def __init__(self, step: int) -> None:
        super().__init__(f"stopped after step {step} on the scheduler's warning signal; checkpoint saved")
        self.step = step


class WarningSignal:
    """A flag raised by the scheduler's warning signal (install it as early as possible: an
    uncaught SIGUSR2 would end the process)."""

    def __init__(self, signum: int = signal.SIGUSR2) -> None:
        self.raised = False
        signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, frame: object) -> None:
        self.raised = True


class Warned(Protocol):
    """What :class:`Checkpointing` reads of a warning: whether it was raised (a :class:`WarningSignal`,
    or a test's own flag)."""

    @property
    def raised(self) -> bool: ...


def model_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``model.state_dict()`` with every tensor alone in its storage. ``torch.save`` writes the
    whole storage a tensor views: under ``launcher.compute=batched`` a rank's parameters are
    views of every rank's stacked tensors (:mod:`dlcomm.train.batched`), which would put all the
    ranks' weights in each rank's file."""
    state = model.state_dict()
    for name, tensor in state.items():
        if tensor.untyped_storage().nbytes() > tensor.numel() * tensor.element_size():
            state[name] = tensor.clone()
    return state


#: How to go on from a checkpoint that cannot be used, for the one-line refusals.
AFRESH = "remove the run's checkpoints folder ({folder}) and start the job again: the run then trains from step 0"


def load_checkpoint(path: Path, device: torch.device | str = "cpu") -> dict[str, Any]:
    """A checkpoint file's contents, unpickled with weights only (see the module docstring). A file
    that is missing, cut short or not a checkpoint at all is one line naming it."""
    afresh = AFRESH.format(folder=path.parent.parent)
    try:
        with torch.serialization.safe_globals(SAFE_GLOBALS):
            state = torch.load(path, map_location=device, weights_only=True)
    except FileNotFoundError:
        raise UserError(
            f"checkpoint {path} is missing, though {path.parent.parent / 'latest'} names its step as complete; {afresh}"
        ) from None
    except (RuntimeError, EOFError, OSError, ValueError) as error:  # a zip cut short, bytes that are no checkpoint
        raise UserError(
            f"checkpoint {path} cannot be read ({first_line(error)}): it is damaged or cut short; {afresh}"
        ) from None
    except pickle.UnpicklingError as error:  # torch's weights-only unpickler refused something
        first = next((line.strip() for line in str(error).splitlines() if "GLOBAL" in line), type(error).__name__)
        raise UserError(
            f"checkpoint {path} holds more than weights and is not loaded ({first}); a checkpoint "
            "dlcomm wrote holds nothing else: remove the file, or the run's checkpoints folder, "
            "to start the run afresh"
        ) from None
    if not isinstance(state, dict):
        raise UserError(f"checkpoint {path} is not one dlcomm wrote (a {type(state).__name__}, not a state); {afresh}")
    return state


class Checkpointing:
    def __init__(
        self, folder: Path, rank: int, device: torch.device, warning: Warned | None = None, check_every: int = 10
    ) -> None:
        self.folder = Path(folder)
        self.rank = rank
        self.device = device  # where checkpoints are loaded to
        self.warning = warning
        self.check_every = max(1, check_every)
        self.loaded_from: Path | None = None  # the file :meth:`load` read, for the refusals of what it holds

    # ---- the stop agreement --------------------------------------------------------------
    def stop_now(self, steps_done: int, any_rank: Callable[[bool], bool]) -> bool:
        """After ``steps_done`` iterations: did any rank get the warning? (Same answer on every
        rank; ``any_rank`` is the Channel's one-flag agreement.)"""
        if self.warning is None or steps_done % self.check_every:
            return False
        return any_rank(self.warning.raised)

    # ---- files ---------------------------------------------------------------------------
    def latest_step(self) -> int | None:
        """The step ``latest`` names (None: no checkpoint yet); one line when it names none."""
        marker = self.folder / "latest"
        if not marker.is_file():
            return None
        text = marker.read_text(errors="replace").strip()
        if not text.isdigit():
            complete = sorted(entry.name for entry in self.folder.glob("step*") if entry.is_dir())
            found = f" (the folder holds {', '.join(complete)})" if complete else ""
            raise UserError(
                f"checkpoint marker {marker} holds {text[:40]!r}, not the step of a complete checkpoint{found}; "
                f"write the step number of a complete step<N> folder into it, or {AFRESH.format(folder=self.folder)}"
            )
        return int(text)

    def load(self) -> dict[str, Any] | None:
        """This rank's part of the newest complete checkpoint, or None."""
        step = self.latest_step()
        if step is None:
            return None
        self.loaded_from = self.folder / f"step{step}" / f"rank{self.rank}.pt"
        return load_checkpoint(self.loaded_from, self.device)

    def save(self, step: int, state: dict[str, Any], barrier: Callable[[], None]) -> None:
        """Write this rank's ``state``; once all ranks have, rank 0 marks ``step`` the newest and
        removes older checkpoints."""
        target = self.folder / f"step{step}"
        target.mkdir(parents=True, exist_ok=True)
        partial = target / f"rank{self.rank}.pt.partial"
        torch.save(state, partial)
        os.replace(partial, target / f"rank{self.rank}.pt")
        barrier()
        if self.rank == 0:
            previous = self.latest_step()
            marker = self.folder / "latest.partial"
            marker.write_text(f"{step}\n")
            os.replace(marker, self.folder / "latest")
            if previous is not None and previous != step:
                for old in (self.folder / f"step{previous}").glob("rank*.pt"):
                    old.unlink()
                (self.folder / f"step{previous}").rmdir()
        barrier()
