"""Which peers the relay may talk to.

By default an allocation may not reach loopback, unspecified, link-local,
multicast or the appliance's own addresses: an open relay inside a company
network would otherwise reach services bound to the appliance host. The deny
list adds networks; the allow list wins over both (so tests and labs can relay
to 127.0.0.1 on purpose).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def own_addresses() -> set[Address]:
    """The host's addresses as far as the resolver knows them (plus the route-chosen ones)."""
    found: set[Address] = set()
    names = {socket.gethostname(), socket.getfqdn()}
    for name in names:
        try:
            for info in socket.getaddrinfo(name, None):
                found.add(ipaddress.ip_address(info[4][0].split("%")[0]))
        except OSError:
            continue
    for family, probe in ((socket.AF_INET, "192.0.2.1"), (socket.AF_INET6, "2001:db8::1")):
        # connect() on UDP sends nothing; it only asks the kernel which source address it would use.
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as s:
                s.connect((probe, 9))
                found.add(ipaddress.ip_address(s.getsockname()[0]))
        except OSError:
            continue
    return found


class PeerPolicy:
    def __init__(self, allowed: Iterable[Network] = (), denied: Iterable[Network] = (), own: Iterable[Address] = ()):
        self.allowed = list(allowed)
        self.denied = list(denied)
        self.own = set(own)

    def permits(self, host: str) -> bool:
        try:
            address = ipaddress.ip_address(host.split("%")[0])
        except ValueError:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
            address = address.ipv4_mapped
        if any(address in network for network in self.allowed):
            return True
        if any(address in network for network in self.denied):
            return False
        refused_by_default = (
            address.is_loopback
            or address.is_unspecified
            or address.is_link_local
            or address.is_multicast
            or address in self.own
            or (isinstance(address, ipaddress.IPv4Address) and address.is_reserved)
        )
        return not refused_by_default
