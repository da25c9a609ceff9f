"""`peermr worker`: headless Chromium workers for a server fleet.

Each worker is one Chromium process with its own profile under the data
directory, so its PMRFS blobs (IndexedDB) and its worker id survive a restart.
A process that exits is started again (with a growing pause if it keeps
failing); Ctrl-C or SIGTERM stops them all. With ``--gpu`` the browsers get
WebGPU: the machine's GPU through Vulkan, or a software adapter (SwiftShader)
where there is none, which runs only the GPU jobs an admin allows on software
adapters (Admin → Settings).

The token never reaches a browser's command line or a URL: the runner exchanges it for a worker
session itself (as /worker/start does in a tab) and hands each browser the session's cookie and its
worker id over a DevTools pipe (devtools.py) before opening /worker. Through the same pipe it reads
each page's state: a browser that has not joined within JOIN_SECONDS stops the runner with the
page's reason.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from pathlib import Path
from urllib.parse import quote, urlsplit

import httpx

from appliance import __version__
from appliance.errors import ServiceError
from appliance.fleet.devtools import DevToolsError, DevToolsPipe

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CHROMIUM_FLAGS = [
    "--headless",
    "--disable-gpu",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    # A worker page is never the visible tab: do not let the browser throttle it.
    "--disable-background-timer-throttling",
    "--disable-renderer-backgrounding",
    "--remote-debugging-pipe",
]
# --ignore-busy: a machine given over to work, whose load is the work, not a person's to spare: without
# the Compute Pressure API its pages never pause for a busy computer (as Admin → Settings can do for all).
IGNORE_BUSY_FLAGS = ["--disable-blink-features=ComputePressure"]
# --gpu: WebGPU in headless Chromium (Linux needs the unsafe flag and Vulkan); no --disable-gpu.
GPU_FLAGS = ["--enable-unsafe-webgpu", "--enable-features=Vulkan"]
MAX_BACKOFF = 60.0
JOIN_SECONDS = 30.0
# What a worker page shows of its connection (static/worker/runtime.js, templates/fleet/worker.html).
PAGE_STATE = """({path: location.pathname,
  connection: document.getElementById('connection')?.textContent || '',
  note: document.getElementById('note')?.textContent || document.getElementById('start-status')?.textContent || ''})"""
CSRF_RE = re.compile(r'"x-csrftoken": "([^"]+)"')


class RunnerError(ServiceError):
    """Workers cannot be started; `peermr worker` prints why."""


def find_chromium(explicit: str | None) -> str:
    if explicit:
        if not (Path(explicit).is_file() and os.access(explicit, os.X_OK)):
            raise RunnerError(f"{explicit} is not an executable Chromium")
        return explicit
    for name in CHROMIUM_NAMES:
        if path := shutil.which(name):
            return path
    raise RunnerError(
        "Chromium was not found on the PATH. Install it (Debian/Ubuntu: sudo apt-get install chromium) "
        "or give its path with --chromium."
    )


def check_token(server: str, token: str) -> None:
    """Refuse early, with a clear message, a token the appliance would refuse."""
    try:
        if token.startswith("pmr_"):
            response = httpx.get(f"{server}/api/v1/me", headers={"Authorization": f"Bearer {token}"}, timeout=15)
            ok = response.status_code == 200
        elif token.startswith("enr_"):
            ok = httpx.get(f"{server}/enrol/{quote(token)}", timeout=15).status_code == 200
        else:
            raise RunnerError("the token must be an API token (pmr_...) or an enrolment token (enr_...)")
    except httpx.HTTPError as exc:
        raise RunnerError(f"cannot reach {server}: {exc}") from exc
    if not ok:
        raise RunnerError("the appliance refused this token (revoked, expired or used up)")


def worker_cookies(server: str, token: str) -> list[dict]:
    """A new worker session's cookies for the token, as DevTools cookie parameters: what a tab's
    /worker/start gets from POST /worker/session. Refused with why, as the worker page would be:
    the account must still change its one-time password, for one."""
    try:
        # The sessions page and the sign-in log show who made the session.
        agent = {"user-agent": f"peermr-worker/{__version__}"}
        with httpx.Client(base_url=server, timeout=15, headers=agent) as client:
            csrf = CSRF_RE.search(client.get("/worker/start").text)
            response = client.post(
                "/worker/session", json={"token": token}, headers={"x-csrftoken": csrf.group(1) if csrf else ""}
            )
            if response.status_code != 204:
                raise RunnerError(f"the appliance refused a worker session: {response.text[:200]}")
            cookies = SimpleCookie()
            for header in response.headers.get_list("set-cookie"):
                cookies.load(header)
            page = client.get("/worker")  # with the cookie the client keeps: what the browser will open
    except httpx.HTTPError as exc:
        raise RunnerError(f"cannot reach {server}: {exc}") from exc
    if page.headers.get("location", "").startswith("/ui/account/password"):
        raise RunnerError(
            f"the account must change its one-time password first: sign in at {server}/login with it once, "
            "then start the workers again"
        )
    if page.status_code != 200:
        raise RunnerError(f"the appliance refused the worker page ({page.status_code})")
    expires = time.time() + 86400
    return [
        {
            "name": name,
            "value": morsel.value,
            "url": server + "/",
            "path": "/",
            "httpOnly": bool(morsel["httponly"]),
            "secure": bool(morsel["secure"]),
            "sameSite": (morsel["samesite"] or "Lax").capitalize(),
            "expires": time.time() + int(morsel["max-age"]) if morsel["max-age"] else expires,
        }
        for name, morsel in cookies.items()
    ]


@dataclass
class Worker:
    index: int
    profile: Path
    worker_id: str
    process: subprocess.Popen | None = None
    failures: int = 0
    restart_at: float = 0.0
    started_at: float = field(default=0.0)
    pipe: DevToolsPipe | None = None
    session: str = ""  # the DevTools session of its worker page


def _worker_id(profile: Path) -> str:
    path = profile / "peermr-worker-id"
    if not path.exists():
        profile.mkdir(parents=True, exist_ok=True)
        path.write_text(uuid.uuid4().hex)
    return path.read_text().strip()


def user_environment() -> dict[str, str]:
    """The environment the user started `peermr` with, for Chromium: the binary (PyInstaller) points
    LD_LIBRARY_PATH at its own libraries, keeps the user's in LD_LIBRARY_PATH_ORIG, and adds _PYI_*
    variables of its own."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("_PYI_")}
    if getattr(sys, "frozen", False):
        original = env.pop("LD_LIBRARY_PATH_ORIG", None)
        if original is None:
            env.pop("LD_LIBRARY_PATH", None)
        else:
            env["LD_LIBRARY_PATH"] = original
    return env


