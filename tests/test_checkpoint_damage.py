"""A damaged, truncated or foreign checkpoint is named in one line (issue 50): which file, what is
wrong, how to go on; never a traceback of torch's or int()'s."""

from __future__ import annotations

from pathlib import Path

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


# ---- an algorithm's state that does not fit the run, through the train loop a rank runs ----------------

STOP_AT = 5  # Streaming DiLoCo, period 4, 2 fragments, tau 1: fragment 1's exchange is in flight after step 6


def _tamper_in_flight(state: dict) -> str:
    state["algorithm"]["in_flight"]["fragment"] = 7
    return "(in-flight fragment=7 is out of range: this run has 2 (0 to 1))"


def _tamper_delta(state: dict) -> str:
    state["algorithm"]["in_flight"]["delta"] = []
    return "(fragment 1's outer gradient holds 0 tensors where this run has 1)"


def _tamper_theta(state: dict) -> str:
    theta = state["algorithm"]["theta"]
    state["algorithm"]["theta"] = [theta[0][:-1], *theta[1:]]
    return f"(the algorithm's theta[0] has shape ({theta[0].numel() - 1},) where this run's has ({theta[0].numel()},))"


TAMPERS = {"fragment": _tamper_in_flight, "delta": _tamper_delta, "theta": _tamper_theta}


def _stopped_tampered_resumed(cluster, channel, spec, folder: str, tamper: str):
    """Stop with an exchange in flight, change this rank's checkpoint file, resume: the refusal
    (and the words expected in it) or None."""
    from dlcomm.algorithms.streaming_diloco import StreamingDiLoCo
    from dlcomm.train.checkpoint import load_checkpoint

    import rank_programs

    *_, stopped = rank_programs.train_until_warned(cluster, channel, spec, folder, STOP_AT, StreamingDiLoCo)
    path = Path(folder) / f"step{stopped}" / f"rank{cluster.rank}.pt"
    state = load_checkpoint(path)
    expected = TAMPERS[tamper](state)
    torch.save(state, path)
    try:
        rank_programs.train_until_warned(cluster, channel, spec, folder, None, StreamingDiLoCo)
    except UserError as refused:
        return str(refused), str(path), expected
    return None, str(path), expected


@pytest.mark.parametrize("tamper", sorted(TAMPERS))
def test_an_algorithm_state_that_does_not_fit_the_run_is_named_with_its_file(tmp_path, tamper: str) -> None:
    """Before: an in-flight fragment out of range ended in a raw `IndexError: list index out of range`
    naming no file; other lengths and shapes named the folder only."""
    from dlcomm.launch.harness import run_ranks

    import rank_programs

    spec = rank_programs.run_spec(
        [
            "algo=streaming_diloco",
            "algo.period=4",
            "algo.fragments=2",
            "algo.overlap_steps=1",
            *rank_programs.SMALL_JOB,
        ]
    )
    folder = str(tmp_path / "checkpoints")
    for message, path, expected in run_ranks(_stopped_tampered_resumed, 2, spec, folder, tamper, nodes=2):
        assert message is not None and "\n" not in message
        assert message.startswith(f"checkpoint {path} is of another model or configuration than this run's {expected}")
        assert "remove the run's checkpoints folder" in message and "trains from step 0" in message
