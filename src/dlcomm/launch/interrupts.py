"""Ctrl-C (SIGINT), SIGTERM and the other stop signals in the process that opens, drives and closes
runs (``dlcomm train``).

The signals handled (:data:`STOP_SIGNALS`) are the ones a terminal, a shell or a scheduler sends to
end a process, whose default action would kill the driver and leave its run RUNNING: SIGINT
(Ctrl-C), SIGTERM (``kill``, a scheduler's cancel), SIGHUP (the terminal or ssh session closed),
SIGQUIT (Ctrl-\\), SIGUSR1 (a scheduler's notice, e.g. ``scancel --signal=USR1``) and SIGXCPU (a CPU
time limit). SIGUSR2 is left alone: it is SLURM's time-limit warning, which a SLURM task takes
itself (:class:`dlcomm.train.checkpoint.WarningSignal`). One handler for the whole process,
installed once, with two states:

* **released** (the default): the signal raises ``KeyboardInterrupt`` where the main thread is, as
  Python's own Ctrl-C does; the others behave the same way. The work under way (composing,
  training, waiting for ranks) stops and is torn down.
* **held** (while a run is being opened or closed, and for good once the last run's outcome is
  recorded): the signal is only recorded (:attr:`Interrupts.received`). The records written then
  are never cut short, so a run is never left RUNNING by its own driver, and after the outcome is
  recorded the exit code is the recorded status's whatever arrives later.

The state is a flag the handler reads, not handlers swapped in and out, so there is no moment
between "held" and "released" when a signal finds neither. A raised interrupt holds the rest:
the teardown it starts is not itself interrupted (it is bounded by ``launcher.teardown_grace_s``).
"""

from __future__ import annotations

import signal
import threading

STOP_SIGNALS = tuple(
    getattr(signal, name)
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGXCPU")
    if hasattr(signal, name)
)


class Interrupts:
    """The process's stop-signal state (see the module docstring)."""

    def __init__(self) -> None:
        self.held = False
        self.received: int | None = None  # the last signal's number, once one came
        self._previous: dict[int, object] = {}

    def install(self) -> "Interrupts":
        """Take over :data:`STOP_SIGNALS` (main thread only: signals are delivered there). A signal
        this process was started ignoring stays ignored (a shell's background job ignores SIGINT;
        ``nohup`` ignores SIGHUP: such a run goes on when the terminal closes)."""
        if not self._previous and threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                if signal.getsignal(signum) is not signal.SIG_IGN:
                    self._previous[signum] = signal.signal(signum, self._on_signal)
        return self

    def uninstall(self) -> None:
        """Give the handlers from before :meth:`install` back and forget what was received (for
        callers that run ``dlcomm`` inside their own process, such as the tests)."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]
        self._previous.clear()
        self.held = False
        self.received = None

    def hold(self) -> None:
        """From now on a signal is recorded, not acted on."""
        self.held = True

    def release(self) -> None:
        """Act on signals again; one that came while held acts now (``KeyboardInterrupt``)."""
        self.held = False
        if self.received is not None:
            self.held = True
            raise KeyboardInterrupt

    def check(self) -> None:
        """Raise ``KeyboardInterrupt`` if a signal came: one raised during the checks may have been
        swallowed by a library's bare ``except:``; nothing is recorded before this is called."""
        if self.received is not None:
            raise KeyboardInterrupt

    def ignore(self) -> None:
        """The process is about to exit with its code decided: ignore the stop signals to the end.
        (Python gives an ignored signal no handler back when it shuts down; a handled one gets the
        default back, which would kill the process in its last milliseconds with another code.)"""
        self.held = True
        for signum in self._previous:
            signal.signal(signum, signal.SIG_IGN)

    @property
    def name(self) -> str:
        return signal.Signals(self.received).name if self.received is not None else ""

    def _on_signal(self, signum: int, frame: object) -> None:
        self.received = signum
        if not self.held:
            self.held = True  # the teardown this starts runs to its end
            raise KeyboardInterrupt


INTERRUPTS = Interrupts()
