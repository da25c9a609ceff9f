"""The envelopes edges and the scheduler exchange over Redis, as docs/protocol.md ("Edges") lays them out:
MessagePack arrays, the union ones led by their tag, an array of them a Redis message (but a leader's
announcement); how the outbox groups them into messages; and the names of one installation's channels."""

from __future__ import annotations

import msgspec
import pytest

from appliance.accounts.sessions import Principal
from appliance.cluster import envelopes as e
from appliance.cluster.redis_link import messages

PRINCIPAL = Principal(7, "ada@example.com", "worker", False, "worker", "f" * 64)
PONG = '{"type":"pong","id":1}'
ICE = [{"urls": ["turn:edge-1.example:3478"], "username": "1:7", "credential": "x"}]


@pytest.mark.parametrize(
    ("envelope", "layout", "decode"),
    [
        (
            e.Opened("e1", "c1", PRINCIPAL, "203.0.113.9", ICE),
            ["open", "e1", "c1", msgspec.to_builtins(PRINCIPAL), "203.0.113.9", ICE],
            e.decode_up,
        ),
        (e.Frame("c1", text=PONG), ["frame", "c1", PONG, None, ""], e.decode_up),
        (e.Frame("c1", data=b"\x01\x02", epoch="ep"), ["frame", "c1", None, b"\x01\x02", "ep"], e.decode_down),
        (e.Closed("c1", 4003, "signed out", "ep"), ["closed", "c1", 4003, "signed out", "ep"], e.decode_down),
        (e.Leader("ep", "http://sched-1:8000"), ["leader", "ep", "http://sched-1:8000"], e.decode_leader),
        (e.TurnPeers("announce", "w1", ("192.0.2.1",)), ["announce", "w1", ["192.0.2.1"]], e.decode_turn),
    ],
)
def test_each_envelope_is_the_array_the_protocol_documents_and_decodes_back(envelope, layout, decode):
    assert msgspec.msgpack.decode(e.encode(envelope)) == layout
    if decode is e.decode_leader:
        assert decode(e.encode(envelope)) == envelope
    else:
        assert decode(e.encode([envelope, envelope])) == [envelope, envelope]


def test_an_envelope_of_another_kind_or_version_does_not_decode():
    with pytest.raises(msgspec.ValidationError):
        e.decode_up(msgspec.msgpack.encode([["hello", "c1"]]))
    with pytest.raises(msgspec.ValidationError):
        e.decode_down(e.encode([e.Opened("e1", "c1", PRINCIPAL, "203.0.113.9", ICE)]))  # up only
    with pytest.raises(msgspec.ValidationError):
        e.decode_up(e.encode(e.Frame("c1", text=PONG)))  # not in an array


def test_the_outbox_puts_each_channels_envelopes_in_one_message_but_none_across_one_put_alone():
    batch = [("down:1", "a1", False), ("down:2", "b1", False), ("down:1", "a2", False)]
    batch += [("turn", "t1", True), ("down:1", "a3", False), ("turn", "t2", True), ("turn", "t3", True)]
    assert messages(batch) == [
        ("down:1", ["a1", "a2"]),
        ("down:2", ["b1"]),
        ("turn", ["t1"]),
        ("down:1", ["a3"]),
        ("turn", ["t2"]),
        ("turn", ["t3"]),
    ]


def names(channels: e.Channels) -> set[str]:
    c = channels
    return {c.up, c.leader, c.turn, c.leader_key, c.down("e1"), c.edge_key("e1")}


def test_two_installations_share_no_channel_or_key():
    one, two = e.Channels("a" * 32), e.Channels("b" * 32)
    assert len(names(one)) == 6 and not names(one) & names(two)
    assert one.up == f"peermr:{'a' * 32}:up" and one.down("e1") == f"peermr:{'a' * 32}:down:e1"
