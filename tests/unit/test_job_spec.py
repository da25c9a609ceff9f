"""Spec extraction: job scripts evaluated against the recording SDK (appliance/jobs/spec.py)."""

import asyncio
import os
import textwrap
import time

import msgspec
import pytest
from py_mini_racer import MiniRacer

from appliance.jobs.spec import (
    MAX_SCRIPT_BYTES,
    GpuRequirements,
    JobSpec,
    ScriptError,
    StageSpec,
    WasmBinary,
    extract_spec,
    extract_spec_async,
    validate_spec,
)

WORD_COUNT = """\
const execution = new JobExecution(storageType = 'pmrfs');
execution.setInputFn(async function input() {
  return [
    'https://example.com/books/pride-and-prejudice.txt',
    'https://example.com/books/moby-dick.txt',
  ];
});
execution.addStage(new MapStage(async function map(x) {
  for await (const kv of x) {
    const response = await fetch(kv[1]);
    const text = await response.text();
    for (const word of text.split(/\\s+/)) {
      if (word) context.emit(word.toLowerCase(), 1);
    }
  }
  await context.onComplete();
}));
execution.addStage(new ReduceStage(async function reduce(keyToValues) {
  for (const key in keyToValues) {
    context.emit(key, keyToValues[key].reduce((a, b) => a + b, 0));
  }
  await context.onComplete();
}));
execution.start(jobRunner);
"""

CHARACTER_COUNT = """\
const execution = new JobExecution('s3');
execution.workerCount = 16;
execution.groupCount = 3;
execution.privateMode = true;
execution.gpu = true;
execution.gpuRequirements = {
  info: {vendor: 'nvidia'},
  features: {'shader-f16': true, 'timestamp-query': false},
  limits: {maxBufferSize: 268435456},
};
execution.scripts = ['https://cdn.example.com/lodash.min.js'];
execution.wasmBinaries = ['https://cdn.example.com/wasm/count.wasm', {name: 'sort', url: 'https://cdn.example.com/sort-v2.wasm'}];
execution.saveIntermediateOutput = false;
execution.seed = 42;
execution.staleness = 0;

execution.setInputFn(async function input() {
  const urls = [];
  for (let i = 0; i < 8; i++) urls.push(`https://example.com/text/part-${i}.txt`);
  return urls;
}, 'text/csv');

function countCharacters(x) {
  for (const [, url] of x) context.log(url);
}

const read = new MapStage(async function read(x) {
  for await (const kv of x) {
    const text = await (await fetch(kv[1])).text();
    for (const ch of text) context.emit(ch, 1);
    context.flush();
  }
  await context.onComplete();
});
read.contentType = 'text/csv';
read.timeout = 30 * 60;
execution.addStage(read);

const sum = new ReduceStage(async (keyToValues) => {
  for (const [ch, ones] of Object.entries(keyToValues)) context.emit(ch, ones.length);
  await context.onComplete();
});
sum.contentType = 'application/bson';
sum.timeout = 600;
execution.addStage(sum);

const bucket = new MapStage(async function bucket(x) {
  for (const [ch, n] of x) context.emit(n > 1000 ? 'common' : 'rare', [ch, n]);
  await context.onComplete();
});
execution.addStage(bucket);

execution.addStage(new ReduceStage(async function collect(keyToValues) {
  for (const key in keyToValues) context.emit(key, keyToValues[key].length);
  await context.onComplete();
}));

execution.start(jobRunner);
"""


def job(body: str, *, stages: str = "e.addStage(new MapStage(async function map(x) {}));") -> str:
    """A minimal script: the body's lines are lines 2.. of the script."""
    return f"const e = new JobExecution('pmrfs');\n{textwrap.dedent(body).strip()}\n{stages}\ne.start(jobRunner);\n"


def refused(script: str, **kwargs) -> ScriptError:
    with pytest.raises(ScriptError) as caught:
        extract_spec(script, **kwargs)
    return caught.value


# -- PeerMR-style scripts ------------------------------------------------------------------------


