"""Job specs: what a job script declares, extracted when the job is saved (docs/sdk.md; docs/architecture.md, Jobs).

A job script is JavaScript written against the PeerMR SDK. Saving a job evaluates it against a
recording SDK (``recording_sdk.js``) in a fresh V8 isolate (mini-racer) with a time limit and a
memory limit: nothing runs, the SDK only records the execution's fields, the input function and
the stages, with functions kept as their source text. The record is validated here and becomes a
:class:`JobSpec`, or the script is refused with a :class:`ScriptError` that names the line.

Isolation. V8 cannot always stop a script in time: a builtin such as ``new Array(2**30).fill(0)``
ignores termination requests and ends the whole process with a fatal out-of-memory error, and
ArrayBuffer memory is not counted by the isolate's heap limit. So on POSIX each extraction runs in
a forked child process with a watchdog (wall clock and memory growth); whatever the script does,
the appliance sees a result, a ScriptError, or a dead child that it reports as one. V8 itself is
initialised once in the parent (it starts no threads), so a child only creates its own isolate.

Use :func:`extract_spec` from a worker thread (it blocks for up to the time limit plus a few
seconds) or :func:`extract_spec_async`.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import re
import selectors
import signal
import threading
import time
import traceback
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal, NoReturn
from urllib.parse import urlsplit

import msgspec
from py_mini_racer import (
    JSEvalException,
    JSOOMException,
    JSParseException,
    JSTimeoutException,
    MiniRacer,
    init_mini_racer,
)

from appliance.errors import InvalidRequest
from appliance.jobs.sandbox_policy import is_appliance_path
from appliance.jobs.stage_talks import talks_to_ranks
from appliance.json_depth import MAX_DEPTH, too_deep

log = logging.getLogger(__name__)

StorageType = Literal["pmrfs", "s3", "gcs"]
ContentType = Literal["application/json", "text/csv", "application/bson"]
StageKind = Literal["map", "reduce"]

STORAGE_TYPES: tuple[str, ...] = ("pmrfs", "s3", "gcs")
CONTENT_TYPES: tuple[str, ...] = ("application/json", "text/csv", "application/bson")
MAX_WORKER_COUNT = 8192
MAX_GROUP_COUNT = 26
# Validation runs a task on at most this many workers at first.
MAX_REPLICAS = 5
DEFAULT_STAGE_TIMEOUT = 3600

MAX_SCRIPT_BYTES = 1 << 20
TIME_LIMIT = 2.0  # seconds of JavaScript per extraction
MEMORY_LIMIT = 64 << 20  # bytes of V8 heap per extraction

# Largest integer a job script can write exactly (Number.MAX_SAFE_INTEGER).
_MAX_SAFE_INTEGER = (1 << 53) - 1


# -- the spec ------------------------------------------------------------------------------------


class StageSpec(msgspec.Struct, rename="camel", kw_only=True):
    """One stage of a job: a map or reduce function as source text."""

    kind: StageKind
    source: str
    content_type: ContentType = "application/json"
    timeout: Annotated[int, msgspec.Meta(ge=1)] = DEFAULT_STAGE_TIMEOUT
    # A reduce stage whose function also runs on each map task's output before the shuffle.
    combine: bool = False
    # Where the function's source starts in the job script (1-based), for mapping stack traces
    # back to it; None when the script does not hold the text (or the spec predates this).
    line: int | None = None
    column: int | None = None
    # Whether the function messages other ranks or uses the parameter server (stage_talks.py): such a
    # stage is never speculated. Found from the source when the spec is made, and when a spec stored
    # before it was recorded is decoded.
    talks_to_ranks: bool | None = None

    def __post_init__(self) -> None:
        if self.talks_to_ranks is None:
            self.talks_to_ranks = talks_to_ranks(self.source)


class GpuRequirements(msgspec.Struct, rename="camel", kw_only=True):
    """What a worker's GPU must offer: adapter info values, features, and minimum limits."""

    info: dict[str, str] = msgspec.field(default_factory=dict)
    features: list[str] = msgspec.field(default_factory=list)
    limits: dict[str, float] = msgspec.field(default_factory=dict)


