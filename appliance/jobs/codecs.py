"""Record codecs of job data, the Python mirror of static/worker/codecs.js.

A blob is a sequence of ``(key, value)`` records in one of three content types:

- ``application/json``: UTF-8 JSON lines, each ``JSON.stringify([key, value]) + "\\n"``;
- ``text/csv``: RFC 4180 rows ``key,value`` + CRLF; a string is always quoted (``"`` doubled), a
  number, boolean or null is bare, anything else is its JSON text, quoted (it decodes as a string);
  a bare field decodes as a JSON number/true/false/null, else as a string;
- ``application/bson``: concatenated BSON documents ``{k: key, v: value}`` (bsonspec.org 1.1):
  double, string, embedded document, array, binary (decoded as ``bytes``), bool, null, int32 and
  int64 (decoded as ``int``);
- ``application/x-peermr-shuffle``: the shuffle format browsers write between stages (its layout
  is described in codecs.js), gzip-compressed or not; decoded only, to records as JSON lines of
  the same data would give them (a group's values each as a record of its key).

Values are JavaScript values as Python sees them: ``None``, ``bool``, ``int``/``float``, ``str``,
``list`` (a tuple encodes as a list), ``dict`` with ``str`` keys, and ``bytes`` (a ``Uint8Array``).

Encoding follows the browser byte for byte, so numbers are JavaScript numbers (IEEE doubles):

- an ``int`` within ±2**53 is written as its digits; a larger one is rounded to the nearest double
  first, as a browser holds it (BSON: int32 when it fits, else a double);
- a ``float`` is written as JavaScript's ``Number.prototype.toString`` does: the shortest digits
  that read back to the same double, ``1.0`` → ``1``, ``-0.0`` → ``0``, ``1e21`` → ``1e+21``,
  ``1.5e-7`` → ``1.5e-7``, ``0.000001`` → ``0.000001``; NaN and ±Infinity are ``null`` (as JSON);
- an integral float within int32 (other than -0.0) is a BSON int32, as the browser cannot tell
  ``1.0`` from ``1``;
- ``bytes`` in JSON or CSV (or a key string) are ``{"0":b0,"1":b1,...}``, what ``JSON.stringify``
  makes of a ``Uint8Array``;
- dict keys that are array indices ("0", "17") come first in numeric order, as in a JavaScript
  object; a lone surrogate in a string is ``\\udXXX`` in JSON and U+FFFD in UTF-8.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import struct
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

__all__ = ["BSON", "CONTENT_TYPES", "CSV", "JSON", "SHUFFLE", "decode", "encode", "key_string", "partition_of"]

JSON = "application/json"
CSV = "text/csv"
BSON = "application/bson"
CONTENT_TYPES = (JSON, CSV, BSON)
SHUFFLE = "application/x-peermr-shuffle"  # between stages only, never declared by a job

_SAFE_INTEGER = 2**53
_SURROGATE = re.compile("[\ud800-\udfff]")
_ARRAY_INDEX = re.compile(r"0|[1-9][0-9]*")


# --- JavaScript's JSON.stringify ----------------------------------------------------------------------


def _js_number(x: int | float) -> str:
    """Number.prototype.toString (ECMA-262 Number::toString), via the shortest round-trip digits."""
    if isinstance(x, int) and -_SAFE_INTEGER <= x <= _SAFE_INTEGER:
        return str(x)
    try:
        x = float(x)
    except OverflowError:  # an int past the largest double: Infinity in a browser
        return "null"
    if not math.isfinite(x):
        return "null"
    if x == 0:
        return "0"
    sign = "-" if x < 0 else ""
    # repr() gives the shortest digits that read back to x, like ECMAScript's algorithm.
    _, digit_tuple, exponent = Decimal(repr(abs(x))).normalize().as_tuple()
    digits = "".join(map(str, digit_tuple))
    k = len(digits)
    n = exponent + k  # x = 0.digits × 10**n
    if k <= n <= 21:
        text = digits + "0" * (n - k)
    elif 0 < n <= 21:
        text = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        text = "0." + "0" * -n + digits
    else:
        mantissa = digits[0] + ("." + digits[1:] if k > 1 else "")
        text = f"{mantissa}e{'+' if n - 1 >= 0 else '-'}{abs(n - 1)}"
    return sign + text


def _js_string(s: str) -> str:
    text = json.dumps(s, ensure_ascii=False)
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text) if _SURROGATE.search(text) else text


def _is_array_index(key: str) -> bool:
    return bool(_ARRAY_INDEX.fullmatch(key)) and int(key) < 2**32 - 1


def _object_items(value: dict) -> list[tuple[str, Any]]:
    """A dict's items in the order a JavaScript object enumerates them: array indices first, ascending."""
    items = []
    for key, item in value.items():
        if isinstance(key, bool) or not isinstance(key, str | int):
            raise TypeError(f"object keys must be strings, not {type(key).__name__}")
        items.append((key if isinstance(key, str) else str(key), item))
    indices = sorted((item for item in items if _is_array_index(item[0])), key=lambda item: int(item[0]))
    return indices + [item for item in items if not _is_array_index(item[0])]


