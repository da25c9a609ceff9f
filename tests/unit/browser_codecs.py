"""static/worker/codecs.js loaded in the embedded V8, for tests that hold it against the appliance's
readers and against JSON lines."""

from __future__ import annotations

from pathlib import Path

from py_mini_racer import MiniRacer

CODECS_JS = Path(__file__).resolve().parents[2] / "static" / "worker" / "codecs.js"

# The embedded V8 (14.3, 14.4) has a JSON.parse bug that Chromium's does not: once a key "\\" has
# been parsed, a one-character escaped key such as "\u001a" or "\n" comes back as "\\". JSON is
# checked by JSON.parse (its errors stay) and its value taken from the JS parser, so that what one
# example parsed cannot change what a later one decodes to (hypothesis saw it as a flaky failure).
# The tests' texts hold no "__proto__" key, where the two parsers differ.
_JSON_BY_THE_JS_PARSER = """
const checkJson = JSON.parse;
JSON.parse = text => { checkJson(text); return (0, eval)('(' + text + ')'); };
"""


def codecs_in_v8() -> MiniRacer:
    ctx = MiniRacer()
    ctx.eval(_JSON_BY_THE_JS_PARSER)
    ctx.eval(CODECS_JS.read_text())
    return ctx