class WasmBinary(msgspec.Struct, rename="camel", kw_only=True):
    name: str
    url: str


class Validation(msgspec.Struct, kw_only=True):
    """Each task runs on ``replicas`` workers; it is done once a majority gave the same outputs."""

    replicas: Annotated[int, msgspec.Meta(ge=2, le=MAX_REPLICAS)] = 2


class JobSpec(msgspec.Struct, rename="camel", kw_only=True):
    """Everything a job script declares. Serialises with the SDK's names (workerCount, ...)."""

    stages: Annotated[list[StageSpec], msgspec.Meta(min_length=1)]
    storage_type: StorageType = "pmrfs"
    worker_count: Annotated[int, msgspec.Meta(ge=1, le=MAX_WORKER_COUNT)] = 4
    group_count: Annotated[int, msgspec.Meta(ge=1, le=MAX_GROUP_COUNT)] = 1
    private_mode: bool = False
    gpu: bool = False
    gpu_requirements: GpuRequirements = msgspec.field(default_factory=GpuRequirements)
    scripts: list[str] = msgspec.field(default_factory=list)
    wasm_binaries: list[WasmBinary] = msgspec.field(default_factory=list)
    save_intermediate_output: bool = True
    seed: int | None = None
    staleness: Annotated[int, msgspec.Meta(ge=0)] | None = None
    # Seconds the run may wait in the queue before it fails (None: the appliance's default; 0: no limit).
    queue_timeout: Annotated[int, msgspec.Meta(ge=0)] | None = None
    # Backup attempts of stragglers (never for stages that talk to other ranks).
    speculation: bool = True
    validation: Validation | None = None
    input_source: str | None = None
    input_content_type: ContentType = "application/json"
    input_line: int | None = None
    input_column: int | None = None


class ScriptError(InvalidRequest):
    """A job script that does not evaluate to a valid job. ``line`` and ``column`` (1-based) refer
    to the job script itself; either may be None when the problem has no single place. The API
    gives them to clients as ``extra``; the editor marks the line."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None):
        super().__init__(message, line, column)
        self.message = message
        self.line = line
        self.column = column
        self.extra = {"line": line, "column": column}

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}" if self.line is not None else self.message


# -- validation ----------------------------------------------------------------------------------


class _Invalid(Exception):
    """A validation failure of one field, named by its key in the record's locations."""

    def __init__(self, message: str, where: str):
        super().__init__(message)
        self.message = message
        self.where = where


def _describe(value: Any) -> str:
    """A value as a job author wrote it, for messages."""
    if isinstance(value, dict) and set(value) == {"__js"}:
        return str(value["__js"])
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _whole_number(value: Any, name: str, where: str, low: int, high: int | None) -> int:
    if isinstance(value, float) and value.is_integer() and abs(value) <= _MAX_SAFE_INTEGER:
        value = int(value)
    if not _is_int(value) or value < low or (high is not None and value > high):
        if high is None or high == _MAX_SAFE_INTEGER:
            span = "" if low == -_MAX_SAFE_INTEGER else f" of at least {low}"
        else:
            span = f" from {low} to {high}"
        raise _Invalid(f"{name} must be a whole number{span} (got {_describe(value)})", where)
    return value


def _boolean(value: Any, name: str, where: str) -> bool:
    if not isinstance(value, bool):
        raise _Invalid(f"{name} must be true or false (got {_describe(value)})", where)
    return value


def _choice(value: Any, choices: tuple[str, ...], what: str, where: str) -> str:
    if value not in choices:
        names = ", ".join(f"'{c}'" for c in choices[:-1]) + f" or '{choices[-1]}'"
        raise _Invalid(f"unknown {what} {_describe(value)}: use {names}", where)
    return value