def _js_json(value: Any) -> str:
    """JSON.stringify(value) of the JavaScript value this Python value stands for."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int | float):
        return _js_number(value)
    if isinstance(value, str):
        return _js_string(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(_js_json(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(_js_string(k) + ":" + _js_json(v) for k, v in _object_items(value)) + "}"
    if isinstance(value, bytes | bytearray | memoryview):
        return "{" + ",".join(f'"{i}":{b}' for i, b in enumerate(bytes(value))) + "}"
    raise TypeError(f"cannot encode a value of type {type(value).__name__}")


def utf8(text: str) -> bytes:
    """UTF-8 as TextEncoder makes it: a lone surrogate becomes U+FFFD."""
    try:
        return text.encode()
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text).encode()


def _text(data: bytes, what: str) -> str:
    try:
        return bytes(data).decode()
    except UnicodeDecodeError as e:
        raise ValueError(f"{what}: invalid UTF-8 at byte {e.start}") from None


# --- keys and partitions ------------------------------------------------------------------------------


def key_string(key: Any) -> str:
    """The key as the browser groups and partitions by it: a string as is, anything else JSON.stringify'd."""
    return key if isinstance(key, str) else _js_json(key)


def partition_of(key: Any, partitions: int) -> int:
    """FNV-1a 32 of the key string's UTF-8 bytes, modulo the number of partitions."""
    h = 0x811C9DC5
    for byte in utf8(key_string(key)):
        h = ((h ^ byte) * 16777619) & 0xFFFFFFFF
    return h % partitions


# --- JSON lines ---------------------------------------------------------------------------------------


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _parse_int(text: str) -> int | float:
    """An integer literal as a browser reads it: past 2**53 it is the nearest double."""
    n = int(text)
    return n if -_SAFE_INTEGER <= n <= _SAFE_INTEGER else float(text)


_json_decoder = json.JSONDecoder(parse_constant=_reject_constant, parse_int=_parse_int)


def _json_encode(records: Iterable) -> bytes:
    return utf8("".join(f"[{_js_json(key)},{_js_json(value)}]\n" for key, value in records))


def _json_decode(data: bytes) -> list[tuple[Any, Any]]:
    records = []
    for number, line in enumerate(_text(data, "JSON lines").split("\n"), 1):
        if not line.strip():
            continue
        try:
            record = _json_decoder.decode(line)
        except ValueError as e:
            raise ValueError(f"JSON lines: line {number} is not valid JSON ({e})") from None
        if not isinstance(record, list) or len(record) != 2:
            raise ValueError(f"JSON lines: line {number} is not a 2-element [key, value] array")
        records.append((record[0], record[1]))
    return records


# --- CSV ----------------------------------------------------------------------------------------------

_BARE = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null")
_BARE_END = re.compile(r'[,\r\n"]')


def _csv_field(value: Any) -> str:
    if isinstance(value, str):
        return '"' + value.replace('"', '""') + '"'
    if value is None or isinstance(value, bool | int | float):
        return _js_json(value)
    return _csv_field(_js_json(value))


def _csv_encode(records: Iterable) -> bytes:
    return utf8("".join(f"{_csv_field(key)},{_csv_field(value)}\r\n" for key, value in records))


def _csv_decode(data: bytes) -> list[tuple[Any, Any]]:
    text = _text(data, "CSV")
    records = []
    i = 0
    row = 0
    while i < len(text):
        row += 1
        fields, i = _csv_row(text, i, row)
        if len(fields) != 2:
            raise ValueError(f"CSV row {row}: expected 2 fields (key,value), got {len(fields)}")
        records.append((fields[0], fields[1]))
    return records


def _csv_row(text: str, i: int, row: int) -> tuple[list[Any], int]:
    """The fields of the row starting at ``i``, and where the next row starts."""
    n = len(text)
    fields: list[Any] = []
    while True:
        value, i = _csv_quoted(text, i, row) if i < n and text[i] == '"' else _csv_bare(text, i, row)
        fields.append(value)
        if i < n and text[i] == ",":
            i += 1
            continue
        if i < n and text[i] == "\r":
            if not text.startswith("\n", i + 1):
                raise ValueError(f"CSV row {row}: a carriage return outside quotes")
            i += 1
        return fields, i + 1