def test_word_count():
    spec = extract_spec(WORD_COUNT)
    assert spec.storage_type == "pmrfs"
    assert spec.input_source.startswith("async function input() {\n  return [\n")
    assert spec.input_content_type == "application/json"
    assert [stage.kind for stage in spec.stages] == ["map", "reduce"]
    assert "for await (const kv of x)" in spec.stages[0].source
    assert spec.stages[1].source.startswith("async function reduce(keyToValues) {")
    assert all(stage.content_type == "application/json" and stage.timeout == 3600 for stage in spec.stages)


def test_character_count_with_every_field_set():
    spec = extract_spec(CHARACTER_COUNT)
    assert spec.storage_type == "s3"
    assert (spec.worker_count, spec.group_count) == (16, 3)
    assert spec.private_mode and spec.gpu and not spec.save_intermediate_output
    assert spec.gpu_requirements == GpuRequirements(
        info={"vendor": "nvidia"}, features=["shader-f16"], limits={"maxBufferSize": 268435456.0}
    )
    assert spec.scripts == ["https://cdn.example.com/lodash.min.js"]
    assert spec.wasm_binaries == [
        WasmBinary(name="count.wasm", url="https://cdn.example.com/wasm/count.wasm"),
        WasmBinary(name="sort", url="https://cdn.example.com/sort-v2.wasm"),
    ]
    assert (spec.seed, spec.staleness) == (42, 0)
    assert spec.input_content_type == "text/csv"
    assert [(s.kind, s.content_type, s.timeout) for s in spec.stages] == [
        ("map", "text/csv", 1800),
        ("reduce", "application/bson", 600),
        ("map", "application/json", 3600),
        ("reduce", "application/json", 3600),
    ]
    assert spec.stages[1].source.startswith("async (keyToValues) => {")


def test_spec_serialises_with_sdk_names_and_back():
    spec = extract_spec(CHARACTER_COUNT)
    data = msgspec.json.decode(msgspec.json.encode(spec))
    assert {"storageType", "workerCount", "groupCount", "privateMode", "gpuRequirements", "wasmBinaries"} <= set(data)
    assert {"saveIntermediateOutput", "inputSource", "inputContentType", "seed", "staleness"} <= set(data)
    stage_fields = {"kind", "source", "contentType", "timeout", "combine", "chunks", "line", "column", "talksToRanks"}
    assert set(data["stages"][0]) == stage_fields
    assert msgspec.json.decode(msgspec.json.encode(spec), type=JobSpec) == spec


def test_each_function_knows_where_its_text_starts_in_the_script():
    script = (
        "const e = new JobExecution();\n"
        "e.setInputFn(async function input() { return [1]; });\n"
        "const shared = async function map(x) {\n  context.emit(x, 1);\n};\n"
        "e.addStage(new MapStage(shared));\n"
        "e.addStage(new ReduceStage(new Function('x', 'return x')));\n"
        "e.start(jobRunner);"
    )
    spec = extract_spec(script)
    assert (spec.input_line, spec.input_column) == (2, 14)
    assert (spec.stages[0].line, spec.stages[0].column) == (3, 16)
    # A function the script built from a string is nowhere in its text: no place, not a wrong one.
    assert (spec.stages[1].line, spec.stages[1].column) == (None, None)


def test_sloppy_mode_script():
    spec = extract_spec(
        "const execution = new JobExecution(storageType = 'gcs');\n"
        "undeclared = 3;\n"
        "execution.workerCount = undeclared;\n"
        "execution.addStage(new MapStage(function (x) { with (Math) { context.emit(x, PI); } }));\n"
        "execution.start(jobRunner);\n"
    )
    assert (spec.storage_type, spec.worker_count) == ("gcs", 3)


def test_defaults():
    spec = extract_spec("const e = new JobExecution();\ne.addStage(new ReduceStage(x => x));\ne.start(jobRunner);")
    assert spec == JobSpec(stages=[StageSpec(kind="reduce", source="x => x", line=2, column=28)])
    assert spec.storage_type == "pmrfs"
    assert (spec.worker_count, spec.group_count) == (4, 1)
    assert (spec.private_mode, spec.gpu, spec.save_intermediate_output) == (False, False, True)
    assert spec.gpu_requirements == GpuRequirements(info={}, features=[], limits={})
    assert (spec.scripts, spec.wasm_binaries, spec.seed, spec.staleness) == ([], [], None, None)
    assert (spec.input_source, spec.input_content_type) == (None, "application/json")