def _http_url(value: Any, name: str, where: str, *, appliance_path: bool = False) -> str:
    """An absolute http(s) URL, or with ``appliance_path`` also a path on the appliance (``/static/...``)."""
    if not isinstance(value, str):
        raise _Invalid(f"{name} must be an http(s) URL (got {_describe(value)})", where)
    if appliance_path and is_appliance_path(value):
        return value
    try:
        parts = urlsplit(value)
    except ValueError:
        parts = None
    if parts is not None and parts.scheme and parts.scheme.lower() not in ("http", "https"):
        raise _Invalid(f"{name} must be an http or https URL (got {_describe(value)})", where)
    if parts is None or not parts.scheme or not parts.netloc:
        raise _Invalid(f"{name} is not a URL: {_describe(value)} (write it in full, https://...)", where)
    return value


def _gpu_requirements(value: Any, where: str) -> GpuRequirements:
    name = "gpuRequirements"
    if not isinstance(value, dict) or set(value) == {"__js"}:
        raise _Invalid(f"{name} must be an object {{info, features, limits}} (got {_describe(value)})", where)
    unknown = sorted(set(value) - {"info", "features", "limits"})
    if unknown:
        raise _Invalid(f"{name} has an unknown field '{unknown[0]}' (it has info, features and limits)", where)
    return GpuRequirements(
        info=_gpu_info(value.get("info") or {}, f"{name}.info", where),
        features=list(dict.fromkeys(_gpu_features(value.get("features"), f"{name}.features", where))),
        limits=_gpu_limits(value.get("limits") or {}, f"{name}.limits", where),
    )


def _gpu_info(info: Any, name: str, where: str) -> dict[str, str]:
    if not isinstance(info, dict) or set(info) == {"__js"}:
        raise _Invalid(f"{name} must be an object of strings (got {_describe(info)})", where)
    for key, text in info.items():
        if not isinstance(text, str):
            raise _Invalid(f"{name}.{key} must be a string (got {_describe(text)})", where)
    return dict(info)


def _gpu_features(features: Any, name: str, where: str) -> list[str]:
    if features is None:
        return []
    if isinstance(features, dict) and set(features) != {"__js"}:
        # Features may also be given as {name: true}: the names that are true.
        for key, wanted in features.items():
            if not isinstance(wanted, bool):
                raise _Invalid(f"{name}.{key} must be true or false (got {_describe(wanted)})", where)
        return [key for key, wanted in features.items() if wanted]
    if not isinstance(features, list):
        raise _Invalid(f"{name} must be a list of feature names (got {_describe(features)})", where)
    for i, feature in enumerate(features):
        if not isinstance(feature, str) or not feature:
            raise _Invalid(f"{name}[{i}] must be a feature name (got {_describe(feature)})", where)
    return features


def _gpu_limits(limits: Any, name: str, where: str) -> dict[str, float]:
    if not isinstance(limits, dict) or set(limits) == {"__js"}:
        raise _Invalid(f"{name} must be an object of numbers (got {_describe(limits)})", where)
    for key, number in limits.items():
        if not isinstance(number, int | float) or isinstance(number, bool):
            raise _Invalid(f"{name}.{key} must be a number (got {_describe(number)})", where)
    return {k: float(v) for k, v in limits.items()}


def _scripts(value: Any, where: str) -> list[str]:
    if not isinstance(value, list):
        raise _Invalid(f"scripts must be a list of URLs (got {_describe(value)})", where)
    return [_http_url(url, f"scripts[{i}]", where, appliance_path=True) for i, url in enumerate(value)]


def _wasm_binaries(value: Any, where: str) -> list[WasmBinary]:
    if not isinstance(value, list):
        raise _Invalid(f"wasmBinaries must be a list of {{name, url}} or URLs (got {_describe(value)})", where)
    binaries: list[WasmBinary] = []
    seen: set[str] = set()
    for i, entry in enumerate(value):
        label = f"wasmBinaries[{i}]"
        if isinstance(entry, str):
            url = _http_url(entry, label, where, appliance_path=True)
            name = urlsplit(url).path.rstrip("/").rsplit("/", 1)[-1]
            if not name:
                raise _Invalid(f"{label} has no file name to call it by; give it as {{name, url}}", where)
        elif isinstance(entry, dict) and set(entry) != {"__js"}:
            name = entry.get("name")
            if not isinstance(name, str) or not name:
                raise _Invalid(f"{label}.name must be a non-empty string (got {_describe(name)})", where)
            url = _http_url(entry.get("url"), f"{label}.url", where, appliance_path=True)
        else:
            raise _Invalid(f"{label} must be a URL or an object {{name, url}} (got {_describe(entry)})", where)
        if name in seen:
            raise _Invalid(f"{label}: the name '{name}' is used by another WebAssembly binary", where)
        seen.add(name)
        binaries.append(WasmBinary(name=name, url=url))
    return binaries


