"""`peermr worker`: headless Chromium workers for a server fleet.

Each worker is one Chromium process with its own profile under the data
directory, so its PMRFS blobs (IndexedDB) and its worker id survive a restart.
A process that exits is started again (with a growing pause if it keeps
failing); Ctrl-C or SIGTERM stops them all. With ``--gpu`` the browsers get
WebGPU: the machine's GPU through Vulkan, or a software adapter (SwiftShader)
where there is none, which runs only the GPU jobs an admin allows on software
adapters (Admin → Settings).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import httpx

from appliance.errors import ServiceError

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
    # A machine given over to work: its load is the work, not a person's to spare (no pressure pauses).
    "--disable-blink-features=ComputePressure",
]
# --gpu: WebGPU in headless Chromium (Linux needs the unsafe flag and Vulkan); no --disable-gpu.
GPU_FLAGS = ["--enable-unsafe-webgpu", "--enable-features=Vulkan"]
MAX_BACKOFF = 60.0


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


@dataclass
class Worker:
    index: int
    profile: Path
    worker_id: str
    process: subprocess.Popen | None = None
    failures: int = 0
    restart_at: float = 0.0
    started_at: float = field(default=0.0)


def _worker_id(profile: Path) -> str:
    path = profile / "peermr-worker-id"
    if not path.exists():
        profile.mkdir(parents=True, exist_ok=True)
        path.write_text(uuid.uuid4().hex)
    return path.read_text().strip()


def user_environment() -> dict[str, str]:
    """The environment the user started `peermr` with, for Chromium: the binary (PyInstaller) points
    LD_LIBRARY_PATH at its own libraries and keeps the user's in LD_LIBRARY_PATH_ORIG."""
    env = dict(os.environ)
    if getattr(sys, "frozen", False):
        original = env.pop("LD_LIBRARY_PATH_ORIG", None)
        if original is None:
            env.pop("LD_LIBRARY_PATH", None)
        else:
            env["LD_LIBRARY_PATH"] = original
    return env


class Runner:
    def __init__(self, server: str, token: str, count: int, chromium: str, data_dir: Path, gpu: bool = False):
        self.server = server.rstrip("/")
        self.token = token
        self.chromium = chromium
        self.gpu = gpu
        self.workers = [
            Worker(i, profile, _worker_id(profile))
            for i in range(count)
            for profile in [data_dir / "worker-profiles" / f"worker-{i}"]
        ]
        self.stopping = False

    def _command(self, worker: Worker) -> list[str]:
        flags = [f for f in CHROMIUM_FLAGS if f != "--disable-gpu"] + GPU_FLAGS if self.gpu else list(CHROMIUM_FLAGS)
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            flags.append("--no-sandbox")  # Chromium refuses to run as root with its sandbox
        url = f"{self.server}/worker/start#token={quote(self.token)}&worker={worker.worker_id}"
        return [self.chromium, *flags, f"--user-data-dir={worker.profile}", url]

    def _start(self, worker: Worker) -> None:
        worker.process = subprocess.Popen(
            self._command(worker),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=user_environment(),
        )
        worker.started_at = time.monotonic()
        print(f"worker {worker.index}: started (pid {worker.process.pid}, id {worker.worker_id})", flush=True)

    def run(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: setattr(self, "stopping", True))
        for worker in self.workers:
            self._start(worker)
        while not self.stopping:
            time.sleep(0.5)
            now = time.monotonic()
            for worker in self.workers:
                if worker.process and worker.process.poll() is not None:
                    code = worker.process.returncode
                    # A browser that ran for a while and then died is restarted at once; one that keeps dying waits.
                    worker.failures = 0 if now - worker.started_at > 60 else worker.failures + 1
                    delay = min(MAX_BACKOFF, 2.0**worker.failures - 1)
                    print(f"worker {worker.index}: Chromium exited ({code}); restarting in {delay:.0f} s", flush=True)
                    worker.process = None
                    worker.restart_at = now + delay
                if worker.process is None and now >= worker.restart_at:
                    self._start(worker)
        self.stop()

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
        print("all workers stopped", flush=True)


def run_workers(server: str, token: str, count: int, chromium: str | None, data_dir: Path, gpu: bool = False) -> None:
    if count < 1:
        raise RunnerError("--count must be at least 1")
    binary = find_chromium(chromium)
    check_token(server.rstrip("/"), token)
    with_gpu = " with WebGPU" if gpu else ""
    print(f"Starting {count} worker{'s' if count != 1 else ''}{with_gpu} for {server} with {binary}", flush=True)
    Runner(server, token, count, binary, data_dir, gpu).run()
    sys.stdout.flush()
