"""The final figures are of the finished algorithm (issue 57 item 1): through the real TrainLoop,
every algorithm that holds state past the last step (its class overrides ``finish``: an exchange
in flight, a pull outstanding, a server to tell) is finished before the run's last evaluation, on
every rank. Before, ``TrainLoop`` evaluated in the last epoch's end and called ``finish`` after."""

from __future__ import annotations

import threading

import pytest

from dlcomm.algorithms.base import Algorithm
from dlcomm.algorithms.registry import ALGORITHMS
from dlcomm.catalog import choices
from dlcomm.train.loop import TrainLoop

from conftest import FAST

FINISHING = [name for name in choices("algo") if ALGORITHMS.get(name).finish is not Algorithm.finish]
KNOBS = {
    # P=4, 2 fragments, overlap 1: at step 12 a fragment's exchange is still in flight (the probe)
    "streaming_diloco": ["algo.period=4", "algo.fragments=2", "algo.overlap_steps=1"],
    "gossip_pull": ["train.time_budget_s=0"],
    # period 4 of 12 steps, overlapped: the last period's average is in flight when the steps end
    "diloco": ["algo.period=4", "algo.overlap=delayed"],
    "muloco": ["algo.period=4", "algo.overlap=eager"],
}


def test_the_finishing_algorithms_are_found() -> None:
    assert {"streaming_diloco", "diloco", "muloco", "gossip_pull", "ps"} <= set(FINISHING)


@pytest.mark.parametrize("name", FINISHING)
def test_the_last_evaluation_comes_after_finish_on_every_rank(name, home, monkeypatch, cli_here) -> None:
    events: list[tuple[int, str, bool]] = []  # (thread, event, an exchange in flight)

    def in_flight(algorithm) -> bool:
        return getattr(algorithm, "in_flight", None) is not None

    finish, evaluate = ALGORITHMS.get(name).finish, TrainLoop._evaluate

    def finishing(self):
        events.append((threading.get_ident(), "finish", in_flight(self)))
        return finish(self)

    def evaluating(self):
        events.append((threading.get_ident(), "evaluate", in_flight(self.algorithm)))
        return evaluate(self)

    monkeypatch.setattr(ALGORITHMS.get(name), "finish", finishing)
    monkeypatch.setattr(TrainLoop, "_evaluate", evaluating)
    result = cli_here(
        home, "train", *FAST, "model=mlp", "launcher=threads", "nodes=2", f"algo={name}", "train.max_steps=12",
        "train.epochs=1", *KNOBS.get(name, []),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    workers = {thread for thread, event, _ in events if event == "evaluate"}
    assert len(workers) == 2
    for worker in workers:
        mine = [(event, flying) for thread, event, flying in events if thread == worker]
        assert [event for event, _ in mine].count("finish") == 1, mine
        assert mine[-1][0] == "evaluate", f"{name}: the last evaluation came before finish: {mine}"
        assert not mine[-1][1], f"{name}: evaluated with an exchange in flight: {mine}"
    if name in (
        "streaming_diloco",
        "diloco",
        "muloco",
    ):  # the case the issue found: something was in flight when the steps ended
        assert any(flying for _, event, flying in events if event == "finish")
