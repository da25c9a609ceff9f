"""Whether a stage's function talks to other ranks: messages, collectives or the parameter server.

Such a stage is never speculated (two attempts of one rank would both send, receive and update)
and starts again as a whole after a restart. The function's source is read as JavaScript tokens,
so these names count only in code: not in comments, strings or the text of template literals
(their ``${...}`` substitutions are code), nor inside longer names such as ``broadcastX``.

What counts, anywhere in code (as a call, a member access, a destructured or passed-on name):
``sendToRank``, ``receiveFromRank``, ``barrier``, ``broadcast``, ``allReduce``, ``allGather``,
``assertReplicaIntegrity`` (a gather), the member ``ps`` (``context.ps``, ``context['ps']``) and
``ps.read/write/update/clock/register`` on a variable named ``ps``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

RANK_CALLS = frozenset(
    {"sendToRank", "receiveFromRank", "barrier", "broadcast", "allReduce", "allGather", "assertReplicaIntegrity"}
)
PS_METHODS = frozenset({"read", "write", "update", "clock", "register"})

# One token of code at a time; a template literal's text and a regular expression are read apart.
_TOKEN = re.compile(
    r"""
    (?P<skip>\s+|//[^\n\r\u2028\u2029]*|/\*[\s\S]*?(?:\*/|\Z))
    |(?P<string>'(?:[^'\\\n\r]|\\[\s\S])*(?:'|\Z)|"(?:[^"\\\n\r]|\\[\s\S])*(?:"|\Z))
    |(?P<name>(?:[^\W\d]|\$)[\w$]*|\#[\w$]+)
    |(?P<number>\.?\d[\w.]*)
    |(?P<punct>\?\.(?!\d)|\.\.\.|[\s\S])
    """,
    re.VERBOSE,
)
# A template literal's text up to its end (`) or its next substitution (${), or the source's end.
_TEMPLATE_TEXT = re.compile(r"(?:[^`\\$]|\\[\s\S]|\$(?!\{))*")
_REGEX = re.compile(r"/(?![*/])(?:[^/\\\[\n\r]|\\.|\[(?:[^\]\\\n\r]|\\.)*\])+/[\w$]*")
# After these words an expression starts, so a slash opens a regular expression rather than dividing.
_BEFORE_EXPRESSION = frozenset("return typeof instanceof in of new delete void throw case do else yield await".split())


# Context members whose use ties a function to its rank's whole share of the work (seeded random
# numbers, the rank's part of an array, the worker count to share data out by hand): such a stage
# runs as one task per rank (execution.py, chunks). getRank() alone does not: a rank's chunks all
# see their rank.
RANK_STATE = frozenset({"rng", "shard", "getWorkerCount"})


def reads_rank_state(source: str) -> bool:
    """Whether the function uses one of RANK_STATE as a member, anywhere in code."""
    tokens = list(_tokens(source))
    for k, (kind, text) in enumerate(tokens):
        name, member = _word(tokens, k, kind, text)
        if member and name in RANK_STATE:
            return True
    return False


def talks_to_ranks(source: str) -> bool:
    tokens = list(_tokens(source))
    for k, (kind, text) in enumerate(tokens):
        name, member = _word(tokens, k, kind, text)
        if name in RANK_CALLS or (member and name == "ps"):
            return True
        if kind == "name" and text == "ps" and not member and _member_after(tokens, k) in PS_METHODS:
            return True
    return False


def _word(tokens: list[tuple[str, str]], k: int, kind: str, text: str) -> tuple[str | None, bool]:
    """The name token ``k`` stands for, and whether it is a member (``.x``, ``?.x``, ``['x']``)."""
    before = tokens[k - 1][1] if k > 0 and tokens[k - 1][0] == "punct" else None
    if kind == "name":
        return text, before in (".", "?.")
    if kind == "string" and before == "[" and k + 1 < len(tokens) and tokens[k + 1] == ("punct", "]"):
        return text[1:-1], True
    return None, False


def _member_after(tokens: list[tuple[str, str]], k: int) -> str | None:
    """The member accessed right after token ``k`` (``.x``, ``?.x`` or ``['x']``), if any."""
    if k + 2 >= len(tokens):
        return None
    name, member = _word(tokens, k + 2, *tokens[k + 2])
    return name if member else None


def _tokens(source: str) -> Iterator[tuple[str, str]]:
    """The code tokens of JavaScript source as (kind, text): kind is name, string, number or punct;
    comments and template literals' text are left out (a template stands as one empty string)."""
    i, n = 0, len(source)
    substitutions: list[int] = []  # per template substitution we are in, the braces open inside it
    previous: tuple[str, str] | None = None
    while i < n:
        if source[i] == "`" or (source[i] == "}" and substitutions and substitutions[-1] == 0):
            if source[i] == "}":
                substitutions.pop()
            i = _TEMPLATE_TEXT.match(source, i + 1).end()
            if source.startswith("${", i):
                substitutions.append(0)
                i += 2
                previous = ("punct", "{")  # what follows starts an expression
                continue
            i += 1
            previous = ("string", "``")
            yield previous
            continue
        regex = _REGEX.match(source, i) if source[i] == "/" and _expression_starts(previous) else None
        if regex is not None:
            i = regex.end()
            previous = ("string", "//")
            yield previous
            continue
        match = _TOKEN.match(source, i)
        i = match.end()
        kind = match.lastgroup
        if kind == "skip":
            continue
        text = match.group()
        if substitutions and kind == "punct" and text in ("{", "}"):
            substitutions[-1] += 1 if text == "{" else -1
        previous = (kind, text)
        yield previous


def _expression_starts(previous: tuple[str, str] | None) -> bool:
    """Whether a slash after ``previous`` opens a regular expression (else it divides)."""
    if previous is None:
        return True
    kind, text = previous
    if kind == "punct":
        return text not in (")", "]", "}")
    return kind == "name" and text in _BEFORE_EXPRESSION
