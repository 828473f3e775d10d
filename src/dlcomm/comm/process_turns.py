"""Serial compute turns among the rank processes of one machine (``launcher=local``,
``launcher.compute=serial``): the process counterpart of :class:`dlcomm.comm.inprocess.Turns`.

One worker process computes at a time, with every core; it hands the turn over whenever it waits
for communication and at every iteration's start, so each rank's compute is measured as that of
a rank alone on the machine (``network.mode=simulate``'s clock) while the ranks still run the
same program with the same numbers. The turn goes round first come, first served: a rank that
asks while another holds it joins the back of a queue in shared memory and sleeps on a semaphore
of its own until the holder hands it over, so a rank that passes its turn gets it back only after
every rank already waiting.

Only workers take turns; a service process (parameter server, manager) runs freely. Ranks start
without the turn (setup and the first collectives run at once) and take it at their first
iteration; a wait entered without the turn does not take it afterwards.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Iterator

_HOLDER, _HEAD, _COUNT, _QUEUE = 0, 1, 2, 3  # the shared array: holder (-1: nobody), queue ring
_NOBODY = -1


class ProcessTurns:
    """The shared state, made by the launcher with its multiprocessing ``context`` and handed to
    every rank process (it pickles through ``spawn``); each process then uses :meth:`for_rank`."""

    def __init__(self, context: Any, ranks: int) -> None:
        self.ranks = ranks
        self._state = context.Array("i", [_NOBODY, 0, 0] + [0] * ranks)
        self._wake = [context.Semaphore(0) for _ in range(ranks)]

    def for_rank(self, rank: int) -> "RankTurn":
        return RankTurn(self, rank)

    def acquire(self, rank: int) -> None:
        """Return once ``rank`` holds the turn (at once if nobody holds it and nobody waits)."""
        state = self._state
        with state.get_lock():
            if state[_HOLDER] == _NOBODY and state[_COUNT] == 0:
                state[_HOLDER] = rank
                return
            state[_QUEUE + (state[_HEAD] + state[_COUNT]) % self.ranks] = rank
            state[_COUNT] += 1
        self._wake[rank].acquire()  # the releasing rank made us the holder before waking us

    def release(self, rank: int) -> None:
        """``rank`` hands the turn to the rank that has waited longest (or to nobody)."""
        state = self._state
        with state.get_lock():
            if state[_HOLDER] != rank:
                raise RuntimeError(f"rank {rank} released a compute turn held by {state[_HOLDER]}")
            if state[_COUNT] == 0:
                state[_HOLDER] = _NOBODY
                return
            following = state[_QUEUE + state[_HEAD]]
            state[_HEAD] = (state[_HEAD] + 1) % self.ranks
            state[_COUNT] -= 1
            state[_HOLDER] = following
        self._wake[following].release()


class RankTurn:
    """One rank process's side: whether it holds the turn, and the hand-overs the transport makes."""

    def __init__(self, turns: ProcessTurns, rank: int) -> None:
        self._turns = turns
        self.rank = rank
        self.holding = False
        self._trainer: int | None = None  # the thread that takes turns; others (a responder) run freely

    def pass_turn(self) -> None:
        """At an iteration's start: let every waiting rank go first, then compute."""
        self._trainer = threading.get_ident()
        if self.holding:
            self._turns.release(self.rank)
            self.holding = False
        self._turns.acquire(self.rank)
        self.holding = True

    @contextmanager
    def waiting(self) -> Iterator[None]:
        """Around a wait for other ranks: the turn is handed over before and taken back after
        (not after a wait that raised: the rank is failing, and the holder may be gone)."""
        if not self.holding or threading.get_ident() != self._trainer:
            yield
            return
        self._turns.release(self.rank)
        self.holding = False
        yield
        self._turns.acquire(self.rank)
        self.holding = True

    def close(self) -> None:
        if self.holding:
            self._turns.release(self.rank)
            self.holding = False


class TurnWork:
    """A torch.distributed work whose ``wait`` hands the turn over while the transfer is pending."""

    def __init__(self, work: Any, turn: RankTurn) -> None:
        self._work = work
        self._turn = turn

    def wait(self) -> Any:
        if self._work.is_completed():
            return self._work.wait()
        with self._turn.waiting():
            return self._work.wait()

    def is_completed(self) -> bool:
        return self._work.is_completed()

    def __getattr__(self, name: str) -> Any:  # _source_rank and the rest of torch's Work
        return getattr(self._work, name)
