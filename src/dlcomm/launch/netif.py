"""Which network interface a rank's collectives use between hosts.

gloo (and nccl's bootstrap) pick an interface by resolving this host's name, which on real
clusters often gives the management network, a docker bridge or 127.0.1.1. A rank of a multi-host
job instead uses the interface that holds the address the kernel would send from to rank 0's host
(the rendezvous host): the route the job's own traffic takes. ``launcher.ifname`` forces one.
The choice goes to ``GLOO_SOCKET_IFNAME`` and ``NCCL_SOCKET_IFNAME`` unless those are already set
(a site's own settings win over the guess, ``launcher.ifname`` wins over both).
"""

from __future__ import annotations

import fcntl
import ipaddress
import os
import socket
import struct

from dlcomm.errors import UserError

_SIOCGIFADDR = 0x8915  # linux/sockios.h: an interface's IPv4 address


def interface_addresses() -> dict[str, str]:
    """``{interface name: IPv4 address}`` for this host's interfaces that have one."""
    found = {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            try:
                answer = fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, struct.pack("256s", name[:15].encode()))
            except OSError:  # no IPv4 address on it
                continue
            found[name] = socket.inet_ntoa(answer[20:24])
    return found


def source_address(host: str) -> str:
    """The local address the kernel would send from to ``host`` (connecting a UDP socket sends
    nothing: it only chooses the route)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((socket.gethostbyname(host), 9))
        return probe.getsockname()[0]


def interface_towards(host: str) -> str | None:
    """The interface holding this host's address towards ``host``; None when that is a loopback
    address (every rank on this host) or no interface holds it."""
    local = source_address(host)
    if ipaddress.ip_address(local).is_loopback:
        return None
    return next((name for name, address in interface_addresses().items() if address == local), None)


def choose_interface(forced: str, rendezvous_host: str) -> str | None:
    """Set the collectives' interface for this process (see the module docstring) and return it;
    None: left to the backend (a single host, or the site's environment decides)."""
    if forced:
        known = interface_addresses()
        if forced not in known:
            raise UserError(
                f"launcher.ifname={forced} is invalid on host {socket.gethostname()}: its interfaces with an IPv4 address "
                f"are {', '.join(sorted(known))}; pass one of them, or leave launcher.ifname empty to use the one "
                f"towards rank 0's host"
            )
        chosen = forced
    elif "GLOO_SOCKET_IFNAME" in os.environ:
        return os.environ["GLOO_SOCKET_IFNAME"]
    else:
        towards = interface_towards(rendezvous_host)
        if towards is None:
            return None
        chosen = towards
    os.environ["GLOO_SOCKET_IFNAME"] = chosen
    if forced or "NCCL_SOCKET_IFNAME" not in os.environ:
        os.environ["NCCL_SOCKET_IFNAME"] = chosen
    return chosen