def test_fields_read_back_and_defaults_can_be_extended_in_place():
    spec = extract_spec(
        job(
            """
            e.workerCount = e.workerCount * 2;
            e.scripts.push('https://cdn.example.com/a.js');
            e.gpuRequirements.features['shader-f16'] = true;
            e.gpuRequirements.limits.maxComputeWorkgroupSizeX = 256;
            """
        )
    )
    assert spec.worker_count == 8
    assert spec.scripts == ["https://cdn.example.com/a.js"]
    assert spec.gpu_requirements.features == ["shader-f16"]
    assert spec.gpu_requirements.limits == {"maxComputeWorkgroupSizeX": 256.0}


def test_gpu_features_as_a_list():
    spec = extract_spec(job("e.gpuRequirements = {features: ['shader-f16', 'shader-f16', 'float32-filterable']};"))
    assert spec.gpu_requirements == GpuRequirements(features=["shader-f16", "float32-filterable"])


def test_start_from_a_promise_callback():
    spec = extract_spec(
        "const e = new JobExecution('pmrfs');\n"
        "e.addStage(new MapStage(x => x));\n"
        "(async () => { await null; e.start(jobRunner); })();\n"
    )
    assert len(spec.stages) == 1


def test_function_declarations_and_arrows():
    spec = extract_spec(
        "function mapper(x) {\n  return x;\n}\n"
        "const e = new JobExecution('pmrfs');\n"
        "e.setInputFn(() => [1, 2, 3]);\n"
        "e.addStage(new MapStage(mapper));\n"
        "e.addStage(new MapStage(async x => { await context.onComplete(); }));\n"
        "e.start(jobRunner);\n"
    )
    assert spec.input_source == "() => [1, 2, 3]"
    assert [s.source for s in spec.stages] == [
        "function mapper(x) {\n  return x;\n}",
        "async x => { await context.onComplete(); }",
    ]


def test_function_sources_round_trip():
    spec = extract_spec(CHARACTER_COUNT)
    sources = [spec.input_source, *(stage.source for stage in spec.stages)]
    with MiniRacer() as mr:
        for source in sources:
            # As the sandbox defines them: a parenthesised function expression.
            assert mr.eval(f"typeof ({source})") == "function"
            assert mr.eval(f"String(({source}))") == source


def test_isolation_between_extractions():
    extract_spec(job("globalThis.leaked = 7; Object.prototype.polluted = 1;"))
    spec = extract_spec(job("e.workerCount = typeof leaked === 'undefined' && !('polluted' in {}) ? 2 : 3;"))
    assert spec.worker_count == 2


def test_async_wrapper():
    assert asyncio.run(extract_spec_async(WORD_COUNT)) == extract_spec(WORD_COUNT)


