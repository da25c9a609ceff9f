"""static/worker/protocol.js, the worker page's copy of the message contracts: it is what the generator
writes from appliance/fleet/protocol.py and sandbox_messages.py, it holds every message, and the page's
scripts take their limits from it instead of declaring them again."""

from __future__ import annotations

import json
import re
from pathlib import Path

import msgspec
import pytest
from py_mini_racer import MiniRacer

from appliance.fleet import protocol, protocol_js, sandbox_messages

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "static" / "worker"
LIMIT_KEYS = {"minLength", "maxLength", "gt", "ge", "lt", "le"}


@pytest.fixture(scope="module")
def v8():
    """protocol.js evaluated (its exports as globals)."""
    ctx = MiniRacer()
    ctx.eval(re.sub(r"^export const ", "var ", protocol_js.target().read_text(), flags=re.M))
    yield ctx
    ctx.close()


def js(ctx: MiniRacer, expression: str):
    return json.loads(ctx.eval(f"JSON.stringify(({expression}) ?? null)"))


def tagged_structs(module) -> dict[type, str]:
    """The module's own message structs (tagged, and not the base of others) -> their tag."""
    return {
        value: value.__struct_config__.tag
        for value in vars(module).values()
        if isinstance(value, type)
        and issubclass(value, msgspec.Struct)
        and value.__module__ == module.__name__
        and value.__struct_config__.tag is not None
        and not value.__subclasses__()
    }


def wire_names(cls: type) -> list[str]:
    return [field.encode_name for field in msgspec.inspect.type_info(cls).fields]


def test_protocol_js_is_what_the_generator_writes_now():
    assert protocol_js.target().read_text() == protocol_js.render(), (
        "static/worker/protocol.js is out of date: run `python -m appliance.fleet.protocol_js`"
    )


def shapes(directions: dict[str, dict[str, tuple[str, dict]]]) -> dict:
    """The generator's messages without what each is for (protocol.js has that as comments)."""
    return {
        direction: {tag: shape for tag, (_, shape) in messages.items()} for direction, messages in directions.items()
    }


def test_protocol_js_evaluates_to_the_shapes_and_limits_of_the_msgspec_types(v8):
    assert js(v8, "SOCKET_MESSAGES") == shapes(protocol_js.socket_messages())
    assert js(v8, "SANDBOX_MESSAGES") == shapes(protocol_js.sandbox_channel_messages())
    assert js(v8, "[MAX_MESSAGE_BYTES, MAX_VALUE_BYTES, WORKER_ID_PATTERN, MAX_DIRECT_BYTES, MAX_LOG_LINES]") == [
        protocol.MAX_MESSAGE_BYTES,
        protocol.MAX_VALUE_BYTES,
        protocol.WORKER_ID_PATTERN,
        sandbox_messages.MAX_DIRECT_BYTES,
        sandbox_messages.MAX_LOG_LINES,
    ]
    # A limit from a msgspec Meta, a default, and a nested struct's field, as the page reads them.
    assert js(v8, "SOCKET_MESSAGES.workerToAppliance['task-failed'].stack") == {
        "type": "str",
        "maxLength": 8000,
        "optional": True,
        "default": "",
    }
    assert js(v8, "SOCKET_MESSAGES.workerToAppliance['task-log'].lines.items.fields.level.values") == [
        "error",
        "info",
        "warn",
    ]


def test_every_websocket_message_is_in_protocol_js_in_its_direction_with_its_fields(v8):
    from_worker = set(protocol.incoming_decoder.type.__args__) | set(protocol.binary_header_decoder.type.__args__)
    messages = tagged_structs(protocol)
    assert len(messages) > 40
    for cls, tag in messages.items():
        direction = "workerToAppliance" if cls in from_worker else "applianceToWorker"
        shape = js(v8, f"SOCKET_MESSAGES.{direction}[{json.dumps(tag)}]")
        assert shape is not None, f"{cls.__name__} ({tag}) is not in protocol.js"
        assert list(shape) == wire_names(cls), cls.__name__


def test_every_sandbox_message_is_in_protocol_js_with_its_fields(v8):
    messages = tagged_structs(sandbox_messages)
    in_channels = {
        cls: channel
        for channel, union in sandbox_messages.CHANNELS.items()
        for cls in getattr(union, "__args__", (union,))
    }
    assert set(messages) == set(in_channels), "every sandbox message is in one of CHANNELS"
    for cls, tag in messages.items():
        shape = js(v8, f"SANDBOX_MESSAGES.{in_channels[cls]}[{json.dumps(tag)}]")
        assert shape is not None and list(shape) == wire_names(cls), cls.__name__


