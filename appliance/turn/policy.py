"""Which peers the relay may talk to.

An allocation may reach only the browsers of the fleet: the addresses connected workers
announced as their ICE candidates (announced.py). Anything else would make the relay a
way into the organisation's network for whoever holds TURN credentials, which every
worker browser does. The rules, first match wins:

1. the deny list refuses;
2. the allow list permits (so an admin can widen the default per CIDR, and tests and labs
   can relay to 127.0.0.1 on purpose);
3. loopback, unspecified, link-local, multicast, reserved and the appliance's own addresses
   are refused, even when a worker announced them (they would reach services on this host);
4. an address a connected worker announced is permitted;
5. everything else is refused.

The live relay addresses of this server are handled by the server itself (server.py).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Container, Iterable

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# Why a peer is refused: the label of peermr_turn_permissions_refused_total.
DENIED = "denied"
RESERVED = "reserved"
UNANNOUNCED = "unannounced"


def address_of(host: str) -> Address | None:
    """``host`` as an address (an IPv4-mapped IPv6 address as the IPv4 one), or None when it is not one."""
    try:
        address = ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        return address.ipv4_mapped
    return address


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
    def __init__(
        self,
        allowed: Iterable[Network] = (),
        denied: Iterable[Network] = (),
        own: Iterable[Address] = (),
        announced: Container[Address] = frozenset(),
    ):
        self.allowed = list(allowed)
        self.denied = list(denied)
        self.own = set(own)
        self.announced = announced

    def refusal(self, host: str) -> str | None:
        """None when the relay may reach ``host``; else why not (DENIED, RESERVED or UNANNOUNCED)."""
        address = address_of(host)
        if address is None:
            return RESERVED
        if any(address in network for network in self.denied):
            return DENIED
        if any(address in network for network in self.allowed):
            return None
        if (
            address.is_loopback
            or address.is_unspecified
            or address.is_link_local
            or address.is_multicast
            or address in self.own
            or (isinstance(address, ipaddress.IPv4Address) and address.is_reserved)
        ):
            return RESERVED
        return None if address in self.announced else UNANNOUNCED