# -- validation ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "line", "message"),
    [
        ("e.workerCount = 0;", 2, "workerCount must be a whole number from 1 to 8192 (got 0)"),
        ("// a comment\ne.workerCount = 8193;", 3, "workerCount must be a whole number from 1 to 8192 (got 8193)"),
        ("e.workerCount = '4';", 2, 'workerCount must be a whole number from 1 to 8192 (got "4")'),
        ("e.workerCount = 2.5;", 2, "workerCount must be a whole number from 1 to 8192 (got 2.5)"),
        ("e.workerCount = undefined;", 2, "workerCount must be a whole number from 1 to 8192 (got undefined)"),
        ("e.groupCount = 27;", 2, "groupCount must be a whole number from 1 to 26 (got 27)"),
        ("e.groupCount = 0;", 2, "groupCount must be a whole number from 1 to 26 (got 0)"),
        ("e.privateMode = 'yes';", 2, 'privateMode must be true or false (got "yes")'),
        ("e.saveIntermediateOutput = 1;", 2, "saveIntermediateOutput must be true or false (got 1)"),
        ("e.seed = 1.5;", 2, "seed must be a whole number (got 1.5)"),
        ("e.staleness = -1;", 2, "staleness must be a whole number of at least 0 (got -1)"),
        ("e.scripts = 'https://a.example/x.js';", 2, "scripts must be a list of URLs"),
        ("e.scripts = ['lib/x.js'];", 2, 'scripts[0] is not a URL: "lib/x.js"'),
        ("e.scripts = ['https://a.example/x.js', 'ftp://a.example/y.js'];", 2, "scripts[1] must be an http or https"),
        ("e.scripts = [() => 1];", 2, "scripts[0] must be an http(s) URL (got a function)"),
        ("e.wasmBinaries = ['file:///tmp/x.wasm'];", 2, "wasmBinaries[0] must be an http or https URL"),
        ("e.wasmBinaries = [{name: 'x', url: 'not a url'}];", 2, "wasmBinaries[0].url is not a URL"),
        ("e.wasmBinaries = [{url: 'https://a.example/x.wasm'}];", 2, "wasmBinaries[0].name must be a non-empty"),
        (
            "e.wasmBinaries = ['https://a.example/x.wasm', {name: 'x.wasm', url: 'https://b.example/y.wasm'}];",
            2,
            "wasmBinaries[1]: the name 'x.wasm' is used by another WebAssembly binary",
        ),
        ("e.gpuRequirements = {features: {'shader-f16': 'yes'}};", 2, "gpuRequirements.features.shader-f16 must be"),
        ("e.gpuRequirements = {limits: {maxBufferSize: 'big'}};", 2, "gpuRequirements.limits.maxBufferSize must be"),
        ("e.gpuRequirements = {info: {vendor: 1}};", 2, "gpuRequirements.info.vendor must be a string"),
        ("e.gpuRequirements = {memory: 4};", 2, "gpuRequirements has an unknown field 'memory'"),
        ("e.gpuRequirements = new Map();", 2, "gpuRequirements must be an object {info, features, limits} (got a Map"),
        ("e.setInputFn(() => [], 'text/plain');", 2, 'unknown content type for the input "text/plain"'),
    ],
)
def test_invalid_fields(body, line, message):
    error = refused(job(body))
    assert message in error.message
    assert error.line == line
    assert str(error) == f"line {line}: {error.message}"


def test_scripts_and_webassembly_binaries_may_be_files_the_appliance_serves():
    spec = extract_spec(
        job(
            """
            e.scripts = ['/static/vendor/tfjs/tf.min.js'];
            e.wasmBinaries = [
              '/static/examples/add.wasm', {name: 'lerp', url: '/static/examples/emscripten/lerp.wasm'},
            ];
            """
        )
    )
    assert spec.scripts == ["/static/vendor/tfjs/tf.min.js"]
    assert spec.wasm_binaries == [
        WasmBinary(name="add.wasm", url="/static/examples/add.wasm"),
        WasmBinary(name="lerp", url="/static/examples/emscripten/lerp.wasm"),
    ]
    # A relative path or one without its scheme is neither a URL nor a path on the appliance.
    assert "wasmBinaries[0] is not a URL" in refused(job("e.wasmBinaries = ['static/add.wasm'];")).message
    assert "wasmBinaries[0] is not a URL" in refused(job("e.wasmBinaries = ['//cdn.example/add.wasm'];")).message


def test_unknown_storage_type():
    error = refused(
        "// a comment\nconst e = new JobExecution('ftp');\ne.addStage(new MapStage(x => x));\ne.start(jobRunner);\n"
    )
    assert str(error) == "line 2: unknown storage type \"ftp\": use 'pmrfs', 's3' or 'gcs'"


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("s.contentType = 'text/plain';", 'unknown content type for stage 1 (MapStage) "text/plain"'),
        ("s.timeout = 0;", "the timeout (seconds) of stage 1 (MapStage) must be a whole number of at least 1 (got 0)"),
        ("s.timeout = 90.5;", "the timeout (seconds) of stage 1 (MapStage) must be a whole number"),
    ],
)
def test_invalid_stage_fields(setting, message):
    script = (
        "const e = new JobExecution('pmrfs');\n"
        "const s = new MapStage(async function map(x) {});\n"
        f"{setting}\n"
        "e.addStage(s);\n"
        "e.start(jobRunner);\n"
    )
    error = refused(script)
    assert message in error.message
    assert error.line == 3


def test_no_stages():
    error = refused("const e = new JobExecution('pmrfs');\n\ne.start(jobRunner);\n")
    assert error.line == 3
    assert "the job has no stages" in error.message


def test_no_start():
    error = refused("const e = new JobExecution('pmrfs');\ne.addStage(new MapStage(x => x));\n")
    assert (str(error), error.line, error.column) == ("the script never calls execution.start(jobRunner)", None, None)


