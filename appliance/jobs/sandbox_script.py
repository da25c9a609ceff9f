"""The per-run sandbox script, and stack traces mapped from it back to the job script.

A task's Web Worker runs the job's functions from the script sandbox_routes serves: our runtime,
the job's declared scripts, then each function's source text in one ``define`` call. A stack frame
of job code therefore names ``/worker/runs/<id>/sandbox.js:<line>:<column>``, a place the user
never wrote. The layout below knows on which line and column of the served script each function
starts, and the spec knows where that function's text starts in the job script (spec.py), so a
frame maps back to ``job.js:<line>:<column>`` and the stage it is in.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from appliance import __version__
from appliance.jobs.spec import JobSpec

# Versioned, so browsers fetch the runtime again after an upgrade (codecs.js and collectives.js
# first: sandbox.js uses them).
RUNTIME = [
    f"/static/worker/codecs.js?v={__version__}",
    f"/static/worker/collectives.js?v={__version__}",
    f"/static/worker/sandbox.js?v={__version__}",
]


def import_runtime(origin: str) -> str:
    """What loads the runtime, in the run's sandbox script and in a warm sandbox (sandbox_routes). The
    sandbox's Web Worker starts from a blob: URL, against which no path resolves: the URLs name the
    appliance's origin."""
    return f"importScripts({', '.join(json.dumps(origin + url) for url in RUNTIME)});"


JOB_FILE = "job.js"


@dataclass(frozen=True)
class Placed:
    """One job function in the served script: its first line there (1-based), the column its text
    starts at on that line, where it starts in the job script (None: unknown), and what it is."""

    first: int
    last: int
    column: int
    line: int | None
    line_column: int | None
    label: str


def _stage_label(spec: JobSpec, index: int) -> str:
    return f"stage {index + 1} ({spec.stages[index].kind})"


def build(spec: JobSpec, origin: str = "") -> tuple[str, list[Placed]]:
    """The sandbox script's text, its runtime loaded from ``origin``, and where each job function sits
    in it (the same wherever the runtime comes from)."""
    head = (
        # A warm sandbox (sandbox_routes.warm_sandbox) has loaded the runtime already.
        f"if (!self.peermrSandbox) {import_runtime(origin)}\n"
        f"peermrSandbox.loadScripts({json.dumps(spec.scripts)});\n"
        "peermrSandbox.seal();\n"
    )
    placed: list[Placed] = []
    line = head.count("\n") + 1
    opening = "peermrSandbox.define({input: ("
    if spec.input_source:
        input_part = f"({spec.input_source})"
        end = line + spec.input_source.count("\n")
        placed.append(Placed(line, end, len(opening) + 1, spec.input_line, spec.input_column, "the input function"))
        line = end
    else:
        input_part = "null"
    parts = []
    line += 1  # the stages start on the line after `stages: [`
    for index, stage in enumerate(spec.stages):
        end = line + stage.source.count("\n")
        placed.append(Placed(line, end, 2, stage.line, stage.column, _stage_label(spec, index)))
        parts.append(f"({stage.source})")
        line = end + 1
    text = head + f"peermrSandbox.define({{input: {input_part}, stages: [\n" + ",\n".join(parts) + "\n]});\n"
    return text, placed


def _frame(run_id: int) -> re.Pattern[str]:
    # `at fn (http://host/worker/runs/7/sandbox.js:25:68)` or `at http://host/...:25:68`.
    return re.compile(r"\(?(?:[a-z]+://[^\s()]*)?/worker/runs/" + str(run_id) + r"/sandbox\.js:(\d+):(\d+)\)?")


def _where(placed: list[Placed], line: int, column: int) -> str | None:
    for p in placed:
        if p.first <= line <= p.last:
            offset = line - p.first
            if p.line is None:
                return f"line {offset + 1} of {p.label}'s function"
            at_line = p.line + offset
            at_column = column - p.column + p.line_column if offset == 0 else column
            return f"{JOB_FILE}:{at_line}:{at_column}, in {p.label}"
    return None


def map_stack(text: str, run_id: int, spec: JobSpec) -> str:
    """``text`` with every frame in the run's sandbox script named by its place in the job script."""
    if "/sandbox.js:" not in text:
        return text
    _, placed = build(spec)

    def named(match: re.Match[str]) -> str:
        where = _where(placed, int(match[1]), int(match[2]))
        if where is None:
            return match[0]
        return f"({where})" if match[0].startswith("(") else where

    return _frame(run_id).sub(named, text)


def first_place(text: str, run_id: int, spec: JobSpec) -> str | None:
    """Where in the job script the innermost mapped frame of a stack is, for a one-line reason."""
    if "/sandbox.js:" not in text:
        return None
    _, placed = build(spec)
    for match in _frame(run_id).finditer(text):
        if where := _where(placed, int(match[1]), int(match[2])):
            return where
    return None
