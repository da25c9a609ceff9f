"""Stack frames of the served sandbox script, named by their place in the job script."""

from __future__ import annotations

import msgspec

from appliance.jobs.sandbox_script import build, first_place, map_stack
from appliance.jobs.spec import extract_spec

SCRIPT = """const e = new JobExecution();
e.setInputFn(async function input() {
  return [1];
});
e.addStage(new MapStage(async function map(x) {
  await context.onComplete();
}));
e.addStage(new ReduceStage(async (kv) => {
  const n = 1;
  throw new Error('x');
}));
e.start(jobRunner);
"""
URL = "http://10.0.0.5:8080/worker/runs/7/sandbox.js"


def served_line(text: str, needle: str) -> tuple[int, int]:
    """Line and column (1-based) of ``needle`` in the served script."""
    for number, line in enumerate(text.split("\n"), 1):
        if needle in line:
            return number, line.index(needle) + 1
    raise AssertionError(needle)


def test_frames_in_each_function_map_to_the_job_script_and_name_the_stage():
    spec = extract_spec(SCRIPT)
    text, _ = build(spec)
    throw_line, throw_column = served_line(text, "throw new Error")
    input_line, input_column = served_line(text, "async function input")
    stack = (
        f"Error: x\n    at http://10.0.0.5:8080/worker/runs/7/sandbox.js:{throw_line}:{throw_column}\n"
        f"    at input ({URL}:{input_line}:{input_column})\n"
        f"    at run ({URL}:1:1)\n"
        "    at other (http://10.0.0.5:8080/worker/runs/8/sandbox.js:9:3)"
    )
    mapped = map_stack(stack, 7, spec)
    assert "Error: x\n    at job.js:10:3, in stage 2 (reduce)\n" in mapped
    assert "at input (job.js:2:14, in the input function)" in mapped
    # Our own first lines and another run's script stay as they were.
    assert f"at run ({URL}:1:1)" in mapped and "runs/8/sandbox.js:9:3" in mapped
    assert first_place(stack, 7, spec) == "job.js:10:3, in stage 2 (reduce)"


def test_a_spec_without_places_still_names_the_stage_and_the_line_in_its_function():
    spec = extract_spec(SCRIPT)
    text, _ = build(spec)
    stages = [msgspec.structs.replace(s, line=None, column=None) for s in spec.stages]
    old = msgspec.structs.replace(spec, stages=stages)
    line, column = served_line(text, "throw new Error")
    assert map_stack(f"    at {URL}:{line}:{column}", 7, old) == "    at line 3 of stage 2 (reduce)'s function"
    assert first_place("no frames here", 7, old) is None
