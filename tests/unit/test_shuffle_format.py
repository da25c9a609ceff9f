"""The shuffle format between stages (static/worker/codecs.js, run in V8; its Python reader in
appliance/jobs/codecs.py): whatever a job emits comes back as JSON lines would bring it back, in
the browser and in the appliance, and damaged data is refused with what is wrong."""

from __future__ import annotations

import gzip
import json

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from appliance.jobs import codecs
from appliance.jobs.codecs import JSON, SHUFFLE, key_string
from tests.unit.browser_codecs import codecs_in_v8

text = st.text(max_size=12) | st.sampled_from(["", "\ud800", "a\udfffb", "😀", "x" * 3000])
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | text
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=10,
)
records = st.lists(st.tuples(values, values), max_size=12)


@pytest.fixture(scope="module")
def js():
    ctx = codecs_in_v8()
    ctx.eval(
        r"""
        var S = peermrCodecs.shuffle;
        var hex = b => Array.from(b, x => x.toString(16).padStart(2, '0')).join('');
        var unhex = h => new Uint8Array((h.match(/../g) || []).map(x => parseInt(x, 16)));
        // JSON text of what a reduce gets after JSON lines and after the shuffle format ({name: values}
        // in first-seen order), and the shuffle bytes.
        var viaJson = recs => {
          const groups = Object.create(null);  // a key "__proto__" is a key like any other
          for (const [k, v] of throughJson(recs)) {
            const name = peermrCodecs.keyString(k);
            (groups[name] ??= []).push(v);
          }
          return JSON.stringify(Object.entries(groups));
        };
        var grouped = recs => {
          const groups = S.groups();  // as a map task keeps its emits
          for (const [k, v] of recs) S.addToGroup(groups, S.groupName(k), S.plain(v));
          const w = S.writer(S.GROUPS);
          for (const name in groups) w.group(name, groups[name]);
          return hex(w.finish());
        };
        var inOrder = recs => hex(peermrCodecs.encode(S.TYPE, recs));
        var viaShuffle = h => {
          const groups = Object.create(null);
          for (const [name, vs] of S.decode(unhex(h)).entries) (groups[name] ??= []).push(...vs);
          return JSON.stringify(Object.entries(groups));
        };
        // What a reduce gets from several map tasks' pieces: each piece decoded with counts kept
        // (S.decode's same) and merged in piece order, as the sandbox's reduceInput does.
        var viaPieces = hexes => {
          const merged = S.groups();
          for (const h of hexes) {
            for (const [name, vs] of S.decode(unhex(h), {same: true}).entries) S.mergeGroup(merged, name, vs);
          }
          return JSON.stringify(Object.entries(S.keyToValues(merged)));
        };
        var recordsBack = h => JSON.stringify(peermrCodecs.decode(S.TYPE, unhex(h)));
        // What JSON lines give back: each [key, value] stringified, then parsed.
        var throughJson = recs => recs.map(r => JSON.parse(JSON.stringify(r)));
        var jsonBack = recs => JSON.stringify(throughJson(recs));
        var refusal = h => { try { S.decode(unhex(h)); return null; } catch (e) { return e.message; } };
        """
    )
    yield ctx
    ctx.close()


@settings(max_examples=150, deadline=None)
@given(records)
@example([("a", 1), ("b", 2.5), ("a", {"x": [1, None]}), (7, "seven"), ("7", True), (None, "")])
@example([("a", 1), ("a", 1), ("a", 1), ("a", 2), ("b", "s"), ("b", "s"), ("c", None), ("c", None), ("c", {})])
@example([({"\\": 1}, 1), ({"\n": None}, 2)])
@example([("__proto__", 1), ("toString", 2), ("3", 1), ("__proto__", 1), ("1", None)])
def test_a_reduce_gets_the_same_groups_as_through_json_lines(js, recs):
    recs = [list(r) for r in recs]
    data = js.call("grouped", recs)
    assert js.call("viaShuffle", data) == js.call("viaJson", recs)


@settings(max_examples=150, deadline=None)
@given(st.lists(records, min_size=1, max_size=4))
@example([[("the", 1), ("the", 1), ("a", 2)], [("the", 1), ("a", 2), ("a", 3)], [("the", "1"), ("the", "1")]])
@example([[("k", None)] * 3, [("k", None)] * 2, [("k", 1)], [("k", None)]])
@example([[("__proto__", 1), ("constructor", 1), ("10", 1)], [("2", 1), ("__proto__", [1]), ("hasOwnProperty", 1)]])
def test_a_reduce_merging_pieces_gets_what_json_lines_give(js, pieces):
    """Pieces from several map tasks, their repeated values added up as counts, give every key's
    values in the order JSON lines of all the pieces, one after the other, would."""
    pieces = [[list(r) for r in piece] for piece in pieces]
    data = [js.call("grouped", piece) for piece in pieces]
    assert js.call("viaPieces", data) == js.call("viaJson", [r for piece in pieces for r in piece])


