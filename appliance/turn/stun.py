"""STUN (RFC 8489) and TURN (RFC 8656) message codec.

Pure functions over bytes, no I/O. Every attribute the appliance understands is one row of ``ATTRIBUTES``:
its type code, its name and the functions that turn its value into wire bytes and back. Values are plain
Python objects (addresses are ``(host, port)`` tuples, texts are ``str``, ...); the table at the bottom says
which.

Anything malformed raises :class:`StunError`, never another exception type, so a server can drop or answer
a bad datagram with one ``except`` clause.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

MAGIC_COOKIE = 0x2112A442
_COOKIE_BYTES = MAGIC_COOKIE.to_bytes(4, "big")
HEADER_LENGTH = 20
FINGERPRINT_XOR = 0x5354554E

_FAMILY_IPV4 = 0x01
_FAMILY_IPV6 = 0x02

# Upper bounds (exclusive, in bytes) on text attributes, RFC 8489 §14.3, §14.8, §14.9, §14.10, §14.14.
_USERNAME_LIMIT = 513
_TEXT_LIMIT = 763


class Method(IntEnum):
    BINDING = 0x001
    ALLOCATE = 0x003
    REFRESH = 0x004
    SEND = 0x006
    DATA = 0x007
    CREATE_PERMISSION = 0x008
    CHANNEL_BIND = 0x009


class Class(IntEnum):
    REQUEST = 0x000
    INDICATION = 0x010
    SUCCESS = 0x100
    ERROR = 0x110


class StunError(ValueError):
    """Malformed input (or a value that cannot be encoded); the message says why."""


@dataclass
class Message:
    method: Method
    msg_class: Class
    transaction_id: bytes
    # (name, value) in wire order; an attribute may repeat (several XOR-PEER-ADDRESS in CreatePermission).
    attributes: list[tuple[str, Any]] = field(default_factory=list)
    # Comprehension-required types (0x0000-0x7FFF) the decoder did not know, for a 420 UNKNOWN-ATTRIBUTES.
    unknown_required: list[int] = field(default_factory=list)

    def get(self, name: str, default: Any = None) -> Any:
        """The value of the first attribute called ``name``, or ``default``."""
        for key, value in self.attributes:
            if key == name:
                return value
        return default

    def get_all(self, name: str) -> list[Any]:
        """Every value of the attributes called ``name``, in wire order."""
        return [value for key, value in self.attributes if key == name]

    def add(self, name: str, value: Any = None) -> Message:
        """Append an attribute; returns the message so calls chain."""
        self.attributes.append((name, value))
        return self


# --- message type: method and class bits interleaved (RFC 8489 §5) -------------------------------------------


def _message_type(method: int, msg_class: int) -> int:
    return (method & 0x000F) | ((method & 0x0070) << 1) | ((method & 0x0F80) << 2) | msg_class


def _split_message_type(message_type: int) -> tuple[int, int]:
    method = (message_type & 0x000F) | ((message_type & 0x00E0) >> 1) | ((message_type & 0x3E00) >> 2)
    return method, message_type & 0x0110


def _padded(length: int) -> int:
    return (length + 3) & ~3


# --- attribute value codecs ----------------------------------------------------------------------------------
# pack(value, transaction_id) -> bytes (unpadded); unpack(value_bytes, transaction_id) -> value.
# The transaction id matters only to the XOR- addresses; the others ignore it.

Pack = Callable[[Any, bytes], bytes]
Unpack = Callable[[bytes, bytes], Any]


def _address_codec(xor: bool) -> tuple[Pack, Unpack]:
    def mask(transaction_id: bytes, size: int) -> bytes:
        return (_COOKIE_BYTES + transaction_id)[:size] if xor else bytes(size)

    def pack(value: tuple[str, int], transaction_id: bytes) -> bytes:
        host, port = value[0], value[1]  # an IPv6 socket address (host, port, flowinfo, scope_id) will do too
        address = ipaddress.ip_address(str(host))  # str(): packed bytes are not a host
        raw = address.packed
        family = _FAMILY_IPV4 if address.version == 4 else _FAMILY_IPV6
        if xor:
            port ^= MAGIC_COOKIE >> 16
        masked = bytes(a ^ b for a, b in zip(raw, mask(transaction_id, len(raw)), strict=True))
        return bytes((0, family)) + port.to_bytes(2, "big") + masked

    def unpack(data: bytes, transaction_id: bytes) -> tuple[str, int]:
        if len(data) < 4:
            raise StunError(f"address attribute of {len(data)} bytes")
        family = data[1]
        size = {_FAMILY_IPV4: 4, _FAMILY_IPV6: 16}.get(family)
        if size is None:
            raise StunError(f"unknown address family 0x{family:02x}")
        if len(data) != 4 + size:
            raise StunError(f"address of family 0x{family:02x} in {len(data)} bytes")
        port = int.from_bytes(data[2:4], "big")
        if xor:
            port ^= MAGIC_COOKIE >> 16
        raw = bytes(a ^ b for a, b in zip(data[4:], mask(transaction_id, size), strict=True))
        host = ipaddress.IPv4Address(raw) if size == 4 else ipaddress.IPv6Address(raw)
        return str(host), port

    return pack, unpack


def _uint_codec(width: int, total: int | None = None) -> tuple[Pack, Unpack]:
    """An unsigned integer in the first ``width`` bytes of a ``total``-byte value; the rest is RFFU."""
    total = total or width

    def pack(value: int, _tid: bytes) -> bytes:
        return int(value).to_bytes(width, "big") + bytes(total - width)

    def unpack(data: bytes, _tid: bytes) -> int:
        if len(data) != total:
            raise StunError(f"expected {total} bytes, got {len(data)}")
        return int.from_bytes(data[:width], "big")

    return pack, unpack


def _text_codec(limit: int) -> tuple[Pack, Unpack]:
    def check(raw: bytes) -> bytes:
        if len(raw) >= limit:
            raise StunError(f"text of {len(raw)} bytes (limit {limit - 1})")
        return raw

    def pack(value: str, _tid: bytes) -> bytes:
        return check(_encode_text(value))

    def unpack(data: bytes, _tid: bytes) -> str:
        return _utf8(check(data))

    return pack, unpack


def _bytes_codec(minimum: int = 0, maximum: int = 0xFFFF, multiple: int = 1) -> tuple[Pack, Unpack]:
    def check(raw: bytes) -> bytes:
        if not minimum <= len(raw) <= maximum or len(raw) % multiple:
            raise StunError(f"value of {len(raw)} bytes")
        return raw

    def pack(value: bytes, _tid: bytes) -> bytes:
        return check(bytes(value))

    def unpack(data: bytes, _tid: bytes) -> bytes:
        return check(data)

    return pack, unpack


def _pack_empty(value: None, _tid: bytes) -> bytes:
    if value is not None:
        raise StunError("this attribute carries no value (use None)")
    return b""


def _unpack_empty(data: bytes, _tid: bytes) -> None:
    if data:
        raise StunError(f"expected an empty value, got {len(data)} bytes")
    return None


def _encode_text(value: str) -> bytes:
    if not isinstance(value, str):
        raise StunError(f"expected a str, got {type(value).__name__}")
    return value.encode("utf-8")


def _utf8(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StunError(f"invalid UTF-8: {exc.reason}") from None


def _pack_code(code: int) -> bytes:
    """Class and number of an error code (300..699) as the last two bytes of its 4-byte head."""
    if not 300 <= code <= 699:
        raise StunError(f"error code {code} outside 300..699")
    return bytes((code // 100, code % 100))


def _unpack_code(data: bytes) -> int:
    error_class, number = data[2] & 0x07, data[3]
    if not 3 <= error_class <= 6 or number > 99:
        raise StunError(f"bad error code: class {error_class}, number {number}")
    return error_class * 100 + number


def _pack_reason(reason: str) -> bytes:
    raw = _encode_text(reason)
    if len(raw) >= _TEXT_LIMIT:
        raise StunError(f"reason phrase of {len(raw)} bytes")
    return raw


def _unpack_reason(raw: bytes) -> str:
    if len(raw) >= _TEXT_LIMIT:
        raise StunError(f"reason phrase of {len(raw)} bytes")
    return _utf8(raw)


def _pack_error_code(value: tuple[int, str], _tid: bytes) -> bytes:
    code, reason = value
    return b"\x00\x00" + _pack_code(code) + _pack_reason(reason)


def _unpack_error_code(data: bytes, _tid: bytes) -> tuple[int, str]:
    if len(data) < 4:
        raise StunError(f"ERROR-CODE of {len(data)} bytes")
    return _unpack_code(data), _unpack_reason(data[4:])


def _pack_address_error_code(value: tuple[int, int, str], _tid: bytes) -> bytes:
    family, code, reason = value
    return family.to_bytes(1, "big") + b"\x00" + _pack_code(code) + _pack_reason(reason)


def _unpack_address_error_code(data: bytes, _tid: bytes) -> tuple[int, int, str]:
    if len(data) < 4:
        raise StunError(f"ADDRESS-ERROR-CODE of {len(data)} bytes")
    return data[0], _unpack_code(data), _unpack_reason(data[4:])


def _pack_unknown_attributes(value: list[int], _tid: bytes) -> bytes:
    return b"".join(int(code).to_bytes(2, "big") for code in value)


def _unpack_unknown_attributes(data: bytes, _tid: bytes) -> list[int]:
    if len(data) % 2:
        raise StunError(f"UNKNOWN-ATTRIBUTES of {len(data)} bytes")
    return [int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2)]


def _pack_even_port(value: bool, _tid: bytes) -> bytes:
    return b"\x80" if value else b"\x00"


def _unpack_even_port(data: bytes, _tid: bytes) -> bool:
    if len(data) != 1:
        raise StunError(f"EVEN-PORT of {len(data)} bytes")
    return bool(data[0] & 0x80)


def _pack_icmp(value: tuple[int, int, int], _tid: bytes) -> bytes:
    # RFC 8656 §18.13: 2 reserved bytes, the ICMP type and code (one byte each), 4 bytes of error data.
    icmp_type, icmp_code, error_data = value
    return b"\x00\x00" + bytes((icmp_type, icmp_code)) + int(error_data).to_bytes(4, "big")


def _unpack_icmp(data: bytes, _tid: bytes) -> tuple[int, int, int]:
    if len(data) != 8:
        raise StunError(f"ICMP of {len(data)} bytes")
    return data[2], data[3], int.from_bytes(data[4:8], "big")


_plain_address = _address_codec(xor=False)
_xor_address = _address_codec(xor=True)
_family = _uint_codec(1, 4)  # REQUESTED-/ADDITIONAL-ADDRESS-FAMILY: family byte + 3 RFFU
_raw = _bytes_codec()

# (type, name, pack, unpack): the attributes this codec understands.
ATTRIBUTES: list[tuple[int, str, Pack, Unpack]] = [
    (0x0001, "MAPPED-ADDRESS", *_plain_address),
    (0x0006, "USERNAME", *_text_codec(_USERNAME_LIMIT)),
    (0x0008, "MESSAGE-INTEGRITY", *_bytes_codec(20, 20)),
    (0x0009, "ERROR-CODE", _pack_error_code, _unpack_error_code),
    (0x000A, "UNKNOWN-ATTRIBUTES", _pack_unknown_attributes, _unpack_unknown_attributes),
    (0x000C, "CHANNEL-NUMBER", *_uint_codec(2, 4)),
    (0x000D, "LIFETIME", *_uint_codec(4)),
    (0x0012, "XOR-PEER-ADDRESS", *_xor_address),
    (0x0013, "DATA", *_raw),
    (0x0014, "REALM", *_text_codec(_TEXT_LIMIT)),
    (0x0015, "NONCE", *_text_codec(_TEXT_LIMIT)),
    (0x0016, "XOR-RELAYED-ADDRESS", *_xor_address),
    (0x0017, "REQUESTED-ADDRESS-FAMILY", *_family),
    (0x0018, "EVEN-PORT", _pack_even_port, _unpack_even_port),
    (0x0019, "REQUESTED-TRANSPORT", *_uint_codec(1, 4)),
    (0x001A, "DONT-FRAGMENT", _pack_empty, _unpack_empty),
    (0x001C, "MESSAGE-INTEGRITY-SHA256", *_bytes_codec(16, 32, 4)),
    (0x001D, "PASSWORD-ALGORITHM", *_raw),
    (0x001E, "USERHASH", *_raw),
    (0x0020, "XOR-MAPPED-ADDRESS", *_xor_address),
    (0x0022, "RESERVATION-TOKEN", *_bytes_codec(8, 8)),
    (0x0024, "PRIORITY", *_uint_codec(4)),
    (0x0025, "USE-CANDIDATE", _pack_empty, _unpack_empty),
    (0x8000, "ADDITIONAL-ADDRESS-FAMILY", *_family),
    (0x8001, "ADDRESS-ERROR-CODE", _pack_address_error_code, _unpack_address_error_code),
    (0x8002, "PASSWORD-ALGORITHMS", *_raw),
    (0x8004, "ICMP", _pack_icmp, _unpack_icmp),
    (0x8022, "SOFTWARE", *_text_codec(_TEXT_LIMIT)),
    (0x8023, "ALTERNATE-SERVER", *_plain_address),
    (0x8028, "FINGERPRINT", *_uint_codec(4)),
    (0x8029, "ICE-CONTROLLED", *_uint_codec(8)),
    (0x802A, "ICE-CONTROLLING", *_uint_codec(8)),
]

ATTRIBUTES_BY_TYPE: dict[int, tuple[int, str, Pack, Unpack]] = {row[0]: row for row in ATTRIBUTES}
ATTRIBUTES_BY_NAME: dict[str, tuple[int, str, Pack, Unpack]] = {row[1]: row for row in ATTRIBUTES}

_MESSAGE_INTEGRITY = 0x0008
_MESSAGE_INTEGRITY_SHA256 = 0x001C
_FINGERPRINT = 0x8028
_INTEGRITY = (_MESSAGE_INTEGRITY, _MESSAGE_INTEGRITY_SHA256)
# Attributes encode() computes itself; copies already in Message.attributes are dropped.
_COMPUTED = {"MESSAGE-INTEGRITY", "FINGERPRINT"}


# --- framing -------------------------------------------------------------------------------------------------


def _header(data: bytes) -> tuple[int, int]:
    """Check the fixed header of a whole datagram; returns (message type, length)."""
    if len(data) < HEADER_LENGTH:
        raise StunError(f"{len(data)} bytes is shorter than a STUN header")
    message_type = int.from_bytes(data[0:2], "big")
    length = int.from_bytes(data[2:4], "big")
    if message_type & 0xC000:
        raise StunError("top two bits of the message type are not zero")
    if data[4:8] != _COOKIE_BYTES:
        raise StunError("wrong magic cookie")
    if length % 4:
        raise StunError(f"message length {length} is not a multiple of 4")
    if HEADER_LENGTH + length != len(data):
        raise StunError(f"message length {length} does not match the {len(data) - HEADER_LENGTH} bytes received")
    return message_type, length


def _attributes(data: bytes) -> list[tuple[int, int, int]]:
    """(type, offset of the attribute header, value length) of every attribute of a checked datagram."""
    found = []
    offset = HEADER_LENGTH
    while offset < len(data):
        if offset + 4 > len(data):
            raise StunError("truncated attribute header")
        attr_type = int.from_bytes(data[offset : offset + 2], "big")
        length = int.from_bytes(data[offset + 2 : offset + 4], "big")
        if offset + 4 + _padded(length) > len(data):
            raise StunError(f"attribute 0x{attr_type:04x} runs past the end of the message")
        found.append((attr_type, offset, length))
        offset += 4 + _padded(length)
    return found


# --- messages ------------------------------------------------------------------------------------------------


def decode(data: bytes) -> Message:
    """Parse one STUN message (a whole datagram, or one frame cut with :func:`stream_frame_length`)."""
    data = bytes(data)
    message_type, _ = _header(data)
    method_bits, class_bits = _split_message_type(message_type)
    try:
        method = Method(method_bits)
    except ValueError:
        raise StunError(f"unknown method 0x{method_bits:03x}") from None
    transaction_id = data[8:20]
    message = Message(method=method, msg_class=Class(class_bits), transaction_id=transaction_id)
    integrity_seen: set[int] = set()
    for attr_type, offset, length in _attributes(data):
        if (
            integrity_seen
            and attr_type != _FINGERPRINT
            and (attr_type not in _INTEGRITY or attr_type in integrity_seen)
        ):
            continue  # RFC 8489 §14.5, §14.6: ignored after MESSAGE-INTEGRITY(-SHA256)
        row = ATTRIBUTES_BY_TYPE.get(attr_type)
        if row is None:
            if attr_type < 0x8000 and attr_type not in message.unknown_required:
                message.unknown_required.append(attr_type)
            continue  # unknown comprehension-optional attributes are skipped
        try:
            value = row[3](data[offset + 4 : offset + 4 + length], transaction_id)
        except StunError as exc:
            raise StunError(f"{row[1]}: {exc}") from None
        message.attributes.append((row[1], value))
        if attr_type == _FINGERPRINT:
            break  # FINGERPRINT is last; anything after it is ignored (RFC 8489 §14.7)
        if attr_type in _INTEGRITY:
            integrity_seen.add(attr_type)
    return message


def _attribute(attr_type: int, value: bytes) -> bytes:
    return (
        attr_type.to_bytes(2, "big") + len(value).to_bytes(2, "big") + value + bytes(_padded(len(value)) - len(value))
    )


def _with_length(header: bytes, length: int) -> bytes:
    if length > 0xFFFF:
        raise StunError(f"message of {length} bytes after the header is too long")
    return header[:2] + length.to_bytes(2, "big") + header[4:]


def encode(message: Message, integrity_key: bytes | None = None, fingerprint: bool = True) -> bytes:
    """The wire form of ``message``.

    Attributes go out in list order, each padded with zeros to 4 bytes. With ``integrity_key`` a
    MESSAGE-INTEGRITY (HMAC-SHA1) follows them, then a FINGERPRINT if ``fingerprint``. Any MESSAGE-INTEGRITY or
    FINGERPRINT already in ``message.attributes`` (say, from a decoded message) is dropped, not copied.
    """
    transaction_id = bytes(message.transaction_id)
    if len(transaction_id) != 12:
        raise StunError(f"transaction id of {len(transaction_id)} bytes")
    try:
        method, msg_class = Method(message.method), Class(message.msg_class)
    except ValueError as exc:
        raise StunError(str(exc)) from None
    body = bytearray()
    for name, value in message.attributes:
        if name in _COMPUTED:
            continue
        row = ATTRIBUTES_BY_NAME.get(name)
        if row is None:
            raise StunError(f"unknown attribute {name!r}")
        try:
            packed = row[2](value, transaction_id)
        except StunError as exc:
            raise StunError(f"{name}: {exc}") from None
        except (TypeError, ValueError, OverflowError) as exc:
            raise StunError(f"{name}: cannot encode a {type(value).__name__}: {exc}") from None
        if len(packed) > 0xFFFF:
            raise StunError(f"{name}: value of {len(packed)} bytes")
        body += _attribute(row[0], packed)
    header = _message_type(method, msg_class).to_bytes(2, "big") + b"\x00\x00" + _COOKIE_BYTES + transaction_id
    if integrity_key is not None:
        header = _with_length(header, len(body) + 24)
        body += _attribute(_MESSAGE_INTEGRITY, hmac.new(integrity_key, header + body, hashlib.sha1).digest())
    if fingerprint:
        header = _with_length(header, len(body) + 8)
        body += _attribute(_FINGERPRINT, _crc(header + body).to_bytes(4, "big"))
    return _with_length(header, len(body)) + bytes(body)


def _crc(data: bytes) -> int:
    return zlib.crc32(data) ^ FINGERPRINT_XOR


def _checked_attributes(data: bytes) -> list[tuple[int, int, int]] | None:
    try:
        _header(data)
        return _attributes(data)
    except StunError:
        return None


def check_integrity(data: bytes, key: bytes) -> bool:
    """Whether the MESSAGE-INTEGRITY of a received message is right for ``key``.

    The HMAC covers the message up to the attribute, with the header's length field set as if the message ended
    right after MESSAGE-INTEGRITY (RFC 8489 §14.5), so a FINGERPRINT after it does not matter. False when the
    message is malformed or carries no MESSAGE-INTEGRITY.
    """
    data = bytes(data)
    found = _checked_attributes(data)
    if found is None:
        return False
    for attr_type, offset, length in found:
        if attr_type == _FINGERPRINT:
            return False
        if attr_type == _MESSAGE_INTEGRITY:
            if length != 20:
                return False
            header = _with_length(data[:HEADER_LENGTH], offset + 24 - HEADER_LENGTH)
            expected = hmac.new(key, header + data[HEADER_LENGTH:offset], hashlib.sha1).digest()
            return hmac.compare_digest(expected, data[offset + 4 : offset + 24])
    return False


def _fingerprint_offset(data: bytes) -> int | None:
    found = _checked_attributes(data)
    if not found:
        return None
    attr_type, offset, length = found[-1]
    return offset if attr_type == _FINGERPRINT and length == 4 else None


def has_fingerprint(data: bytes) -> bool:
    """Whether a well-formed message ends with a FINGERPRINT attribute (right or wrong)."""
    return _fingerprint_offset(bytes(data)) is not None


def check_fingerprint(data: bytes) -> bool:
    """True only when the message ends with a FINGERPRINT and its CRC-32 is right (RFC 8489 §14.7)."""
    data = bytes(data)
    offset = _fingerprint_offset(data)
    if offset is None:
        return False
    return _crc(data[:offset]) == int.from_bytes(data[offset + 4 : offset + 8], "big")


def long_term_key(username: str, realm: str, password: str) -> bytes:
    """MD5(username ":" realm ":" password), the long-term credential key of RFC 8489 §9.2.2.

    The strings are taken as given (UTF-8); callers that need SASLprep/OpaqueString apply it first.
    """
    text = f"{username}:{realm}:{password}".encode()
    return hashlib.md5(text, usedforsecurity=False).digest()


def request_header(data: bytes) -> tuple[Method, bytes] | None:
    """(method, transaction id) of a request whose body failed to parse, if its header is sound:
    such a request still deserves an error response."""
    if len(data) < HEADER_LENGTH or data[0] & 0xC0 or bytes(data[4:8]) != _COOKIE_BYTES:
        return None
    method_bits, class_bits = _split_message_type(int.from_bytes(data[0:2], "big"))
    if class_bits != Class.REQUEST:
        return None
    try:
        return Method(method_bits), bytes(data[8:20])
    except ValueError:
        return None


def is_stun(data: bytes) -> bool:
    """Whether ``data`` looks like a STUN message: top two bits zero, at least a header, the magic cookie."""
    return len(data) >= HEADER_LENGTH and data[0] & 0xC0 == 0 and bytes(data[4:8]) == _COOKIE_BYTES


# --- ChannelData (RFC 8656 §12.4) and stream framing ---------------------------------------------------------

# RFC 8656 narrowed channel numbers to 0x4000-0x4FFF; RFC 5766 clients (coturn's tools among them)
# still use 0x4000-0x7FFF, which cannot be confused with STUN (first two bits 0b01), so both are accepted.
FIRST_CHANNEL, LAST_CHANNEL = 0x4000, 0x7FFF


def is_channel_data(data: bytes) -> bool:
    """Whether ``data`` starts like a ChannelData message (channel 0x4000-0x7FFF)."""
    return len(data) >= 4 and 0x40 <= data[0] <= 0x7F


def decode_channel_data(data: bytes) -> tuple[int, bytes]:
    """(channel number, application data) of a ChannelData message; padding after the data is ignored."""
    if len(data) < 4:
        raise StunError(f"ChannelData of {len(data)} bytes is shorter than its header")
    channel = int.from_bytes(data[0:2], "big")
    if not FIRST_CHANNEL <= channel <= LAST_CHANNEL:
        raise StunError(f"channel number 0x{channel:04x} outside 0x4000-0x7FFF")
    length = int.from_bytes(data[2:4], "big")
    if 4 + length > len(data):
        raise StunError(f"ChannelData length {length} exceeds the {len(data) - 4} bytes received")
    return channel, bytes(data[4 : 4 + length])


def encode_channel_data(channel: int, payload: bytes, pad: bool = False) -> bytes:
    """A ChannelData message; ``pad`` rounds it up to 4 bytes, as over TCP (RFC 8656 §12.5)."""
    if not FIRST_CHANNEL <= channel <= LAST_CHANNEL:
        raise StunError(f"channel number 0x{channel:04x} outside 0x4000-0x7FFF")
    if len(payload) > 0xFFFF:
        raise StunError(f"ChannelData payload of {len(payload)} bytes")
    frame = channel.to_bytes(2, "big") + len(payload).to_bytes(2, "big") + bytes(payload)
    if pad:
        frame += bytes(_padded(len(payload)) - len(payload))
    return frame


def stream_frame_length(buffer: bytes) -> int | None:
    """Length of the first frame in a TCP/TLS byte stream, or None until 4 bytes are buffered.

    A STUN message takes 20 + its length field; ChannelData takes 4 + its length rounded up to 4 (over a stream
    the padding is always present, RFC 8656 §12.5). Raises StunError when the stream is neither.
    """
    if len(buffer) < 4:
        return None
    first = buffer[0]
    length = int.from_bytes(bytes(buffer[2:4]), "big")
    if first & 0xC0 == 0:
        if length % 4:
            raise StunError(f"STUN message length {length} is not a multiple of 4")
        return HEADER_LENGTH + length
    if 0x40 <= first <= 0x7F:
        return 4 + _padded(length)
    raise StunError(f"first byte 0x{first:02x} starts neither a STUN message nor ChannelData")
