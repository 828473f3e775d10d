"""The job's rendezvous store: one torch ``TCPStore`` per job, hosted by one process (its master),
joined by every rank. Every launcher and ``dlcomm calibrate`` make theirs here.

dlcomm's master never waits for the others to join (torch's ``wait_for_workers=False``): it goes on
with its own work and the ranks meet at their first ``get``, bounded by the store's timeout.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch.distributed as dist


def join_store(
    host: str,
    port: int,
    world: int,
    *,
    master: bool = False,
    timeout: timedelta | None = None,
    count_in: bool = True,
) -> dist.TCPStore:
    """The store at ``host:port`` of a job of ``world`` processes: a client of it, or with ``master``
    the store itself, hosted by this process (on ``127.0.0.1``: listening on the loopback address
    only, :func:`loopback_store`). ``timeout``: how long an operation on it waits (None: torch's
    default, 300 s). ``count_in``: a client adds itself to the store's count of joined processes
    (torch's ``wait_for_workers`` for a client; the count is only read by a master that waits,
    which dlcomm's never does)."""
    if master and host == "127.0.0.1":
        return loopback_store(world, port, timeout)
    import torch.distributed as dist

    extra: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
    return dist.TCPStore(host, port, world, is_master=master, wait_for_workers=count_in and not master, **extra)


def loopback_store(world: int, port: int = 0, timeout: timedelta | None = None) -> dist.TCPStore:
    """The master rendezvous ``TCPStore`` of a job whose ranks all run on this machine, listening
    on 127.0.0.1 only, at ``port`` (0: one the kernel picks, ``.port``). torch's master store binds every
    interface whatever its ``host_name``, and it has no authentication; handed a socket bound to
    the loopback address (``master_listen_fd``, which the store then owns) it listens there."""
    import socket

    import torch.distributed as dist

    listener = socket.create_server(("127.0.0.1", port), backlog=max(128, world))
    port = listener.getsockname()[1]
    extra: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
    return dist.TCPStore(
        "127.0.0.1", port, world, is_master=True, wait_for_workers=False, master_listen_fd=listener.detach(), **extra
    )