def _validation(value: Any, storage_type: str) -> Validation | None:
    if value is None or value == {"__js": "undefined"}:
        return None
    if not isinstance(value, dict) or set(value) == {"__js"} or set(value) - {"replicas"}:
        raise _Invalid(f"validation must be an object {{replicas: 2}} (got {_describe(value)})", "validation")
    replicas = _whole_number(value.get("replicas", 2), "validation.replicas", "validation", 2, MAX_REPLICAS)
    if storage_type != "pmrfs":
        raise _Invalid(
            "validation compares outputs by their SHA-256, which only storageType 'pmrfs' keeps", "validation"
        )
    return Validation(replicas=replicas)


def _optional_whole_number(value: Any, name: str, where: str, low: int) -> int | None:
    if value is None or value == {"__js": "undefined"}:
        return None
    return _whole_number(value, name, where, low, _MAX_SAFE_INTEGER)


def _stage(value: dict, index: int) -> StageSpec:
    label = f"stage {index + 1} ({value['className']})"
    content_type = _choice(
        value["contentType"]["value"], CONTENT_TYPES, f"content type for {label}", f"stages[{index}].contentType"
    )
    timeout = _whole_number(
        value["timeout"]["value"], f"the timeout (seconds) of {label}", f"stages[{index}].timeout", 1, None
    )
    combine = _boolean(value["combine"]["value"], f"combine of {label}", f"stages[{index}].combine")
    if combine and value["kind"] != "reduce":
        raise _Invalid(
            f"combine is for a ReduceStage: {label} is a map "
            "(a combiner runs the reduce function on each map task's output)",
            f"stages[{index}].combine",
        )
    return StageSpec(
        kind=value["kind"], source=value["source"], content_type=content_type, timeout=timeout, combine=combine
    )


def _spec_from_record(record: dict) -> JobSpec:
    """Validate the recording SDK's snapshot and build the spec; raises _Invalid."""
    fields = {name: entry["value"] for name, entry in record["fields"].items()}
    storage_type = _choice(fields["storageType"], STORAGE_TYPES, "storage type", "storageType")
    worker_count = _whole_number(fields["workerCount"], "workerCount", "workerCount", 1, MAX_WORKER_COUNT)
    group_count = _whole_number(fields["groupCount"], "groupCount", "groupCount", 1, MAX_GROUP_COUNT)
    private_mode = _boolean(fields["privateMode"], "privateMode", "privateMode")
    gpu = _boolean(fields["gpu"], "gpu", "gpu")
    gpu_requirements = _gpu_requirements(fields["gpuRequirements"], "gpuRequirements")
    scripts = _scripts(fields["scripts"], "scripts")
    wasm_binaries = _wasm_binaries(fields["wasmBinaries"], "wasmBinaries")
    save = _boolean(fields["saveIntermediateOutput"], "saveIntermediateOutput", "saveIntermediateOutput")
    seed = _optional_whole_number(fields["seed"], "seed", "seed", -_MAX_SAFE_INTEGER)
    staleness = _optional_whole_number(fields["staleness"], "staleness", "staleness", 0)
    queue_timeout = _optional_whole_number(fields["queueTimeout"], "queueTimeout (seconds)", "queueTimeout", 0)
    speculation = _boolean(fields["speculation"], "speculation", "speculation")
    validation = _validation(fields["validation"], storage_type)
    input_source = None
    input_content_type = "application/json"
    if record["input"] is not None:
        input_source = record["input"]["source"]
        input_content_type = _choice(
            record["input"]["contentType"]["value"], CONTENT_TYPES, "content type for the input", "input.contentType"
        )
    if not record["stages"]:
        raise _Invalid(
            "the job has no stages: add a MapStage or a ReduceStage with execution.addStage() "
            "before execution.start(jobRunner)",
            "start",
        )
    stages = [_stage(stage, i) for i, stage in enumerate(record["stages"])]
    return JobSpec(
        storage_type=storage_type,
        worker_count=worker_count,
        group_count=group_count,
        private_mode=private_mode,
        gpu=gpu,
        gpu_requirements=gpu_requirements,
        scripts=scripts,
        wasm_binaries=wasm_binaries,
        save_intermediate_output=save,
        seed=seed,
        staleness=staleness,
        queue_timeout=queue_timeout,
        speculation=speculation,
        validation=validation,
        input_source=input_source,
        input_content_type=input_content_type,
        stages=stages,
    )