class Runner:
    def __init__(
        self,
        server: str,
        token: str,
        count: int,
        chromium: str,
        data_dir: Path,
        gpu: bool = False,
        ignore_busy: bool = False,
    ):
        self.server = server.rstrip("/")
        self.token = token
        self.chromium = chromium
        self.gpu = gpu
        self.ignore_busy = ignore_busy
        self.workers = [
            Worker(i, profile, _worker_id(profile))
            for i in range(count)
            for profile in [data_dir / "worker-profiles" / f"worker-{i}"]
        ]
        self.stopping = False

    def _command(self, worker: Worker) -> list[str]:
        flags = [f for f in CHROMIUM_FLAGS if f != "--disable-gpu"] + GPU_FLAGS if self.gpu else list(CHROMIUM_FLAGS)
        flags += IGNORE_BUSY_FLAGS if self.ignore_busy else []
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            flags.append("--no-sandbox")  # Chromium refuses to run as root with its sandbox
        return [self.chromium, *flags, f"--user-data-dir={worker.profile}", "about:blank"]

    def _start(self, worker: Worker) -> None:
        self._open(worker, self._launch(worker))

    def _launch(self, worker: Worker) -> list[dict]:
        """Start the browser; the worker session's cookies it is to be given."""
        cookies = worker_cookies(self.server, self.token)
        worker.pipe = DevToolsPipe()
        # close_fds=False: the pipe's ends must stay at fds 3 and 4 (our own fds are not inheritable).
        worker.process = subprocess.Popen(
            self._command(worker),
            env=user_environment(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=False,
            preexec_fn=worker.pipe.child_fds,
        )
        worker.pipe.started()
        worker.started_at = time.monotonic()
        print(f"worker {worker.index}: started (pid {worker.process.pid}, id {worker.worker_id})", flush=True)
        return cookies

    def _open(self, worker: Worker, cookies: list[dict]) -> None:
        try:
            worker.session = open_worker_page(worker.pipe, self.server, worker.worker_id, cookies)
        except DevToolsError as exc:
            print(f"worker {worker.index}: could not open the worker page: {exc}", flush=True)
            worker.process.kill()  # the loop below restarts it

    def _wait_until_joined(self) -> None:
        """Every browser's page says "connected" within JOIN_SECONDS, or the runner stops with why."""
        waiting = {worker.index: worker for worker in self.workers}
        deadline = time.monotonic() + JOIN_SECONDS
        states: dict[int, dict] = {}
        while waiting and not self.stopping:
            for index, worker in list(waiting.items()):
                states[index] = page_state(worker)
                if states[index].get("connection") == "connected":
                    del waiting[index]
                elif worker.process.poll() is not None:  # a browser that cannot start says so at once
                    code = worker.process.returncode
                    raise RunnerError(f"worker {index}'s Chromium exited ({code}) before it joined")
            if waiting and time.monotonic() > deadline:
                index = next(iter(waiting))
                why = not_joined(states[index])
                raise RunnerError(f"worker {index} did not join within {JOIN_SECONDS:.0f} s: {why}")
            time.sleep(0.5)
        print(f"{len(self.workers)} worker{'s' if len(self.workers) != 1 else ''} joined", flush=True)

    def run(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: setattr(self, "stopping", True))
        try:
            # All browsers start before any page opens: they start side by side and join close together.
            cookies = [self._launch(worker) for worker in self.workers]
            for worker, given in zip(self.workers, cookies, strict=True):
                self._open(worker, given)
            self._wait_until_joined()
            self._keep_running()
        finally:
            self.stop()

    def _keep_running(self) -> None:
        while not self.stopping:
            time.sleep(0.5)
            now = time.monotonic()
            for worker in self.workers:
                if worker.process and worker.pipe:
                    worker.pipe.drain()
                if worker.process and worker.process.poll() is not None:
                    code = worker.process.returncode
                    # A browser that ran for a while and then died is restarted at once; one that keeps dying waits.
                    worker.failures = 0 if now - worker.started_at > 60 else worker.failures + 1
                    delay = min(MAX_BACKOFF, 2.0**worker.failures - 1)
                    print(f"worker {worker.index}: Chromium exited ({code}); restarting in {delay:.0f} s", flush=True)
                    worker.process = None
                    worker.pipe.close()
                    worker.restart_at = now + delay
                if worker.process is None and now >= worker.restart_at:
                    try:
                        self._start(worker)
                    except RunnerError as exc:  # the appliance is away for now: try again later
                        print(f"worker {worker.index}: {exc}; trying again in {MAX_BACKOFF:.0f} s", flush=True)
                        worker.restart_at = now + MAX_BACKOFF

    def stop(self) -> None:
        for worker in self.workers:
            if worker.process and worker.process.poll() is None:
                worker.process.terminate()
        for worker in self.workers:
            if worker.process:
                try:
                    worker.process.wait(10)
                except subprocess.TimeoutExpired:
                    worker.process.kill()
            if worker.pipe:
                worker.pipe.close()
        print("all workers stopped", flush=True)


def open_worker_page(pipe: DevToolsPipe, server: str, worker_id: str, cookies: list[dict]) -> str:
    """Give the browser its worker cookie and worker id, open /worker in its tab, and return the
    DevTools session of that tab."""
    pipe.call("Storage.setCookies", {"cookies": cookies})
    deadline = time.monotonic() + JOIN_SECONDS  # a loaded machine may take long to start a browser
    while not (pages := [t for t in pipe.call("Target.getTargets")["targetInfos"] if t["type"] == "page"]):
        if time.monotonic() > deadline:
            raise DevToolsError("the browser opened no tab")
        time.sleep(0.1)
    session = pipe.call("Target.attachToTarget", {"targetId": pages[0]["targetId"], "flatten": True})["sessionId"]
    # The id the page keeps in sessionStorage (static/worker/runtime.js), as /worker/start sets it from #worker=.
    origin = "{0.scheme}://{0.netloc}".format(urlsplit(server))
    source = (
        f"if (location.origin === {json.dumps(origin)}) "
        f"sessionStorage.setItem('peermr-worker-id', {json.dumps(worker_id)});"
    )
    pipe.call("Page.enable", {}, session)  # scripts for new documents run only while it is
    pipe.call("Page.addScriptToEvaluateOnNewDocument", {"source": source}, session)
    pipe.call("Page.navigate", {"url": f"{server}/worker"}, session)
    # The tab keeps the id across reloads: once it holds it, no events need to come down the pipe.
    while evaluate(pipe, session, "sessionStorage.getItem('peermr-worker-id')") != worker_id:
        if time.monotonic() > deadline:
            raise DevToolsError("the worker page did not take its worker id")
        time.sleep(0.2)
    pipe.call("Page.disable", {}, session)
    return session


def evaluate(pipe: DevToolsPipe, session: str, expression: str):
    """The value of a JavaScript expression in the tab; None while it cannot say (a page loading)."""
    result = pipe.call("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session, timeout=5)
    return result.get("result", {}).get("value")


def page_state(worker: Worker) -> dict:
    """Where the worker page is and what it says of its connection; what went wrong, when it cannot say."""
    if not worker.session:
        return {"problem": "its page did not open"}
    try:
        state = evaluate(worker.pipe, worker.session, PAGE_STATE)
    except DevToolsError as exc:
        return {"problem": str(exc)}
    return state or {"problem": "its page did not answer"}


def not_joined(state: dict) -> str:
    if problem := state.get("problem"):
        return problem
    if state.get("path") != "/worker":
        return f"its page went to {state.get('path')} instead of staying on /worker"
    return "; ".join(filter(None, [f"its page says {state.get('connection') or 'nothing'}", state.get("note")]))


def run_workers(
    server: str,
    token: str,
    count: int,
    chromium: str | None,
    data_dir: Path,
    gpu: bool = False,
    ignore_busy: bool = False,
) -> None:
    if count < 1:
        raise RunnerError("--count must be at least 1")
    binary = find_chromium(chromium)
    check_token(server.rstrip("/"), token)
    with_gpu = " with WebGPU" if gpu else ""
    print(f"Starting {count} worker{'s' if count != 1 else ''}{with_gpu} for {server} with {binary}", flush=True)
    Runner(server, token, count, binary, data_dir, gpu, ignore_busy).run()
    sys.stdout.flush()
