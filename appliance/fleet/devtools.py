"""Chromium's DevTools protocol over ``--remote-debugging-pipe``: how `peermr worker` hands a browser
its worker cookie and worker id, and reads whether its page joined, without a token in argv or a URL.

Chromium reads commands from its fd 3 and writes answers and events to its fd 4, each message JSON
ended by a NUL byte. The pipes are this process's alone (``ps`` and /proc/PID/cmdline show nothing
of them). Chromium exits when its end of the pipe closes, so the pipe lives as long as the browser.
"""

from __future__ import annotations

import json
import os
import select
import time

from appliance.errors import ServiceError

# Chromium's fds for the pipe, fixed by --remote-debugging-pipe.
BROWSER_READS, BROWSER_WRITES = 3, 4


class DevToolsError(ServiceError):
    """The browser did not answer a DevTools command, or answered it with an error."""


class DevToolsPipe:
    def __init__(self) -> None:
        self._browser_in, self._commands = os.pipe()
        self._answers, self._browser_out = os.pipe()
        self._buffer = b""
        self._next_id = 0

    def child_fds(self) -> None:
        """In the browser's process before exec (Popen's preexec_fn): the pipe's ends at fds 3 and 4."""
        # Copies first: an end may already sit at 3 or 4, which the first dup2 would overwrite.
        reads, writes = os.dup(self._browser_in), os.dup(self._browser_out)
        os.dup2(reads, BROWSER_READS)
        os.dup2(writes, BROWSER_WRITES)

    def started(self) -> None:
        """Once the browser runs: close our copies of its ends, so that its exit ends our reads."""
        os.close(self._browser_in)
        os.close(self._browser_out)

    def close(self) -> None:
        for fd in (self._commands, self._answers):
            try:
                os.close(fd)
            except OSError:
                pass

    def call(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 15) -> dict:
        """Send a command and return its result, skipping the events that come before it."""
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        try:
            os.write(self._commands, json.dumps(message).encode() + b"\0")
        except BrokenPipeError:  # not peermr's own stdout, which the CLI takes a broken pipe for
            raise DevToolsError(f"the browser exited before it took {method}") from None
        deadline = time.monotonic() + timeout
        while True:
            answer = self._read(deadline, method)
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise DevToolsError(f"{method}: {answer['error'].get('message', answer['error'])}")
                return answer.get("result", {})

    def drain(self) -> None:
        """Read and drop whatever the browser sent unasked (events), so that the pipe never fills and
        stalls it; called while the runner only watches its browsers."""
        while select.select([self._answers], [], [], 0)[0]:
            try:
                chunk = os.read(self._answers, 1 << 16)
            except OSError:
                return
            if not chunk:
                return
            self._buffer = (self._buffer + chunk).rpartition(b"\0")[2]

    def _read(self, deadline: float, method: str) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._answers], [], [], left)[0]:
                raise DevToolsError(f"the browser did not answer {method}")
            chunk = os.read(self._answers, 1 << 16)
            if not chunk:
                raise DevToolsError(f"the browser exited before it answered {method}")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)