def _location(record: dict, where: str) -> dict | None:
    """Where the script set the field named by ``where`` (or started, if it never set it)."""
    at = None
    if where in record["fields"]:
        at = record["fields"][where]["at"]
    elif where.startswith("input") and record["input"] is not None:
        at = record["input"]["contentType"]["at"] or record["input"]["at"]
    elif match := re.fullmatch(r"stages\[(\d+)\]\.(\w+)", where):
        stage = record["stages"][int(match[1])]
        at = stage[match[2]]["at"] or stage["at"]
    return at or record["startAt"]


def validate_spec(spec: JobSpec) -> JobSpec:
    """Check a spec built elsewhere (a stored one with run settings applied, say) by the rules a
    script's spec follows; raises ScriptError (without a line). Returns the spec."""
    fields = {
        name: {"value": value, "at": None}
        for name, value in msgspec.to_builtins(spec).items()
        if name not in ("stages", "inputSource", "inputContentType")
    }
    fields.setdefault("seed", {"value": None, "at": None})
    fields.setdefault("staleness", {"value": None, "at": None})
    fields.setdefault("queueTimeout", {"value": None, "at": None})
    fields.setdefault("validation", {"value": None, "at": None})
    record = {
        "startAt": None,
        "fields": fields,
        "input": None
        if spec.input_source is None
        else {"source": spec.input_source, "at": None, "contentType": {"value": spec.input_content_type, "at": None}},
        "stages": [
            {
                "kind": stage.kind,
                "className": "MapStage" if stage.kind == "map" else "ReduceStage",
                "source": stage.source,
                "at": None,
                "contentType": {"value": stage.content_type, "at": None},
                "timeout": {"value": stage.timeout, "at": None},
                "combine": {"value": stage.combine, "at": None},
            }
            for stage in spec.stages
        ],
    }
    try:
        _spec_from_record(record)
    except _Invalid as exc:
        raise ScriptError(exc.message) from None
    return spec


# -- evaluation ----------------------------------------------------------------------------------

_SDK_FILE = "peermr-sdk.js"
_JOB_FILE = "job.js"
_HEADER = re.compile(r"^(?P<file>.*?):(?P<line>\d+): (?P<text>.*)$")
_JOB_FRAME = re.compile(r"^\s+at .*?\b" + re.escape(_JOB_FILE) + r":(?P<line>\d+):(?P<column>\d+)\)?\s*$")
_CARET = re.compile(r"^(?P<pad>[ \t]*)\^+\s*$")
_ERROR_NAME = re.compile(r"^[\w$]*(?:Error|Exception)\b")


@cache
def _sdk_source() -> str:
    return Path(__file__).with_name("recording_sdk.js").read_text(encoding="utf-8")


def _time_error(time_limit: float) -> ScriptError:
    return ScriptError(f"the script did not finish within {time_limit:g} s")


def _memory_error(memory_limit: int) -> ScriptError:
    return ScriptError(f"the script used more than {memory_limit >> 20} MiB of memory")


