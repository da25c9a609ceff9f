"""Record codecs of job data: round trips, BSON vectors from the spec, malformed input, and agreement
with the browser's implementation (static/worker/codecs.js run in V8)."""

from __future__ import annotations

import json
import math
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.jobs import codecs
from appliance.jobs.codecs import BSON, CSV, JSON, decode, encode, key_string, partition_of
from tests.unit.browser_codecs import codecs_in_v8

# --- values a job can emit -----------------------------------------------------------------------------

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
values = st.recursive(
    scalars,
    # BSON field names cannot hold NUL (test_unsupported_content_type_and_values).
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(st.characters(codec="utf-8", exclude_characters="\0"), max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
records = st.lists(st.tuples(values, values), max_size=8)


@pytest.fixture(scope="module")
def js():
    """The browser's codecs in V8 (no Web APIs: its UTF-8 fallbacks are used)."""
    ctx = codecs_in_v8()
    ctx.eval(
        """
        var hex = b => Array.from(b, x => x.toString(16).padStart(2, '0')).join('');
        var unhex = h => new Uint8Array((h.match(/../g) || []).map(x => parseInt(x, 16)));
        var jsEncode = (ct, records) => hex(peermrCodecs.encode(ct, records));
        var jsDecode = (ct, h) => JSON.stringify(peermrCodecs.decode(ct, unhex(h)));
        var jsError = (ct, h) => {
          try { peermrCodecs.decode(ct, unhex(h)); return null; } catch (e) { return e.message; }
        };
        var jsKeys = keys => keys.map(k => peermrCodecs.keyString(k));
        var jsPartitions = (keys, n) => keys.map(k => peermrCodecs.partitionOf(k, n));
        """
    )
    yield ctx
    ctx.close()


def js_encode(js, content_type: str, recs) -> bytes:
    return bytes.fromhex(js.call("jsEncode", content_type, [list(r) for r in recs]))


def as_js(recs) -> str:
    """Records as JSON.stringify shows the browser's array of [key, value]."""
    return codecs._js_json([list(r) for r in recs])


def csv_value(value):
    """What a value becomes through CSV: scalars stay, anything else is its JSON text."""
    return value if value is None or isinstance(value, bool | int | float | str) else key_string(value)


# --- round trips ---------------------------------------------------------------------------------------


@given(records)
def test_json_lines_round_trip(recs):
    assert decode(JSON, encode(JSON, recs)) == recs


@given(records)
def test_csv_round_trip_keeps_scalars_and_turns_the_rest_into_json_text(recs):
    assert decode(CSV, encode(CSV, recs)) == [(csv_value(k), csv_value(v)) for k, v in recs]


@given(st.lists(st.tuples(values | st.binary(max_size=8), values | st.binary(max_size=8)), max_size=8))
def test_bson_round_trip(recs):
    assert decode(BSON, encode(BSON, recs)) == recs


def test_numbers_keep_their_type_where_the_format_has_one():
    recs = [(1, 1.5), (2**31, -(2**31)), (2.0, 2**53), (-0.0, 1e300)]
    assert decode(BSON, encode(BSON, recs)) == recs
    # int32 where a browser would use it (it cannot tell 2.0 from 2), a double past it.
    assert [type(k) for k, _ in decode(BSON, encode(BSON, recs))] == [int, float, int, float]
    assert math.copysign(1, decode(BSON, encode(BSON, [(-0.0, 0)]))[0][0]) == -1
    assert encode(JSON, [(1.0, 2**53 + 2), (-0.0, float("nan"))]) == b"[1,9007199254740994]\n[0,null]\n"
    assert encode(CSV, [(float("inf"), True), ("x", None)]) == b'null,true\r\n"x",null\r\n'


def test_csv_format():
    data = encode(CSV, [('say "hi"', [1, {"a": "b"}]), (1.5, "line\r\nbreak")])
    assert data == b'"say ""hi""","[1,{""a"":""b""}]"\r\n1.5,"line\r\nbreak"\r\n'
    assert decode(CSV, data) == [('say "hi"', '[1,{"a":"b"}]'), (1.5, "line\r\nbreak")]
    # Bare fields that are not JSON scalars are strings; LF alone ends a row too; no final line break needed.
    assert decode(CSV, b"abc,-1.5e3\ntrue,\n1,null") == [("abc", -1500.0), (True, ""), (1, None)]
    assert decode(CSV, b"") == []


def test_json_lines_format():
    assert encode(JSON, [("é", {"b": 1, "10": 2, "2": 3}), ([1, None], "\x01\ud800")]) == (
        '["é",{"2":3,"10":2,"b":1}]\n[[1,null],"\\u0001\\ud800"]\n'.encode()
    )
    assert decode(JSON, b'[1, 2]\r\n\n  \n["a", {"b": [true]}]') == [(1, 2), ("a", {"b": [True]})]


# --- BSON vectors (bsonspec.org, "Examples") -----------------------------------------------------------

HELLO_WORLD = b"\x16\x00\x00\x00\x02hello\x00\x06\x00\x00\x00world\x00\x00"
AWESOME = (
    b"\x31\x00\x00\x00\x04BSON\x00\x26\x00\x00\x00\x020\x00\x08\x00\x00\x00awesome\x00"
    b"\x011\x00\x33\x33\x33\x33\x33\x33\x14\x40\x102\x00\xc2\x07\x00\x00\x00\x00"
)


def record_document(key_element: bytes, value_element: bytes) -> bytes:
    """{k: ..., v: ...} from its two elements (type byte and value after the name)."""
    body = key_element[:1] + b"k\x00" + key_element[1:] + value_element[:1] + b"v\x00" + value_element[1:] + b"\x00"
    return struct.pack("<i", len(body) + 4) + body


def test_bson_spec_examples_as_values():
    data = encode(BSON, [("hello", {"hello": "world"}), (1, {"BSON": ["awesome", 5.05, 1986]})])
    assert data == record_document(b"\x02\x06\x00\x00\x00hello\x00", b"\x03" + HELLO_WORLD) + record_document(
        b"\x10\x01\x00\x00\x00", b"\x03" + AWESOME
    )
    assert decode(BSON, data) == [("hello", {"hello": "world"}), (1, {"BSON": ["awesome", 5.05, 1986]})]


def test_bson_element_types():
    cases = [
        (None, b"\x0a"),
        (True, b"\x08\x01"),
        (False, b"\x08\x00"),
        (-2, b"\x10\xfe\xff\xff\xff"),
        (2**31, b"\x01" + struct.pack("<d", 2**31)),
        (0.5, b"\x01" + struct.pack("<d", 0.5)),
        ("é", b"\x02\x03\x00\x00\x00\xc3\xa9\x00"),
        (b"\x00\xff", b"\x05\x02\x00\x00\x00\x00\x00\xff"),
        ([], b"\x04\x05\x00\x00\x00\x00"),
        ({}, b"\x03\x05\x00\x00\x00\x00"),
    ]
    for value, element in cases:
        expected = record_document(b"\x0a", element)
        assert encode(BSON, [(None, value)]) == expected, value
        assert decode(BSON, expected) == [(None, value)]
    # int64 is read (as int here, as Number in a browser); other subtypes of binary read as their bytes.
    assert decode(BSON, record_document(b"\x12" + struct.pack("<q", -(2**40)), b"\x05\x01\x00\x00\x00\x80z")) == [
        (-(2**40), b"z")
    ]


# --- malformed input -----------------------------------------------------------------------------------

MALFORMED = [
    (BSON, encode(BSON, [("key", "value")])[:-3], "BSON: truncated document"),
    (BSON, encode(BSON, [("key", "value")]) + b"\x05\x00", "BSON: truncated document size"),
    (BSON, b"\x04\x00\x00\x00", "BSON: bad document size 4"),
    (BSON, record_document(b"\x0a", b"\x02\x10\x00\x00\x00ab\x00"), "BSON: truncated string"),
    (BSON, record_document(b"\x0a", b"\x07" + bytes(12)), "BSON: unsupported element type 0x07"),
    (BSON, record_document(b"\x0a", b"\x02\x03\x00\x00\x00\xff\xfe\x00"), "BSON string: invalid UTF-8"),
    (BSON, b"\x0b\x00\x00\x00\x0ak\x00\x0ax\x00\x00", "is not a record (needs fields k and v)"),
    (BSON, b"\x0c\x00\x00\x00\x0ak\x00\x0av\x00\x00\x00", "does not end where its size says"),
    (CSV, b'"unclosed,1\r\n', "CSV row 1: a quoted field is not closed"),
    (CSV, b'"a",1\r\nb"c,2\r\n', "CSV row 2: a quote inside an unquoted field"),
    (CSV, b'"a"b,1\r\n', "CSV row 1: text after a closing quote"),
    (CSV, b'"a",1,2\r\n', "CSV row 1: expected 2 fields (key,value), got 3"),
    (CSV, b'"a",1\r\n\r\n"b",2\r\n', "CSV row 2: expected 2 fields (key,value), got 1"),
    (CSV, b'"a",1\r"b",2', "CSV row 1: a carriage return outside quotes"),
    (CSV, b'"\xff",1', "CSV: invalid UTF-8"),
    (JSON, b'["a",1]\n[1,2,3]\n', "JSON lines: line 2 is not a 2-element [key, value] array"),
    (JSON, b'{"k":1,"v":2}\n', "JSON lines: line 1 is not a 2-element [key, value] array"),
    (JSON, b'["a",1]\n["b",\n', "JSON lines: line 2 is not valid JSON"),
    (JSON, b'["a",NaN]\n', "JSON lines: line 1 is not valid JSON"),
]


@pytest.mark.parametrize(("content_type", "data", "message"), MALFORMED)
def test_malformed_input_is_a_clear_value_error(content_type, data, message, js):
    with pytest.raises(ValueError) as error:
        decode(content_type, data)
    assert message in str(error.value)
    # The browser reads the same data the same way.
    assert message in js.call("jsError", content_type, data.hex())


def test_unsupported_content_type_and_values():
    with pytest.raises(ValueError, match="unsupported content type: text/plain"):
        decode("text/plain", b"")
    assert decode("text/csv; charset=utf-8", b"1,2") == [(1, 2)]
    with pytest.raises(TypeError, match="cannot encode a value of type set"):
        encode(JSON, [(1, {1, 2})])
    with pytest.raises(ValueError, match="NUL character"):
        encode(BSON, [(1, {"a\0b": 1})])


def test_bson_nesting_is_limited():
    deep: list = []
    for _ in range(150):
        deep = [deep]
    with pytest.raises(ValueError, match="nesting deeper than 100"):
        encode(BSON, [(1, deep)])


# --- keys as JavaScript sees them ----------------------------------------------------------------------


def test_key_string_matches_json_stringify():
    assert key_string("plain") == "plain"
    assert key_string(1.0) == "1"
    assert key_string(-0.0) == "0"
    assert key_string(1e21) == "1e+21"
    assert key_string(1e20) == "100000000000000000000"
    assert key_string(1.5e-7) == "1.5e-7"
    assert key_string(0.000001) == "0.000001"
    assert key_string(float("nan")) == "null"
    assert key_string(2**60) == "1152921504606847000"  # a double, printed with its shortest digits
    assert key_string(2**53 + 1) == "9007199254740992"
    assert key_string([True, None, 'a"b', {"x": 1, "1": 2}]) == '[true,null,"a\\"b",{"1":2,"x":1}]'
    assert key_string(b"\x01\x02") == '{"0":1,"1":2}'


@settings(max_examples=300)
@given(st.lists(st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(2**70), 2**70), min_size=1))
def test_numbers_format_as_in_javascript(js, numbers):
    # Through JSON the browser reads each number as the double nearest to it, as a Python int or float would be.
    assert js.call("jsKeys", numbers) == [key_string(n) for n in numbers]


@settings(max_examples=100)
@given(st.lists(values, min_size=1, max_size=30))
def test_key_strings_agree(js, keys):
    assert js.call("jsKeys", keys) == [key_string(k) for k in keys]


def test_partitions_agree_on_many_keys(js):
    keys = (
        [f"word{i}" for i in range(500)]
        + ["", "é", "日本語", "😀 emoji", "a\u0000b", "\ud800 lone surrogate", "ﬁ", "théta", "naïve café", "ab😀"]
        + list(range(-50, 50))
        + [0.5, 1e21, -1.25e-9, 2**53, True, False, None]
        + [[i, "x", [i / 3]] for i in range(50)]
        + [{"a": i, "b": [None]} for i in range(20)]
    )
    for partitions in (1, 2, 3, 7, 64, 8192):
        expected = [partition_of(k, partitions) for k in keys]
        assert js.call("jsPartitions", keys, partitions) == expected
        assert all(0 <= p < partitions for p in expected)
    # FNV-1a 32 reference values: fnv1a32("") = 0x811c9dc5, fnv1a32("a") = 0xe40c292c.
    assert partition_of("", 2**31) == 0x811C9DC5 % 2**31
    assert partition_of("a", 0xE40C292D) == 0xE40C292C


# --- the two implementations read each other's bytes ---------------------------------------------------


@settings(max_examples=150)
@given(records)
def test_browser_and_python_write_the_same_bytes(js, recs):
    for content_type in codecs.CONTENT_TYPES:
        js_bytes = js_encode(js, content_type, recs)
        assert js_bytes == encode(content_type, recs), content_type
        # JS-written bytes read in Python, Python-written bytes read in JS, to the same records.
        assert as_js(decode(content_type, js_bytes)) == js.call("jsDecode", content_type, js_bytes.hex())


def test_browser_binary_and_int64_read_in_python(js):
    data = bytes.fromhex(
        js.eval(
            "hex(peermrCodecs.encode('application/bson', "
            "[[new Uint8Array([1, 2, 255]), new Float64Array([1.5]).buffer], ['big', 2n ** 40n], ['d', new Date(0)]]))"
        )
    )
    assert decode(BSON, data) == [
        (b"\x01\x02\xff", struct.pack("<d", 1.5)),
        ("big", 2**40),
        ("d", "1970-01-01T00:00:00.000Z"),
    ]
    assert json.loads(js.call("jsDecode", BSON, encode(BSON, [(b"\x07", [b""])]).hex())) == [[{"0": 7}, [{}]]]


def test_browser_incremental_encoder(js):
    result = js.eval(
        """
        (() => {
          const encoder = peermrCodecs.encoder('text/csv');
          encoder.add('a', 1); encoder.add('b', [2]);
          const counts = [encoder.records, encoder.size];
          const first = hex(encoder.finish());
          encoder.add('c', null);
          return JSON.stringify({counts, first, second: hex(encoder.finish()), empty: encoder.records});
        })()
        """
    )
    out = json.loads(result)
    # A record the format cannot hold leaves nothing behind.
    partial = js.eval(
        """
        (() => {
          const encoder = peermrCodecs.encoder('application/bson');
          encoder.add(1, 'a');
          try { encoder.add(2, {ok: 1, bad: () => 0}); } catch (e) {}
          encoder.add(3, 'c');
          return JSON.stringify([encoder.records, hex(encoder.finish())]);
        })()
        """
    )
    records, data = json.loads(partial)
    assert records == 2 and bytes.fromhex(data) == encode(BSON, [(1, "a"), (3, "c")])
    assert out["counts"] == [2, len('"a",1\r\n"b","[2]"\r\n')]
    assert bytes.fromhex(out["first"]) == encode(CSV, [("a", 1), ("b", [2])])
    assert bytes.fromhex(out["second"]) == encode(CSV, [("c", None)])
    assert out["empty"] == 0
