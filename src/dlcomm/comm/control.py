"""Control messages between processes that do not run in lockstep, and pulls of a peer's model.

Asynchronous schemes (pull-gossip, its communication manager) need a process to answer
messages while its training loop is busy elsewhere. :class:`Responder` is a thread that
receives small control messages from any rank (one tag, any source) and hands each to a
handler; the handler may answer with a control message or with a tensor (a model snapshot). All of it
travels over gloo (the Cluster's ``control`` group), on GPUs too: NCCL cannot receive from
any source.
The training thread meanwhile blocks wherever it likes (collectives included) without
deadlocking a peer that waits for an answer.

A control message is ``MESSAGE_SLOTS`` float64 numbers, the first being its kind (an
algorithm's own codes are >= 0; :data:`STOP` is the plane's). Messages of one sender to one
receiver arrive in the order sent, so a responder that has seen ``STOP`` from every peer
will never receive anything again and ends: every process sends ``STOP`` to its peers when
it is finished (:meth:`ControlPlane.close`), and only once nothing it asked for is still
to be answered by a peer (a responder may answer after its own process said ``STOP``).

A pull (:meth:`ControlPlane.pull`) is a control request followed by the peer's answer, a
tensor; under a network model it is modelled as one message ``peer -> self`` starting at the
requester's chosen clock time ``start`` (``alpha + S/beta``, :mod:`dlcomm.comm.cost`). Control
messages are counted (bytes, messages) but not modelled: a few bytes beside the models.
"""

from __future__ import annotations

import queue
import threading
from typing import Callable, Sequence

import torch

from dlcomm.comm import traffic
from dlcomm.comm.channel import Channel, Handle
from dlcomm.comm.transport import Work

CONTROL_TAG = (1 << 19) + 1
PAYLOAD_TAG = (1 << 19) + 2
MESSAGE_SLOTS = 6
STOP = -1.0

Handler = Callable[[int, list[float]], None]


class ControlPlane:
    """One process's control messages: send to a rank, receive through a responder thread."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.rank = channel.cluster.rank
        self.transport = channel.cluster.transport
        self.inbox: "queue.Queue[tuple[int, list[float]]]" = queue.Queue()
        self._thread: threading.Thread | None = None
        self._peers: tuple[int, ...] = ()
        self._send_lock = threading.Lock()
        self._sending: list[tuple[Work, torch.Tensor]] = []
        self.failure: BaseException | None = None

    # ---- sending ---------------------------------------------------------------------
    # Sends never block: a gloo send completes only once the receiver has posted its receive,
    # and two responders each blocked sending to the other would wait forever. The message
    # and its work are kept until the send is seen complete.
    def send(self, dst: int, kind: float, *values: float) -> None:
        """A control message ``[kind, *values]`` to ``dst``."""
        message = torch.zeros(MESSAGE_SLOTS, dtype=torch.float64, device="cpu")  # gloo, on every cluster
        message[0] = kind
        message[1 : 1 + len(values)] = torch.tensor(values, dtype=torch.float64, device="cpu")
        self.channel.record(
            "control", "job", message.numel() * 8, traffic.point_to_point_traffic(message.numel() * 8), phase="control"
        )
        self._post(message, dst, CONTROL_TAG)

    def send_tensor(self, dst: int, tensor: torch.Tensor) -> None:
        """Answer a pull of ``dst`` with ``tensor`` (from the responder's handler)."""
        nbytes = tensor.numel() * tensor.element_size()
        self.channel.record("serve", "job", nbytes, traffic.point_to_point_traffic(nbytes), phase="serve")
        self._post(tensor.cpu(), dst, PAYLOAD_TAG)

    def _post(self, tensor: torch.Tensor, dst: int, tag: int) -> None:
        with self._send_lock:
            self._sending = [(work, kept) for work, kept in self._sending if not work.is_completed()]
            self._sending.append((self.transport.isend(tensor, dst, "control", tag), tensor))

    def _drain_sends(self) -> None:
        with self._send_lock:
            sending, self._sending = self._sending, []
        for work, _ in sending:
            work.wait()

    # ---- receiving -------------------------------------------------------------------
    def start(self, peers: Sequence[int], handler: Handler | None = None) -> None:
        """Receive on a thread until every rank of ``peers`` has sent ``STOP``. ``handler(src,
        message)`` runs on that thread for every message; without one, messages go to
        :attr:`inbox`."""
        self._peers = tuple(peers)
        deliver = handler or (lambda src, message: self.inbox.put((src, message)))
        self._thread = threading.Thread(target=self._receive, args=(deliver,), daemon=True, name="dlcomm-responder")
        self._thread.start()

    def serve_forever(self, peers: Sequence[int], handler: Handler) -> None:
        """Receive on this thread until every peer has sent ``STOP`` (a service's main loop)."""
        self._peers = tuple(peers)
        self._receive(handler)
        if self.failure is not None:
            raise self.failure

    def finish_serving(self, peers: Sequence[int]) -> None:
        """A service's last words: ``STOP`` to ``peers``, and every send delivered."""
        for peer in peers:
            self.send(peer, STOP)
        self._drain_sends()

    def _receive(self, handler: Handler) -> None:
        waiting = set(self._peers)
        message = torch.zeros(MESSAGE_SLOTS, dtype=torch.float64, device="cpu")
        try:
            while waiting:
                work = self.transport.irecv(message, None, "control", CONTROL_TAG)
                work.wait()
                src = self.transport.source_rank(work)
                values = message.cpu().tolist()
                if values[0] == STOP:
                    waiting.discard(src)
                    continue
                handler(src, values)
        except BaseException as error:  # noqa: BLE001 - re-raised in the training thread
            self.failure = error
            self.inbox.put((-1, [STOP]))

    def poll(self) -> tuple[int, list[float]] | None:
        """The next delivered message, if any (never blocks)."""
        self.check()
        try:
            return self.inbox.get_nowait()
        except queue.Empty:
            return None

    def next_message(self, timeout: float) -> tuple[int, list[float]]:
        """The next delivered message, waiting up to ``timeout`` seconds (``queue.Empty`` after)."""
        self.check()
        with self.transport.blocking():  # threads: the answer may need another rank's turn
            return self.inbox.get(timeout=timeout)

    def check(self) -> None:
        """Raise, in the calling thread, the error that ended the responder."""
        if self.failure is not None:
            raise RuntimeError(f"the control responder of rank {self.rank} failed: {self.failure}") from self.failure

    # ---- pulls -----------------------------------------------------------------------
    def pull(self, src: int, into: torch.Tensor, start: float, kind: float, *values: float) -> Handle:
        """Ask ``src`` (message ``[kind, *values]``) for a tensor and receive it into ``into``;
        modelled as ``src -> self`` starting at ``start`` on this rank's clock."""
        if into.device.type != "cpu":
            raise ValueError("pull into a CPU tensor: the control plane runs over gloo")
        handle = self.channel.expect("pull", into, src, start)
        handle.add_work(self.transport.irecv(into, src, "control", PAYLOAD_TAG), payload=True)
        self.send(src, kind, *values)
        return handle

    # ---- the end ---------------------------------------------------------------------
    def close(self, peers: Sequence[int]) -> None:
        """Tell ``peers`` this process sends nothing more; wait for this responder to end."""
        for peer in peers:
            self.send(peer, STOP)
        if self._thread is not None:
            with self.transport.blocking():  # threads: the peers' STOPs need their turn
                self._thread.join()
        self._drain_sends()
        self.check()