def _error_from_v8(text: str, script: str) -> ScriptError:
    """A ScriptError from mini-racer's report of an uncaught exception or syntax error:
    ``file:line: message`` / source line / caret / blank / stack."""
    lines = text.rstrip("\n").split("\n")
    header = _HEADER.match(lines[0])
    message = header["text"].strip() if header else lines[0].strip()
    if message and not _ERROR_NAME.match(message):
        message = f"Uncaught {message}"  # a thrown value that is not an Error: `throw 5`
    line = column = None
    # The innermost frame in the job script: where it threw, or the SDK call that refused.
    for entry in lines[1:]:
        if frame := _JOB_FRAME.match(entry):
            line, column = int(frame["line"]), int(frame["column"])
            break
    if line is None and header and header["file"] != _SDK_FILE:
        # A syntax error, or a throw with no stack: the header's line and the caret under it.
        line = int(header["line"])
        for entry in lines[1:]:
            if caret := _CARET.match(entry):
                column = len(caret["pad"]) + 1
                break
    if line is not None:
        # An unterminated comment or template swallows the `//# sourceURL` line the SDK appends.
        last = script.count("\n") + 1
        if line > last:
            line, column = last, len(script.rsplit("\n", 1)[-1]) + 1
    return ScriptError(message or "the script failed", line, column)


def _evaluate(script: str, time_limit: float, memory_limit: int, *, close: bool = True) -> str:
    """Run the script against the recording SDK in a new isolate; the record as JSON text.
    ``close=False`` leaves the isolate to the end of the process (closing waits for V8's thread,
    which a runaway builtin may keep busy)."""
    global _js_deadline
    mr = MiniRacer()
    sdk = None
    try:
        sdk = mr.eval(_sdk_source() + f"\n//# sourceURL={_SDK_FILE}\n")
        mr.set_hard_memory_limit(memory_limit)
        deadline = _js_deadline = time.monotonic() + time_limit

        def remaining() -> float:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _time_error(time_limit)
            return left

        try:
            sdk["run"](script, timeout_sec=remaining())
            # Separately, so that promise callbacks queued by the script have run.
            result = sdk["collect"](timeout_sec=remaining())
        except JSTimeoutException:
            raise _time_error(time_limit) from None
        except JSOOMException:
            raise _memory_error(memory_limit) from None
        except (JSParseException, JSEvalException) as exc:
            if mr.was_hard_memory_limit_reached():
                raise _memory_error(memory_limit) from None
            raise _error_from_v8(str(exc), script) from None
        if not isinstance(result, str):
            raise ScriptError("the script replaced parts of the job SDK")
        return result
    finally:
        if close:
            sdk = None  # JS handles go before their isolate
            mr.close()
        else:
            _left_open.append((mr, sdk))


# -- the child process ---------------------------------------------------------------------------

_GRACE = 3.0  # seconds beyond the time limit for the child to start, report and exit
_SLACK = 0.1  # seconds past the JavaScript deadline before the child's watchdog ends it
_js_deadline: float | None = None  # in a child: when its JavaScript must have finished
_left_open: list[Any] = []  # in a child: isolates left for the end of the process
_EXIT_MEMORY = 86
_EXIT_TIME = 87
_MAX_RESULT_BYTES = 64 << 20
_MAX_STDERR_BYTES = 16 << 10

_engine_lock = threading.Lock()
_engine_ready = False


def _ensure_engine() -> None:
    """Load and initialise V8 in this process, once: children then inherit it ready."""
    global _engine_ready
    with _engine_lock:
        if not _engine_ready:
            init_mini_racer(ignore_duplicate_init=True)
            _engine_ready = True


