"""Serial compute turns among rank processes (``launcher=local launcher.compute=serial``): one
process computes at a time, the turn goes round first come first served, a wait hands it over,
and a run under turns gives the numbers of one without."""

from __future__ import annotations

import multiprocessing as mp
import time

from conftest import FAST, children, parent_id, run_cli
from dlcomm.comm.process_turns import ProcessTurns

RANKS, ROUNDS, HOLD_S = 3, 6, 0.02


def _take_turns(turns: ProcessTurns, rank: int, log, start) -> None:
    """Pass the turn ROUNDS times, holding it HOLD_S each time; log (rank, entered, left)."""
    turn = turns.for_rank(rank)
    start.wait()
    for _ in range(ROUNDS):
        turn.pass_turn()
        entered = time.monotonic()
        time.sleep(HOLD_S)
        log.put((rank, entered, time.monotonic()))
    turn.close()


def _run_ranks(turns: ProcessTurns) -> list[tuple[int, float, float]]:
    context = mp.get_context("spawn")
    log, start = context.Queue(), context.Event()
    processes = [context.Process(target=_take_turns, args=(turns, rank, log, start)) for rank in range(RANKS)]
    for process in processes:
        process.start()
    time.sleep(1.0)  # every process waits at the start line
    start.set()
    entries = [log.get(timeout=60) for _ in range(RANKS * ROUNDS)]
    for process in processes:
        process.join(timeout=30)
        assert process.exitcode == 0
    return sorted(entries, key=lambda entry: entry[1])


def test_one_process_holds_the_turn_at_a_time_and_it_goes_round() -> None:
    turns = ProcessTurns(mp.get_context("spawn"), RANKS)
    entries = _run_ranks(turns)
    for (_, _, left), (_, entered, _) in zip(entries, entries[1:]):
        assert entered >= left - 1e-4  # no two holders at once
    holders = [rank for rank, _, _ in entries]
    # once every rank has asked, a rank that passes goes behind the others: every window of
    # RANKS consecutive turns holds every rank (a plain lock lets the releaser take it back)
    settled = holders[RANKS:]
    assert all(len(set(settled[i:i + RANKS])) == RANKS for i in range(len(settled) - RANKS + 1)), holders


def test_a_wait_hands_the_turn_over_and_takes_it_back() -> None:
    turns = ProcessTurns(mp.get_context("spawn"), 2)
    first, second = turns.for_rank(0), turns.for_rank(1)
    first.pass_turn()
    with first.waiting():
        assert not first.holding
        second.pass_turn()  # would block forever if the waiting rank still held the turn
        assert second.holding
        second.close()
    assert first.holding
    first.close()
    second.pass_turn()  # free again
    second.close()


def test_a_simulated_run_under_turns_gives_the_numbers_of_threads(home) -> None:
    """sgp (collectives and messages) and ps (a service process and its incast) as processes
    taking turns, beside the same jobs as threads (whose numbers are those of processes)."""
    job = ["train", "-m", "algo=sgp,ps", *FAST, "train.max_steps=12", "network=eth_1g", "network.mode=simulate",
           "train.threads_per_rank=1", "nodes=2"]
    metrics = {}
    for launcher in ("local", "threads"):
        result = run_cli(home, *job, f"launcher={launcher}", timeout=400)
        assert result.returncode == 0, result.stderr
        taking_turns = result.stdout.count("launcher=local: the 2 workers compute one at a time")
        assert taking_turns == (2 if launcher == "local" else 0)
        metrics |= {(run.data.tags["algo"], launcher): run.data.metrics for run in children(home, parent_id(result))}
    for algo in ("sgp", "ps"):
        for name in ("final/train_loss", "final/test_acc_mean"):
            assert metrics[algo, "local"][name] == metrics[algo, "threads"][name], (algo, name)
