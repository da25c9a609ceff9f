"""Job specs: what a job script declares, extracted when the job is saved (docs/sdk.md; docs/architecture.md, Jobs).

A job script is JavaScript written against the PeerMR SDK. Saving a job evaluates it against a
recording SDK (``recording_sdk.js``) in a fresh V8 isolate (mini-racer) with a time limit and a
memory limit: nothing runs, the SDK only records the execution's fields, the input function and
the stages, with functions kept as their source text. The record is validated here and becomes a
:class:`JobSpec`, or the script is refused with a :class:`ScriptError` that names the line.

The script runs in a child process with its limits (script_eval.py).

Use :func:`extract_spec` from a worker thread (it blocks for up to the time limit plus a few
seconds) or :func:`extract_spec_async`.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Annotated, Any, Literal, get_args
from urllib.parse import urlsplit

import msgspec

from appliance.jobs.sandbox_policy import is_appliance_path
from appliance.jobs.script_eval import ScriptError, evaluate
from appliance.jobs.stage_talks import talks_to_ranks
from appliance.json_depth import MAX_DEPTH, too_deep

StorageType = Literal["pmrfs", "s3", "gcs"]
ContentType = Literal["application/json", "text/csv", "application/bson"]
StageKind = Literal["map", "reduce"]
StageChunks = Literal["auto", "rank"]

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
    # How a map's input is cut: "auto" lets the engine split each rank's share into chunks that free
    # workers take (a map feeding a reduce runs them as ranges, split on demand: execution.py);
    # "rank", one task per rank.
    chunks: StageChunks = "auto"
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
    chunks = _choice(value["chunks"]["value"], get_args(StageChunks), f"chunks of {label}", f"stages[{index}].chunks")
    return StageSpec(
        kind=value["kind"],
        source=value["source"],
        content_type=content_type,
        timeout=timeout,
        combine=combine,
        chunks=chunks,
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
                "chunks": {"value": stage.chunks, "at": None},
            }
            for stage in spec.stages
        ],
    }
    try:
        _spec_from_record(record)
    except _Invalid as exc:
        raise ScriptError(exc.message) from None
    return spec


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
    text = evaluate(script, time_limit, memory_limit)
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
