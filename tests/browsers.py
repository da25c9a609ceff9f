"""Chromium for the tests and the benches: Debian's build with the flags every test gives it, launched
by Playwright or as a process of our own (whose pid we know, to stop it), worker tabs, a tab slowed
through the DevTools protocol, and Chromium's processes found in /proc."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import httpx
from playwright.sync_api import Browser, BrowserContext, BrowserType, expect
from playwright.sync_api import Error as PlaywrightError

from tests.cpu_groups import CpuGroup
from tests.support import Appliance, free_port

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    # The test machine is loaded (its CPU pressure is often critical), which would pause every worker
    # tab; tests/e2e/test_worker_courtesy.py emulates pressure in a browser of its own instead.
    "--disable-blink-features=ComputePressure",
]


def launch(browser_type: BrowserType, *, extra: Sequence[str] = (), without: Sequence[str] = ()) -> Browser:
    """Debian's Chromium, headless, with the standard flags less those containing any of ``without``,
    and ``extra``."""
    args = [arg for arg in CHROMIUM_ARGS if not any(part in arg for part in without)]
    return browser_type.launch(executable_path=CHROMIUM, args=[*args, *extra], headless=True)


def launch_persistent(browser_type: BrowserType, profile: Path | str, **options) -> BrowserContext:
    """Debian's Chromium, headless with the standard flags, on the profile directory ``profile`` (its
    storage outlives the browser); ``options`` go to Playwright's launch_persistent_context."""
    return browser_type.launch_persistent_context(
        str(profile), executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True, **options
    )


def chromium_pids(kind: str | None = None, *, marker: str = "", among: Iterable[int] | None = None) -> list[int]:
    """Chromium's processes (of those in ``among``, default all) whose command line holds ``marker`` (a
    profile directory, say): of ``kind`` (``renderer``, ``gpu-process``...), or with no kind the
    browser processes, which have no --type= (/usr/bin/chromium, a shell script, and the crash handlers
    are none of them)."""
    wanted = re.compile(rb"--type=" + re.escape(kind.encode()) + rb"(?![\w-])") if kind else None
    found = []
    for pid in among if among is not None else (int(entry) for entry in os.listdir("/proc") if entry.isdigit()):
        try:
            # Chromium's child processes rewrite theirs as one string: search it whole, not by argument.
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue  # ended meanwhile
        program = os.path.basename(command.split(b"\0", 1)[0].split(b" ", 1)[0])
        if program not in (b"chromium", b"chrome") or marker.encode() not in command:
            continue
        if wanted.search(command) if wanted else b"--type=" not in command:
            found.append(pid)
    return found


class Workers:
    """Worker tabs of the appliance, each in its own browser context (own cookies and IndexedDB)."""

    def __init__(self, browser: Browser, appliance: Appliance, token: str):
        self.browser, self.appliance, self.token = browser, appliance, token
        self.tabs: list = []

    def add(self, count: int = 1) -> None:
        """Open ``count`` tabs, then wait until each is connected (they connect side by side)."""
        opened = []
        for _ in range(count):
            page = self.browser.new_context().new_page()
            page.goto(f"{self.appliance.url}/worker/start#token={self.token}")
            opened.append(page)
        for page in opened:
            expect(page.locator("#connection")).to_have_text("connected", timeout=60_000)
            self.tabs.append(page)

    def close(self, page) -> None:
        self.tabs.remove(page)
        page.context.close()

    def busy(self) -> list:
        return [t for t in self.tabs if t.evaluate("window.peermrWorker.state") == "busy"]


class LoneChromium:
    """A headless Chromium launched here (not by Playwright) and reached over CDP, so that we know the
    pid of its browser process: stopping that process (SIGSTOP) leaves its renderers running. Given
    a CPU group (tests/cpu_groups.py), it and all its processes run in it: a machine whose share of
    the CPU the group's quota sets."""

    def __init__(self, browser_type: BrowserType, cpu_group: CpuGroup | None = None):
        self.profile = tempfile.mkdtemp(prefix="peermr-lone-chromium-")
        self.port = free_port()
        argv = [
            CHROMIUM,
            *CHROMIUM_ARGS,
            "--headless",
            f"--remote-debugging-port={self.port}",
            f"--user-data-dir={self.profile}",
            "--no-first-run",
            "about:blank",
        ]
        self.proc = subprocess.Popen(
            cpu_group.command(argv) if cpu_group else argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{self.port}/json/version", timeout=2).raise_for_status()
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("the lone Chromium did not start") from None
                time.sleep(0.2)
        self.browser = browser_type.connect_over_cdp(f"http://127.0.0.1:{self.port}")
        found = chromium_pids(marker=f"--user-data-dir={self.profile}")
        assert len(found) == 1, f"browser processes of the lone Chromium: {found}"
        self.pid = found[0]

    def renderers(self) -> list[int]:
        return chromium_pids("renderer", marker=self.profile)

    def stop_main(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def continue_main(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def close(self) -> None:
        self.continue_main()
        try:
            self.browser.close()
        except PlaywrightError:
            pass
        for pid in (self.pid, self.proc.pid):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)


class Throttle:
    """A tab slowed ``rate`` times through the DevTools protocol (the page's CDP session): its main
    thread by ``Emulation.setCPUThrottlingRate``, its dedicated workers (where tasks run, and which
    Chromium refuses that command for: "Operation is only supported for pages, not workers") by
    ``Debugger.pause`` for (rate - 1) / rate of every ``period`` seconds. Call ``wait`` instead of
    sleeping while it should hold."""

    def __init__(self, page, rate: int, period: float = 0.5):
        self.page, self.rate, self.period = page, rate, period
        self.session = page.context.new_cdp_session(page)
        self.session.send("Emulation.setCPUThrottlingRate", {"rate": rate})
        self.workers: set[str] = set()
        self.sent = 0
        self.session.on("Target.attachedToTarget", self._attached)
        self.session.on("Target.detachedFromTarget", lambda event: self.workers.discard(event.get("sessionId")))
        # Not flattened: the workers' sessions are reached through this one (Target.sendMessageToTarget).
        self.session.send(
            "Target.setAutoAttach", {"autoAttach": True, "waitForDebuggerOnStart": False, "flatten": False}
        )

    def _to(self, session_id: str, method: str) -> None:
        self.sent += 1
        message = json.dumps({"id": self.sent, "method": method, "params": {}})
        try:
            self.session.send("Target.sendMessageToTarget", {"sessionId": session_id, "message": message})
        except PlaywrightError:
            self.workers.discard(session_id)  # the worker ended meanwhile

    def _attached(self, event: dict) -> None:
        if event["targetInfo"]["type"] == "worker":
            self.workers.add(event["sessionId"])
            self._to(event["sessionId"], "Debugger.enable")
            self._to(event["sessionId"], "Debugger.pause")  # slow from its start

    def wait(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for session_id in list(self.workers):
                self._to(session_id, "Debugger.pause")
            self.page.wait_for_timeout(1000 * self.period * (self.rate - 1) / self.rate)
            for session_id in list(self.workers):
                self._to(session_id, "Debugger.resume")
            self.page.wait_for_timeout(1000 * self.period / self.rate)

    def stop(self) -> None:
        for session_id in list(self.workers):
            self._to(session_id, "Debugger.resume")
        try:
            self.session.send("Emulation.setCPUThrottlingRate", {"rate": 1})
            self.session.send("Target.setAutoAttach", {"autoAttach": False, "waitForDebuggerOnStart": False})
            self.session.detach()
        except PlaywrightError:
            pass