def _csv_quoted(text: str, i: int, row: int) -> tuple[str, int]:
    """The quoted field opening at ``i`` (doubled quotes stand for one), and the index after it."""
    parts = []
    j = i + 1
    while True:
        q = text.find('"', j)
        if q < 0:
            raise ValueError(f"CSV row {row}: a quoted field is not closed")
        parts.append(text[j:q])
        if not text.startswith('"', q + 1):
            break
        parts.append('"')
        j = q + 2
    i = q + 1
    if i < len(text) and text[i] not in ",\r\n":
        raise ValueError(f"CSV row {row}: text after a closing quote")
    return "".join(parts), i


def _csv_bare(text: str, i: int, row: int) -> tuple[Any, int]:
    """The unquoted field at ``i`` (a JSON number, boolean or null when it reads as one), and where it ends."""
    end = _BARE_END.search(text, i)
    j = end.start() if end else len(text)
    if j < len(text) and text[j] == '"':
        raise ValueError(f"CSV row {row}: a quote inside an unquoted field")
    raw = text[i:j]
    return (_json_decoder.decode(raw) if _BARE.fullmatch(raw) else raw), j


# --- BSON ---------------------------------------------------------------------------------------------

_MAX_DEPTH = 100
_INT32 = struct.Struct("<i")
_INT64 = struct.Struct("<q")
_DOUBLE = struct.Struct("<d")


@dataclass(frozen=True)
class _Type:
    code: int
    encodes: Callable[[Any], bool]
    write: Callable[[bytearray, Any, int], None]
    read: Callable[[_Reader, int], Any]


def _is_int32(v: Any) -> bool:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return False
    if isinstance(v, float) and (not v.is_integer() or math.copysign(1.0, v) < 0 and v == 0):
        return False
    if isinstance(v, int) and not -_SAFE_INTEGER <= v <= _SAFE_INTEGER:
        v = float(v)  # what the browser holds
    return -(2**31) <= v <= 2**31 - 1


def _write_cstring(out: bytearray, name: str) -> None:
    data = utf8(name)
    if b"\0" in data:
        raise ValueError(f"BSON: a field name contains a NUL character: {name!r}")
    out += data + b"\0"


def _write_string(out: bytearray, value: str, depth: int) -> None:
    data = utf8(value)
    out += _INT32.pack(len(data) + 1) + data + b"\0"


def _write_binary(out: bytearray, value: Any, depth: int) -> None:
    data = bytes(value)
    out += _INT32.pack(len(data)) + b"\0" + data


def _write_double(out: bytearray, value: Any, depth: int) -> None:
    try:
        out += _DOUBLE.pack(float(value))
    except OverflowError:
        raise ValueError(f"BSON: {value} is too large for a double") from None


def _write_document(out: bytearray, items: Iterable[tuple[str, Any]], depth: int) -> None:
    if depth > _MAX_DEPTH:
        raise ValueError(f"BSON: nesting deeper than {_MAX_DEPTH}")
    start = len(out)
    out += b"\0\0\0\0"
    for name, value in items:
        bson_type = next((t for t in _BSON_TYPES if t.encodes(value)), None)
        if bson_type is None:
            raise TypeError(f"BSON: cannot encode a value of type {type(value).__name__}")
        out.append(bson_type.code)
        _write_cstring(out, name)
        bson_type.write(out, value, depth)
    out.append(0)
    out[start : start + 4] = _INT32.pack(len(out) - start)


