"""A job script run in V8 against the recording SDK (recording_sdk.js), which records the job it
declares, its errors mapped back to the line and column of the job script.

Isolation. V8 cannot always stop a script in time: a builtin such as ``new Array(2**30).fill(0)``
ignores termination requests and ends the whole process with a fatal out-of-memory error, and
ArrayBuffer memory is not counted by the isolate's heap limit. So on POSIX each extraction runs in
a forked child process with a watchdog (wall clock and memory growth); whatever the script does,
the appliance sees a result, a ScriptError, or a dead child that it reports as one. V8 itself is
initialised once in the parent (it starts no threads), so a child only creates its own isolate.
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
from typing import Any, NoReturn

from py_mini_racer import (
    JSEvalException,
    JSOOMException,
    JSParseException,
    JSTimeoutException,
    MiniRacer,
    init_mini_racer,
)

from appliance.errors import InvalidRequest

log = logging.getLogger(__name__)


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


def evaluate(script: str, time_limit: float, memory_limit: int) -> str:
    """The JSON text the recording SDK gives for the script: ``{"started": ..., "record": ...}``."""
    if hasattr(os, "fork"):
        return _evaluate_in_child(script, time_limit, memory_limit)
    return _evaluate(script, time_limit, memory_limit)  # no fork (Windows): the isolate's own limits only
