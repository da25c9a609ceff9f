"""The IP addresses of the ICE candidates a worker sends in its signalling.

A trickled candidate comes as ``{"candidate": {"candidate": "candidate:1 1 udp 2122260223
192.0.2.5 54400 typ host", ...}}`` (RTCIceCandidate.toJSON()), a description as ``{"sdp": {"type",
"sdp"}}`` whose ``a=candidate:`` lines carry its candidates, the answer to the appliance's probe as
SDP text. The TURN relay serves only these addresses (turn/announced.py). Candidates named by
an mDNS host name (``<uuid>.local``) have no address to note.
"""

from __future__ import annotations

import ipaddress

CANDIDATE = "candidate:"


def candidate_address(attribute: str) -> str | None:
    """The connection address of a candidate attribute (RFC 8839 §5.1), when it is an IP address."""
    fields = attribute.removeprefix("a=").split()
    if len(fields) < 6 or not fields[0].startswith(CANDIDATE):
        return None
    try:
        return str(ipaddress.ip_address(fields[4]))
    except ValueError:
        return None


def sdp_addresses(sdp: str) -> list[str]:
    """In the order of the lines, each once."""
    lines = (line for line in sdp.splitlines() if line.startswith("a=" + CANDIDATE))
    return list(dict.fromkeys(address for line in lines if (address := candidate_address(line))))


def signal_addresses(data: dict) -> list[str]:
    """The addresses in a `signal` message's data (a candidate or a description; anything else has none)."""
    candidate, sdp = data.get("candidate"), data.get("sdp")
    if isinstance(candidate, dict):
        candidate = candidate.get("candidate")
    if isinstance(candidate, str):
        return [address] if (address := candidate_address(candidate)) else []
    if isinstance(sdp, dict):
        sdp = sdp.get("sdp")
    return sdp_addresses(sdp) if isinstance(sdp, str) else []
