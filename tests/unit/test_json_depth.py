"""JSON nesting measured before decoding: what counts as a level, and what does not."""

from __future__ import annotations

import json

import pytest

from appliance.json_depth import MAX_DEPTH, nesting_depth, too_deep


@pytest.mark.parametrize(
    "text,depth",
    [
        ("1", 0),
        ('"[[[{{{"', 0),
        ("[]", 1),
        ('{"a": [1, {"b": []}]}', 4),
        ("[[], [[]], []]", 3),
        # Brackets inside strings, escaped quotes and backslashes included, are text.
        (r'["\"[[[", "\\", {"k]": "\\\"}}"}]', 2),
        ('["é[[", "日本{{"]', 1),
    ],
)
def test_nesting_depth(text, depth):
    assert nesting_depth(text.encode()) == depth


def test_the_limit_is_inclusive():
    assert not too_deep("[" * MAX_DEPTH + "]" * MAX_DEPTH)
    assert too_deep("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))
    assert too_deep(b'{"a":' * (MAX_DEPTH + 1) + b"1" + b"}" * (MAX_DEPTH + 1))


def test_what_the_decoders_cannot_take_is_too_deep():
    deep = "[" * 200_000 + "]" * 200_000
    with pytest.raises(RecursionError):
        json.loads(deep)
    assert too_deep(deep) and too_deep(deep.encode())


def test_many_brackets_side_by_side_are_not_depth():
    wide = json.dumps({"script": "{[(" * 10_000, "list": [[i] for i in range(10_000)]})
    assert nesting_depth(wide.encode()) == 3 and not too_deep(wide)