def limits_and_enums(value, limits: set, enums: list) -> None:
    if isinstance(value, dict):
        if value.get("type") == "enum":
            enums.append(set(value["values"]))
        for key, inner in value.items():
            if key in LIMIT_KEYS and isinstance(inner, int):
                limits.add(inner)
            limits_and_enums(inner, limits, enums)
    elif isinstance(value, list):
        for inner in value:
            limits_and_enums(inner, limits, enums)


def test_tasks_js_declares_no_limit_that_protocol_js_exports(v8):
    exported = set(re.findall(r"^export const (\w+) =", protocol_js.target().read_text(), flags=re.M))
    limits, enums = {v for v in js(v8, f"[{', '.join(sorted(exported))}]") if isinstance(v, int)}, []
    limits_and_enums(js(v8, "[SOCKET_MESSAGES, SANDBOX_MESSAGES]"), limits, enums)
    tasks = (WORKER / "tasks.js").read_text()
    assert "from './protocol.js';" in tasks
    for name, expression in re.findall(r"^const (\w+) = (.+);$", tasks, flags=re.M):
        assert name not in exported, f"tasks.js declares {name} again: import it from './protocol.js'"
        if re.fullmatch(r"[\d_ *+()-]+", expression) and not name.endswith("_MS"):  # durations are the page's own
            assert v8.eval(expression.replace("_", "")) not in limits, f"tasks.js: {name} = {expression}"
        for strings in re.findall(r"\[('[^']*'(?:, '[^']*')*)\]", expression):
            assert set(re.findall(r"'([^']*)'", strings)) not in enums, f"tasks.js: {name} = {expression}"


# Classic scripts cannot import a module (sandbox.js runs in the sandbox's importScripts), and peers.js
# and datanode.js are not converted yet: their own copies must at least say the same.
COPIES = {
    "sandbox.js": {
        "MAX_TEXT": "SOCKET_MESSAGES.workerToAppliance['task-failed'].error.maxLength",
        "MAX_STACK": "SOCKET_MESSAGES.workerToAppliance['task-failed'].stack.maxLength",
        "MAX_LOG_LINES": "MAX_LOG_LINES",
        "MAX_WORKER_TIMEOUT": "SANDBOX_MESSAGES.sandboxToPage['worker-timeout'].seconds.le",
        "MAX_TAG": "SANDBOX_MESSAGES.sandboxToPage['peer-send'].tag.maxLength",
        "MAX_DIRECT": "MAX_DIRECT_BYTES",
        "MAX_PS_VALUE": "SANDBOX_MESSAGES.sandboxToPage.ps.data.maxLength",
        "PS_FUNCTIONS": "SANDBOX_MESSAGES.sandboxToPage.ps.fn.values",
    },
    "peers.js": {
        "MAX_TAG": "SOCKET_MESSAGES.workerToAppliance['peer-send'].tag.maxLength",
        "MAX_DIRECT": "MAX_DIRECT_BYTES",
    },
}


@pytest.mark.parametrize("script", sorted(COPIES))
def test_scripts_that_cannot_import_protocol_js_hold_the_same_limits(v8, script):
    text = (WORKER / script).read_text()
    for name, contract in COPIES[script].items():
        match = re.search(rf"^\s*const {name} = (.+?);", text, flags=re.M)
        assert match, f"{script} no longer declares {name}: drop it here"
        assert js(v8, match.group(1).replace("_", "")) == js(v8, contract), f"{script}: {name}"
    if script == "sandbox.js":
        dtypes = re.search(r"const DTYPES = (\{.*?\});", text, flags=re.S).group(1)
        assert sorted(js(v8, f"Object.keys({dtypes})")) == js(v8, "SANDBOX_MESSAGES.sandboxToPage.ps.dtype.values")


def test_docs_list_every_sandbox_message():
    docs = (ROOT / "docs" / "protocol.md").read_text()
    section = docs[docs.index("#### The page and its sandboxes") :]
    section = section[: section.index("\n#")]
    for channel, union in sandbox_messages.CHANNELS.items():
        for cls in getattr(union, "__args__", (union,)):
            tag = cls.__struct_config__.tag
            assert f"`{tag}`" in section, f"docs/protocol.md does not list {channel} {tag}"