class _Reader:
    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def take(self, n: int, what: str) -> bytes:
        if self.pos + n > len(self.data):
            left = len(self.data) - self.pos
            raise ValueError(f"BSON: truncated {what} at offset {self.pos} (needs {n} bytes, {left} left)")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def unpack(self, fmt: struct.Struct, what: str) -> Any:
        return fmt.unpack(self.take(fmt.size, what))[0]

    def cstring(self) -> str:
        end = self.data.find(b"\0", self.pos)
        if end < 0:
            raise ValueError(f"BSON: truncated field name at offset {self.pos}")
        return _text(self.take(end - self.pos + 1, "field name")[:-1], "BSON field name")

    def string(self, depth: int) -> str:
        at = self.pos
        length = self.unpack(_INT32, "string length")
        if length < 1:
            raise ValueError(f"BSON: bad string length {length} at offset {at}")
        data = self.take(length, "string")
        if data[-1] != 0:
            raise ValueError(f"BSON: string at offset {at} does not end with NUL")
        return _text(data[:-1], "BSON string")

    def binary(self, depth: int) -> bytes:
        at = self.pos
        length = self.unpack(_INT32, "binary length")
        if length < 0:
            raise ValueError(f"BSON: bad binary length {length} at offset {at}")
        self.take(1, "binary subtype")
        return bytes(self.take(length, "binary"))

    def elements(self, depth: int) -> list[tuple[str, Any]]:
        if depth > _MAX_DEPTH:
            raise ValueError(f"BSON: nesting deeper than {_MAX_DEPTH}")
        start = self.pos
        size = self.unpack(_INT32, "document size")
        if size < 5:
            raise ValueError(f"BSON: bad document size {size} at offset {start}")
        if start + size > len(self.data):
            left = len(self.data) - self.pos
            raise ValueError(f"BSON: truncated document at offset {self.pos} (needs {size - 4} bytes, {left} left)")
        end = start + size - 1
        items = []
        while self.pos < end:
            code = self.data[self.pos]
            if code == 0:
                raise ValueError(f"BSON: document at offset {start} does not end where its size says")
            bson_type = _BSON_BY_CODE.get(code)
            if bson_type is None:
                raise ValueError(f"BSON: unsupported element type 0x{code:02x} at offset {self.pos}")
            self.pos += 1
            name = self.cstring()
            items.append((name, bson_type.read(self, depth)))
        if self.pos != end or self.data[end] != 0:
            raise ValueError(f"BSON: document at offset {start} does not end where its size says")
        self.pos = end + 1
        return items


def _read_bool(r: _Reader, depth: int) -> bool:
    return r.take(1, "boolean")[0] != 0


# The element types of the subset, in the order the encoder tries them (first match wins).
_BSON_TYPES = (
    _Type(0x0A, lambda v: v is None, lambda out, v, d: None, lambda r, d: None),
    _Type(0x08, lambda v: isinstance(v, bool), lambda out, v, d: out.append(1 if v else 0), _read_bool),
    _Type(0x10, _is_int32, lambda out, v, d: out.extend(_INT32.pack(int(v))), lambda r, d: r.unpack(_INT32, "int32")),
    _Type(0x01, lambda v: isinstance(v, int | float), _write_double, lambda r, d: r.unpack(_DOUBLE, "double")),
    _Type(0x12, lambda v: False, lambda out, v, d: None, lambda r, d: r.unpack(_INT64, "int64")),
    _Type(0x02, lambda v: isinstance(v, str), _write_string, _Reader.string),
    _Type(0x05, lambda v: isinstance(v, bytes | bytearray | memoryview), _write_binary, _Reader.binary),
    _Type(
        0x04,
        lambda v: isinstance(v, list | tuple),
        lambda out, v, d: _write_document(out, ((str(i), x) for i, x in enumerate(v)), d + 1),
        lambda r, d: [value for _, value in r.elements(d + 1)],
    ),
    _Type(
        0x03,
        lambda v: isinstance(v, dict),
        lambda out, v, d: _write_document(out, _object_items(v), d + 1),
        lambda r, d: dict(r.elements(d + 1)),
    ),
)
_BSON_BY_CODE = {t.code: t for t in _BSON_TYPES}


def _bson_encode(records: Iterable) -> bytes:
    out = bytearray()
    for key, value in records:
        _write_document(out, (("k", key), ("v", value)), 0)
    return bytes(out)


def _bson_decode(data: bytes) -> list[tuple[Any, Any]]:
    reader = _Reader(bytes(data))
    records = []
    while reader.pos < len(reader.data):
        at = reader.pos
        fields = dict(reader.elements(0))
        if "k" not in fields or "v" not in fields:
            raise ValueError(f"BSON: the document at offset {at} is not a record (needs fields k and v)")
        records.append((fields["k"], fields["v"]))
    return records


# --- the shuffle format -------------------------------------------------------------------------------

_SHUFFLE_HEADER = struct.Struct("<4sBBH5I")
_SHUFFLE_MAGIC = b"PMRS"
_RECORDS, _GROUPS = 1, 2
_NULL, _FALSE, _TRUE, _INT, _FLOAT, _STRING, _JSON, _REPEAT = range(8)


