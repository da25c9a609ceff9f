"""What edges and the active scheduler say to each other over Redis (docs/protocol.md, "Edges").

An edge holds browsers' WebSockets and passes their frames, untouched, to the scheduler, which runs
each connection's session (fleet/connection.py) as if the socket were its own. Everything is
MessagePack, on these channels of the installation (Channels); a message on ``up``, ``down`` and
``turn`` is an array of envelopes (what queued for the channel together: redis_link.Outbox):

- ``up`` (edges -> scheduler): a socket opened (with who authenticated it), a frame, a socket closed;
- ``down(edge)`` (scheduler -> one edge): a frame for a socket, or close it;
- ``leader`` (scheduler -> edges): a scheduler became the leader. Edges close the sockets opened
  under an earlier leader, so every page says hello to the new one, which adopts the runs as after
  a restart; a frame stamped with another leader's epoch is dropped (a deposed leader is not heard);
- ``turn`` (scheduler -> edges): the addresses workers announced, the peers each edge's TURN
  relay may reach (turn/announced.py), as the one-process appliance feeds its own relay.
"""

from __future__ import annotations

import msgspec

from appliance.accounts.sessions import Principal


class Channels:
    """The Redis names of one installation (installation.py): ``peermr:<id>:...``."""

    def __init__(self, installation: str):
        self.prefix = f"peermr:{installation}:"
        self.up = self.prefix + "up"
        self.leader = self.prefix + "leader"
        self.turn = self.prefix + "turn"
        # The newest leader's announcement, so an edge that starts later knows whom it serves.
        self.leader_key = self.prefix + "leader-now"

    def down(self, edge: str) -> str:
        return f"{self.prefix}down:{edge}"

    def edge_key(self, edge: str) -> str:
        """Present while the edge lives: it renews it every EDGE_RENEW_SECONDS, for EDGE_TTL_SECONDS."""
        return f"{self.prefix}edge:{edge}"


# Wide enough for an edge busy with thousands of sockets (a page that comes back through another
# edge is taken back at once anyway: fleet/connection.Session._replace).
EDGE_RENEW_SECONDS = 2.0
EDGE_TTL_SECONDS = 15.0
LEADER_RENEW_SECONDS = 2.0
LEADER_TTL_SECONDS = 6.0


class Opened(msgspec.Struct, tag="open", array_like=True, frozen=True):
    edge: str
    conn: str
    principal: Principal
    client: str  # the browser's address, as the edge saw it
    ice_servers: list[dict]  # the edge's own TURN listener, with credentials from the shared secret


class Frame(msgspec.Struct, tag="frame", array_like=True, frozen=True):
    conn: str
    text: str | None = None
    data: bytes | None = None  # a binary WebSocket frame
    epoch: str = ""  # down only: the leader that sent it


class Closed(msgspec.Struct, tag="closed", array_like=True, frozen=True):
    """Up: the browser's socket is gone. Down: close it, with this code and reason."""

    conn: str
    code: int = 1000
    reason: str = ""
    epoch: str = ""


class Leader(msgspec.Struct, tag="leader", array_like=True, frozen=True):
    epoch: str
    url: str  # where the leader serves the dashboard and API (edges pass requests to it)


class TurnPeers(msgspec.Struct, array_like=True, frozen=True):
    kind: str  # "announce" (its addresses), "stay" (it connected again), "leave" (forget after a grace)
    worker_id: str
    addresses: tuple[str, ...] = ()


Up = Opened | Frame | Closed
Down = Frame | Closed

encode = msgspec.msgpack.Encoder().encode
# A Redis message on up, down or turn: its envelopes in order.
decode_up = msgspec.msgpack.Decoder(list[Up]).decode
decode_down = msgspec.msgpack.Decoder(list[Down]).decode
decode_turn = msgspec.msgpack.Decoder(list[TurnPeers]).decode
decode_leader = msgspec.msgpack.Decoder(Leader).decode