def _anonymous_memory() -> int | None:
    """Resident anonymous memory of this process in bytes (Linux), else None."""
    try:
        with open("/proc/self/status", "rb") as status:
            for entry in status:
                if entry.startswith(b"RssAnon:"):
                    return int(entry.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _watchdog(deadline: float, growth_limit: int) -> None:
    """In the child: exit when past the deadline or when memory grew by more than the limit.
    V8's own limits do not always act: its heap limit does not see ArrayBuffers, and a timed-out
    call waits for the isolate, which a builtin or a promise callback may keep busy."""
    baseline = _anonymous_memory()
    while True:
        time.sleep(0.01)
        now = time.monotonic()
        if now > deadline or (_js_deadline is not None and now > _js_deadline + _SLACK):
            os._exit(_EXIT_TIME)
        if baseline is not None:
            current = _anonymous_memory()
            if current is not None and current - baseline > growth_limit:
                os._exit(_EXIT_MEMORY)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _child(script: str, time_limit: float, memory_limit: int, result_fd: int, stderr_fd: int) -> NoReturn:
    """The forked child: evaluate, write the outcome as JSON to result_fd, exit. Never returns."""
    code = 1
    try:
        gc.disable()  # nothing inherited from the parent gets finalised here
        os.dup2(stderr_fd, 2)  # V8's fatal errors are read by the parent
        for signum in (signal.SIGINT, signal.SIGTERM):
            try:
                signal.signal(signum, signal.SIG_DFL)
            except (ValueError, OSError):
                pass
        # The forking thread may have been an event loop's: mini-racer must start its own.
        asyncio.events._set_running_loop(None)
        asyncio.set_event_loop_policy(None)
        threading.Thread(
            target=_watchdog, args=(time.monotonic() + time_limit + _GRACE, 2 * memory_limit), daemon=True
        ).start()
        try:
            outcome: dict[str, Any] = {"record": _evaluate(script, time_limit, memory_limit, close=False)}
        except ScriptError as exc:
            outcome = {"error": [exc.message, exc.line, exc.column]}
        _write_all(result_fd, json.dumps(outcome).encode())
        code = 0
    except BaseException:
        try:
            _write_all(2, traceback.format_exc().encode(errors="replace"))
        except BaseException:
            pass
    finally:
        os._exit(code)


def _read_child(pid: int, result_fd: int, stderr_fd: int, deadline: float) -> tuple[int | None, bytes, bytes]:
    """Collect the child's output until it exits or the deadline passes (then kill it).
    Returns (wait status or None if it was killed, result bytes, stderr bytes)."""
    keep = {result_fd: None, stderr_fd: _MAX_STDERR_BYTES}
    buffers = {fd: bytearray() for fd in keep}
    status: int | None = None
    with selectors.DefaultSelector() as selector:
        for fd in buffers:
            os.set_blocking(fd, False)
            selector.register(fd, selectors.EVENT_READ)
        while status is None:
            left = deadline - time.monotonic()
            if left <= 0 or len(buffers[result_fd]) > _MAX_RESULT_BYTES:
                _kill(pid)
                break
            for key, _ in selector.select(min(left, 0.05)):
                if not _drain(key.fd, buffers[key.fd], keep[key.fd]):
                    selector.unregister(key.fd)
            # End of file on both pipes: the child has exited. Otherwise look anyway, as another
            # fork made at the same moment may hold the pipes open too.
            status = _exit_status(pid, wait=not selector.get_map())
        if status is not None:
            for fd in buffers:
                _drain(fd, buffers[fd], keep[fd])
    return status, bytes(buffers[result_fd]), bytes(buffers[stderr_fd])


def _drain(fd: int, buffer: bytearray, keep: int | None) -> bool:
    """Read what is there into ``buffer``, keeping at most its last ``keep`` bytes; False at end of file."""
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return True
        if not chunk:
            return False
        buffer += chunk
        if keep is not None and len(buffer) > keep:
            del buffer[:-keep]


def _exit_status(pid: int, *, wait: bool) -> int | None:
    """The child's wait status once it has exited (waiting for that when ``wait``), else None."""
    try:
        done, status = os.waitpid(pid, 0 if wait else os.WNOHANG)
    except ChildProcessError:  # reaped elsewhere: judge by what it wrote
        return 0
    return status if done else None


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def _evaluate_in_child(script: str, time_limit: float, memory_limit: int) -> str:
    _ensure_engine()
    result_read, result_write = os.pipe()
    stderr_read, stderr_write = os.pipe()
    try:
        pid = os.fork()
        if pid == 0:
            os.close(result_read)
            os.close(stderr_read)
            _child(script, time_limit, memory_limit, result_write, stderr_write)
        os.close(result_write)
        os.close(stderr_write)
        result_write = stderr_write = -1
        status, result, stderr = _read_child(pid, result_read, stderr_read, time.monotonic() + time_limit + _GRACE)
    finally:
        for fd in (result_read, result_write, stderr_read, stderr_write):
            if fd >= 0:
                os.close(fd)
    if status is None or (os.WIFEXITED(status) and os.WEXITSTATUS(status) == _EXIT_TIME):
        if len(result) > _MAX_RESULT_BYTES:
            raise ScriptError("the job the script declares is too large")
        raise _time_error(time_limit)
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == _EXIT_MEMORY:
        raise _memory_error(memory_limit)
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        try:
            outcome = json.loads(result)
        except ValueError:
            raise RuntimeError("job spec extraction failed: the child process reported nothing") from None
        if "error" in outcome:
            raise ScriptError(*outcome["error"])
        return outcome["record"]
    report = stderr.decode("utf-8", "replace")
    if os.WIFSIGNALED(status):
        if "out of memory" in report.lower():
            raise _memory_error(memory_limit)
        log.warning("job spec: the JavaScript engine stopped (signal %d): %s", os.WTERMSIG(status), report[-2000:])
        raise ScriptError("the JavaScript engine stopped while running the script")
    raise RuntimeError(f"job spec extraction failed (exit status {os.WEXITSTATUS(status)}): {report[-2000:]}")


# -- the entry points ----------------------------------------------------------------------------


def _place(script: str, source: str | None) -> tuple[int | None, int | None]:
    """Line and column (1-based) where a function's source text starts in the script: the text
    is what Function.prototype.toString gave, a slice of the script unless the script built it."""
    at = script.find(source) if source else -1
    if at < 0:
        return None, None
    line_start = script.rfind("\n", 0, at) + 1
    return script.count("\n", 0, at) + 1, at - line_start + 1


def _with_places(spec: JobSpec, script: str) -> JobSpec:
    stages = []
    for stage in spec.stages:
        line, column = _place(script, stage.source)
        stages.append(msgspec.structs.replace(stage, line=line, column=column))
    input_line, input_column = _place(script, spec.input_source)
    return msgspec.structs.replace(spec, stages=stages, input_line=input_line, input_column=input_column)


def extract_spec(script: str, *, time_limit: float = TIME_LIMIT, memory_limit: int = MEMORY_LIMIT) -> JobSpec:
    """Evaluate a job script against the recording SDK and return its validated spec.

    Raises ScriptError for anything wrong with the script: size, syntax, an exception at the top
    level, no execution.start(jobRunner), a field out of range, the time or memory limit.
    Blocking: call it from a worker thread (or use extract_spec_async)."""
    try:
        size = len(script.encode("utf-8"))
    except UnicodeEncodeError:
        raise ScriptError("the script contains text that is not valid Unicode") from None
    if size > MAX_SCRIPT_BYTES:
        raise ScriptError(f"the script is larger than {MAX_SCRIPT_BYTES >> 20} MiB ({size} bytes)")
    if hasattr(os, "fork"):
        text = _evaluate_in_child(script, time_limit, memory_limit)
    else:  # no fork (Windows): the isolate's own limits only
        text = _evaluate(script, time_limit, memory_limit)
    if too_deep(text):  # a value the script built, nested deeper than json.loads can recurse
        raise ScriptError(f"the job the script declares nests arrays or objects more than {MAX_DEPTH} levels deep")
    try:
        outcome = json.loads(text)
        started, record = outcome["started"], outcome["record"]
    except (ValueError, TypeError, KeyError):
        raise ScriptError("the script replaced parts of the job SDK") from None
    if not started:
        raise ScriptError("the script never calls execution.start(jobRunner)")
    try:
        return _with_places(_spec_from_record(record), script)
    except _Invalid as exc:
        at = _location(record, exc.where)
        raise ScriptError(exc.message, at and at["line"], at and at["column"]) from None
    except (KeyError, TypeError, IndexError):
        raise ScriptError("the script replaced parts of the job SDK") from None


async def extract_spec_async(
    script: str, *, time_limit: float = TIME_LIMIT, memory_limit: int = MEMORY_LIMIT
) -> JobSpec:
    """extract_spec in a worker thread."""
    return await asyncio.to_thread(extract_spec, script, time_limit=time_limit, memory_limit=memory_limit)