def in_object_order(names) -> list[str]:
    """Names in the order a JavaScript object enumerates its keys: array indices (canonical
    integers 0 to 2**32 - 2) ascending, then the others in the order they came."""

    def index(name: str) -> int | None:
        if name.isascii() and name.isdigit() and str(int(name)) == name and int(name) < 2**32 - 1:
            return int(name)
        return None

    indices = sorted((i, name) for name in names if (i := index(name)) is not None)
    return [name for _, name in indices] + [name for name in names if index(name) is None]


@settings(max_examples=150, deadline=None)
@given(records)
def test_records_keep_their_order_and_meaning(js, recs):
    recs = [list(r) for r in recs]
    data = js.call("inOrder", recs)
    assert js.call("recordsBack", data) == js.call("jsonBack", recs)


@settings(max_examples=150, deadline=None)
@given(records)
def test_the_appliance_reads_what_the_browser_wrote(js, recs):
    recs = [list(r) for r in recs]
    through_json = codecs.decode(JSON, codecs.encode(JSON, recs))
    in_order = bytes.fromhex(js.call("inOrder", recs))
    assert codecs.decode(SHUFFLE, in_order) == through_json
    # Gzipped, as browsers send pieces that shrink.
    assert codecs.decode(SHUFFLE, gzip.compress(in_order)) == through_json
    # Grouped: each key's records together, under the name a reduce sees, the names in the order
    # a reduce's keyToValues has them.
    by_name: dict[str, list] = {}
    for k, v in through_json:
        by_name.setdefault(key_string(k), []).append(v)
    expected = [(name, v) for name in in_object_order(by_name) for v in by_name[name]]
    assert codecs.decode(SHUFFLE, bytes.fromhex(js.call("grouped", recs))) == expected


def test_word_counts_take_two_bytes_a_record(js):
    recs = [["the", 1]] * 1000 + [["a", 1]] * 1000
    data = bytes.fromhex(js.call("grouped", recs))
    assert len(data) < 2 * 2000 + 64
    assert len(gzip.compress(data)) < 100


def test_dates_and_other_to_json_keys_group_under_their_string(js):
    back = js.eval(
        """
        (() => {
          const w = S.writer(S.GROUPS);
          w.group(S.groupName(new Date(0)), [S.plain(new Date(0)), S.plain(undefined), S.plain(NaN), S.plain(-0)]);
          return recordsBack(hex(w.finish()));
        })()
        """
    )
    assert json.loads(back) == [["1970-01-01T00:00:00.000Z", "1970-01-01T00:00:00.000Z"]] + [
        ["1970-01-01T00:00:00.000Z", v] for v in (None, None, 0)
    ]
    assert "Do not know how to serialize a BigInt" in js.eval(
        "(() => { try { S.plain(1n); } catch (e) { return e.message; } })()"
    )


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda b: b[:10], "shorter than its header"),
        (lambda b: b"XXXX" + b[4:], "not version 1 of the format"),
        (lambda b: b[:5] + b"\x09" + b[6:], "unknown layout 9"),
        (lambda b: b + b"\x00", "its sections do not add up to its size"),
        (lambda b: b[:28] + b"\x09" + b[29:], "unknown value kind 9"),
    ],
)
def test_damaged_data_is_refused_with_what_is_wrong(js, damage, message):
    good = bytes.fromhex(js.call("grouped", [["k", 1], ["k", "v"]]))
    assert js.call("refusal", good.hex()) is None
    bad = damage(good)
    assert message in js.call("refusal", bad.hex())
    with pytest.raises(ValueError, match=message):
        codecs.decode(SHUFFLE, bad)
    with pytest.raises(ValueError, match="not valid gzip"):
        codecs.decode(SHUFFLE, gzip.compress(good)[:-6])


def test_a_key_whose_values_are_all_one_value_is_kept_as_a_count(js):
    data = bytes.fromhex(
        js.eval(
            """
            (() => {
              const w = S.writer(S.GROUPS);
              const same = new S.Same(1);
              same.count = 100000;
              w.group('the', same);
              w.group('a', [2, 2, 'x']);
              return hex(w.finish());
            })()
            """
        )
    )
    assert len(data) < 64
    assert codecs.decode(SHUFFLE, data) == [("the", 1)] * 100_000 + [("a", 2), ("a", 2), ("a", "x")]
    groups = json.loads(js.call("viaShuffle", data.hex()))
    assert groups == [["the", [1] * 100_000], ["a", [2, 2, "x"]]]
