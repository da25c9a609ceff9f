"""How deeply a JSON text nests, measured before any decoder sees it.

msgspec and the json module decode nested arrays and objects by recursion: a body of 200,000
``[`` raises RecursionError, and a value that decodes a little under the interpreter's limit may
still fail in code that walks or re-encodes it. Every JSON text from outside (REST bodies,
WebSocket messages) is refused past ``MAX_DEPTH`` first (appliance/web/json_bodies.py,
appliance/fleet/protocol.py).
"""

from __future__ import annotations

import re

import numpy as np

# The appliance's own messages and bodies nest a few levels (run metadata: gpuRequirements.limits).
MAX_DEPTH = 64
TOO_DEEP = f"JSON may nest arrays and objects at most {MAX_DEPTH} levels deep"

# A complete string literal, escapes included: brackets inside strings do not nest.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
# Each bracket as a step of the depth (+1 or -1 as int8); every other byte is dropped.
_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))


def nesting_depth(data: bytes) -> int:
    """The deepest nesting of arrays and objects in ``data`` (0 for a scalar); C-speed throughout."""
    steps = np.frombuffer(_STRING.sub(b"", data).translate(_STEPS, _NOT_BRACKETS), dtype=np.int8)
    return int(np.cumsum(steps, dtype=np.int64).max(initial=0))


def too_deep(data: bytes | str) -> bool:
    """True when ``data`` nests deeper than MAX_DEPTH. Text that is not JSON may measure oddly (an
    unterminated string's brackets count): it is refused either way."""
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    # Most texts have too few brackets to nest that deep at all.
    if data.count(b"[") + data.count(b"{") <= MAX_DEPTH:
        return False
    return nesting_depth(data) > MAX_DEPTH