class _ShuffleReader:
    def __init__(self, data: bytes):
        if data[:2] == b"\x1f\x8b":
            try:
                data = gzip.decompress(data)
            except (OSError, EOFError, zlib.error) as e:
                raise ValueError(f"shuffle data: not valid gzip ({e})") from None
        if len(data) < _SHUFFLE_HEADER.size:
            raise ValueError("shuffle data: shorter than its header")
        magic, version, self.layout, _, self.entries, tags, varints, floats, text = _SHUFFLE_HEADER.unpack_from(data)
        if magic != _SHUFFLE_MAGIC or version != 1:
            raise ValueError("shuffle data: not version 1 of the format")
        if self.layout not in (_RECORDS, _GROUPS):
            raise ValueError(f"shuffle data: unknown layout {self.layout}")
        if _SHUFFLE_HEADER.size + tags + varints + 8 * floats + text != len(data):
            raise ValueError("shuffle data: its sections do not add up to its size")
        at = _SHUFFLE_HEADER.size
        self.tags = data[at : at + tags]
        self.varints = data[at + tags : at + tags + varints]
        self.floats = struct.unpack_from(f"<{floats}d", data, at + tags + varints)
        # Lengths count UTF-16 units, as JavaScript strings do.
        self.text = _text(data[len(data) - text :], "shuffle data").encode("utf-16-le", "surrogatepass")
        self.t = self.v = self.f = self.s = 0

    def varint(self) -> int:
        value = shift = 0
        while shift < 35:
            if self.v >= len(self.varints):
                raise ValueError("shuffle data: truncated numbers")
            byte = self.varints[self.v]
            self.v += 1
            value |= (byte & 127) << shift
            if byte < 128:
                return value
            shift += 7
        raise ValueError("shuffle data: a number over 35 bits")

    def string(self) -> str:
        length = 2 * self.varint()
        if self.s + length > len(self.text):
            raise ValueError("shuffle data: truncated text")
        self.s += length
        return self.text[self.s - length : self.s].decode("utf-16-le", "surrogatepass")

    def value(self) -> Any:
        if self.t >= len(self.tags):
            raise ValueError("shuffle data: truncated values")
        kind = self.tags[self.t]
        self.t += 1
        if kind == _INT:
            z = self.varint()
            return -(z + 1) // 2 if z % 2 else z // 2
        if kind == _STRING:
            return self.string()
        if kind in (_NULL, _FALSE, _TRUE):
            return (None, False, True)[kind]
        if kind == _FLOAT:
            if self.f >= len(self.floats):
                raise ValueError("shuffle data: truncated floats")
            self.f += 1
            f = self.floats[self.f - 1]
            return int(f) if f.is_integer() and abs(f) <= _SAFE_INTEGER else f  # as JSON's digits read back
        if kind == _JSON:
            try:
                return _json_decoder.decode(self.string())
            except ValueError as e:
                raise ValueError(f"shuffle data: a value is not valid JSON ({e})") from None
        raise ValueError(f"shuffle data: unknown value kind {kind}")

    def records(self) -> list[tuple[Any, Any]]:
        records = []
        for _ in range(self.entries):
            if self.layout == _RECORDS:
                records.append((self.value(), self.value()))
                continue
            name = self.value()
            if not isinstance(name, str):
                raise ValueError("shuffle data: a group key that is not a string")
            left = self.varint()
            while left:
                repeat = 1
                if self.t < len(self.tags) and self.tags[self.t] == _REPEAT:
                    self.t += 1
                    repeat = self.varint()
                    if repeat > left:
                        raise ValueError("shuffle data: a repeat past its group's count")
                value = self.value()
                if repeat > 1 and isinstance(value, list | dict):
                    raise ValueError("shuffle data: a repeated value that is not a string, number, boolean or null")
                records.extend([(name, value)] * repeat)
                left -= repeat
        if (self.t, self.v, self.f, self.s) != (len(self.tags), len(self.varints), len(self.floats), len(self.text)):
            raise ValueError("shuffle data: data left over after its last entry")
        return records


def _shuffle_encode(records: Iterable) -> bytes:
    raise ValueError("the shuffle format is written by browsers only")


# --- the content types --------------------------------------------------------------------------------

_FORMATS = {
    JSON: (_json_encode, _json_decode),
    CSV: (_csv_encode, _csv_decode),
    BSON: (_bson_encode, _bson_decode),
    SHUFFLE: (_shuffle_encode, lambda data: _ShuffleReader(bytes(data)).records()),
}


def _format(content_type: str) -> tuple[Callable, Callable]:
    found = _FORMATS.get(content_type.split(";")[0].strip().lower())
    if found is None:
        raise ValueError(f"unsupported content type: {content_type}")
    return found


def encode(content_type: str, records: Iterable) -> bytes:
    """One blob of ``(key, value)`` records (pairs, as tuples or lists), as the browser would write it."""
    return _format(content_type)[0](records)


def decode(content_type: str, data: bytes) -> list[tuple[Any, Any]]:
    """The records of a blob; malformed data raises ValueError naming the problem and where it is."""
    return _format(content_type)[1](data)
