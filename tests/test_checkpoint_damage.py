"""A damaged, truncated or foreign checkpoint is named in one line (issue 50): which file, what is
wrong, how to go on; never a traceback of torch's or int()'s."""

from __future__ import annotations

import pytest
import torch

from dlcomm.errors import UserError
from dlcomm.train.checkpoint import Checkpointing


def _saved(folder, step: int = 3) -> Checkpointing:
    checkpointing = Checkpointing(folder, 0, torch.device("cpu"))
    checkpointing.save(step, {"model": torch.nn.Linear(2, 2).state_dict(), "loop": {}}, barrier=lambda: None)
    return checkpointing


def _one_line(refused: pytest.ExceptionInfo) -> str:
    message = str(refused.value)
    assert "\n" not in message
    assert "remove the run's checkpoints folder" in message and "trains from step 0" in message
    return message


def test_a_marker_that_names_no_step_is_named_with_the_complete_steps(tmp_path) -> None:
    checkpointing = _saved(tmp_path)
    (tmp_path / "latest").write_text("abc\n")
    with pytest.raises(UserError) as refused:
        checkpointing.load()
    message = _one_line(refused)
    assert f"checkpoint marker {tmp_path / 'latest'} holds 'abc'" in message and "holds step3" in message


@pytest.mark.parametrize("keep", [0.5, 0.0])
def test_a_rank_file_cut_short_is_named(tmp_path, keep: float) -> None:
    checkpointing = _saved(tmp_path)
    path = tmp_path / "step3" / "rank0.pt"
    path.write_bytes(path.read_bytes()[: int(path.stat().st_size * keep)])
    with pytest.raises(UserError) as refused:
        checkpointing.load()
    assert f"checkpoint {path} cannot be read (" in _one_line(refused) and "damaged or cut short" in str(refused.value)


def test_a_missing_rank_file_is_named(tmp_path) -> None:
    checkpointing = _saved(tmp_path)
    (tmp_path / "step3" / "rank0.pt").unlink()
    with pytest.raises(UserError) as refused:
        checkpointing.load()
    assert "is missing, though" in _one_line(refused)


def test_a_checkpoint_of_another_model_is_named(tmp_path) -> None:
    """TrainLoop._restore words load_state_dict's size mismatch (a model of other sizes)."""
    from dlcomm.train.loop import TrainLoop

    class Loop:  # what _restore uses of a TrainLoop: its checkpointing and load_state_dict
        checkpointing = _saved(tmp_path)
        model = torch.nn.Linear(3, 3)

        def load_state_dict(self, state) -> None:
            self.model.load_state_dict(state["model"])

    with pytest.raises(UserError) as refused:
        TrainLoop._restore(Loop(), Loop.checkpointing.load())
    message = _one_line(refused)
    assert "is of another model or configuration than this run's (RuntimeError: Error(s) in loading" in message