def test_a_reduce_stage_can_combine_and_a_map_stage_cannot():
    script = WORD_COUNT.replace(
        "execution.addStage(new ReduceStage(async function reduce(keyToValues) {",
        "const reduce = new ReduceStage(async function reduce(keyToValues) {",
    ).replace(
        "  await context.onComplete();\n}));\nexecution.start",
        "  await context.onComplete();\n});\nreduce.combine = true;\nexecution.addStage(reduce);\nexecution.start",
    )
    assert [s.combine for s in extract_spec(WORD_COUNT).stages] == [False, False]
    assert [s.combine for s in extract_spec(script).stages] == [False, True]
    stages = "const m = new MapStage(async function map(x) {});\nm.combine = true;\ne.addStage(m);"
    error = refused(job("", stages=stages))
    assert "combine is for a ReduceStage: stage 1 (MapStage) is a map" in str(error)
    assert error.line == 4  # where it was set
    error = refused(job("", stages=stages.replace("true", "'yes'").replace("MapStage", "ReduceStage")))
    assert 'combine of stage 1 (ReduceStage) must be true or false (got "yes")' in str(error)


def test_a_map_is_cut_in_chunks_unless_it_asks_for_one_task_per_rank():
    assert [s.chunks for s in extract_spec(WORD_COUNT).stages] == ["auto", "auto"]
    stages = "const m = new MapStage(async function map(x) {});\nm.chunks = 'rank';\ne.addStage(m);"
    assert [s.chunks for s in extract_spec(job("", stages=stages)).stages] == ["rank"]
    error = refused(job("", stages=stages.replace("'rank'", "'many'")))
    assert "unknown chunks of stage 1 (MapStage) \"many\": use 'auto' or 'rank'" in str(error)
    assert error.line == 4  # where it was set


def test_validate_spec():
    spec = extract_spec(WORD_COUNT)
    assert validate_spec(spec) is spec
    changed = msgspec.convert({**msgspec.to_builtins(spec), "scripts": ["javascript:alert(1)"]}, JobSpec)
    with pytest.raises(ScriptError, match=r"scripts\[0\] must be an http or https URL") as caught:
        validate_spec(changed)
    assert caught.value.line is None
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({**msgspec.to_builtins(spec), "workerCount": 9000}, JobSpec)


# -- using the SDK wrongly -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "line", "message"),
    [
        ("e.start(jobRunner);", 3, "execution.start(jobRunner) was already called on line 2"),
        ("", 2, "execution.start() takes the global jobRunner: execution.start(jobRunner) (got undefined)"),
    ],
)
def test_start_misuse(body, line, message):
    first = "e.start(jobRunner);" if body else "e.start();"
    script = f"const e = new JobExecution('pmrfs'); e.addStage(new MapStage(x => x));\n{first}\n{body}\n"
    error = refused(script)
    assert message in error.message
    assert error.line == line


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("e.addStage('map');", 'execution.addStage() needs a MapStage or a ReduceStage (got "map")'),
        ("e.addStage(async function map(x) {});", "execution.addStage() needs a MapStage or a ReduceStage (got a fun"),
        ("e.addStage({contentType: 'text/csv'});", "needs a MapStage or a ReduceStage (got an object)"),
        ("e.setInputFn('https://example.com/a.txt');", 'execution.setInputFn(fn) needs a function (got "https://'),
        ("e.setInputFn();", "execution.setInputFn(fn) needs a function (got undefined)"),
        ("new MapStage(42);", "new MapStage(fn) needs a function (got 42)"),
        ("new ReduceStage(function* reduce() {});", "not a generator function"),
        ("new MapStage(class Mapper {});", "new MapStage(fn) needs a function, not a class"),
        ("new MapStage({map(x) { return x; }}.map);", "a method written inside an object or class cannot be sent"),
        ("new MapStage(Math.max);", "needs a function written in the job script (got a built-in or bound"),
        ("new MapStage((x => x).bind(null));", "needs a function written in the job script (got a built-in or bound"),
        ("setTimeout(() => {}, 0);", "setTimeout is not available at the top level of the job script"),
    ],
)
def test_sdk_misuse(body, message):
    error = refused(job(body))
    assert message in error.message
    assert error.line == 2
    assert error.message.startswith(("TypeError: ", "Error: "))


def test_changes_after_start():
    for change in ("e.workerCount = 8;", "e.addStage(new MapStage(x => x));", "s.timeout = 5;"):
        script = (
            "const e = new JobExecution('pmrfs');\n"
            "const s = new MapStage(x => x);\n"
            "e.addStage(s);\n"
            "e.start(jobRunner);\n"
            f"{change}\n"
        )
        error = refused(script)
        assert error.line == 5, change
        assert "after execution.start(jobRunner) was called on line 4" in error.message


@pytest.mark.parametrize("use", ["context.emit('a', 1);", "context.log('hello');", "const rank = context.getRank();"])
def test_context_at_top_level(use):
    error = refused(job(use))
    assert error.line == 2
    assert "only available inside stage functions, not at the top level of the job script" in error.message


# -- errors in the script ------------------------------------------------------------------------


def test_syntax_error_line_and_column():
    error = refused("const e = new JobExecution('pmrfs');\nfunction f() {\n  return [1, 2;\n}\n")
    assert (error.line, error.column) == (3, 15)
    assert str(error) == "line 3: SyntaxError: Unexpected token ';'"


def test_syntax_error_with_a_tab_and_an_unclosed_brace():
    error = refused("const e = new JobExecution('pmrfs');\n\tconst x = };\n")
    assert (error.line, error.column) == (2, 12)
    assert str(error) == "line 2: SyntaxError: Unexpected token '}'"


def test_unterminated_template_points_into_the_script():
    error = refused("const e = new JobExecution('pmrfs');\nconst text = `abc\n")
    assert error.line in (2, 3) and error.line <= 3
    assert "SyntaxError" in error.message


def test_runtime_error_at_top_level():
    error = refused("const e = new JobExecution('pmrfs');\nconst config = null;\ne.workerCount = config.workers;\n")
    assert error.line == 3
    assert error.column == 24
    assert error.message == "TypeError: Cannot read properties of null (reading 'workers')"


def test_error_thrown_in_a_helper_points_at_the_throw():
    error = refused("function check() {\n  throw new RangeError('too big');\n}\n\ncheck();\n")
    assert (str(error), error.column) == ("line 2: RangeError: too big", 9)


def test_thrown_value_that_is_not_an_error():
    assert str(refused("\n\nthrow 5;\n")) == "line 3: Uncaught 5"


def test_error_stack_tampering_does_not_hide_the_line():
    error = refused(
        "Error.stackTraceLimit = 0;\n"
        "Error.prepareStackTrace = () => 'nothing';\n"
        "const e = new JobExecution('pmrfs');\n"
        "e.addStage('x');\n"
    )
    assert error.line == 4


def test_script_size_limit():
    script = WORD_COUNT + "//" + "x" * MAX_SCRIPT_BYTES
    error = refused(script)
    assert error.line is None
    assert "larger than 1 MiB" in str(error)


def test_time_limit():
    started = time.monotonic()
    error = refused(job("while (true) {}"))
    assert str(error) == "the script did not finish within 2 s"
    assert error.line is None
    assert time.monotonic() - started < 6


def test_time_limit_counts_promise_callbacks():
    error = refused(job("Promise.resolve().then(() => { for (;;) {} });"), time_limit=0.5)
    assert str(error) == "the script did not finish within 0.5 s"


@pytest.mark.parametrize(
    "bomb",
    [
        "const all = []; for (;;) all.push({n: all.length, s: 'x' + all.length});",
        "const buffers = []; for (;;) buffers.push(new Uint8Array(1 << 24).fill(1));",
        # A builtin that V8 cannot interrupt: without a separate process, a fatal V8 error.
        "new Array(2 ** 30).fill(0);",
    ],
)
def test_memory_limit(bomb):
    started = time.monotonic()
    error = refused(job(bomb), time_limit=10)  # the memory limit, not the time limit, ends it
    assert str(error) == "the script used more than 64 MiB of memory"
    assert time.monotonic() - started < 6
    assert os.getpid()  # still here


def test_extraction_after_a_failure_is_unaffected():
    refused(job("new Array(2 ** 30).fill(0);"), time_limit=0.5)
    assert extract_spec(WORD_COUNT).storage_type == "pmrfs"
