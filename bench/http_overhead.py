"""Request throughput of the appliance against a bare Litestar app, in the same run.

Measures what authentication (a session or token lookup in SQLite per request),
CSRF and template rendering cost per request:
  reference  GET /hello on a one-route Litestar app under uvicorn
  /healthz   public, one database query
  /ui        signed-in dashboard page (session lookup + template)
  /api/v1/me API token lookup + JSON
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support import ADMIN_EMAIL, ADMIN_PASSWORD, Appliance, Client, free_port  # noqa: E402

REQUESTS = int(os.environ.get("BENCH_REQUESTS", "2000"))
CONCURRENCY = 16

REFERENCE_APP = textwrap.dedent(
    """
    from litestar import Litestar, get

    @get("/hello")
    async def hello() -> dict:
        return {"status": "ok"}

    app = Litestar([hello])
    """
)


async def measure(url: str, headers: dict | None = None, cookies: dict | None = None) -> tuple[float, float, float]:
    latencies: list[float] = []
    async with httpx.AsyncClient(headers=headers, cookies=cookies, timeout=30) as client:
        queue = iter(range(REQUESTS))

        async def worker():
            for _ in queue:
                started = time.perf_counter()
                response = await client.get(url)
                latencies.append(time.perf_counter() - started)
                assert response.status_code == 200, (url, response.status_code)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
        elapsed = time.perf_counter() - started
    latencies.sort()
    return REQUESTS / elapsed, statistics.median(latencies) * 1000, latencies[int(len(latencies) * 0.99)] * 1000


def wait_healthy(url: str) -> None:
    for _ in range(100):
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.1)
    raise TimeoutError(url)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ref_dir = Path(tmp) / "ref"
        ref_dir.mkdir()
        (ref_dir / "refapp.py").write_text(REFERENCE_APP)
        port = free_port()
        reference = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "refapp:app", "--port", str(port), "--log-level", "warning"],
            cwd=ref_dir,
        )
        appliance = Appliance(Path(tmp) / "data", env={"PEERMR_LOG_LEVEL": "warning"}).start()
        try:
            wait_healthy(f"http://127.0.0.1:{port}/hello")
            browser = Client(appliance.url)
            browser.login(ADMIN_EMAIL, ADMIN_PASSWORD)
            token = appliance.cli("token", "create", ADMIN_EMAIL).stdout.strip()
            cases = [
                ("reference /hello", f"http://127.0.0.1:{port}/hello", None, None),
                ("/healthz", f"{appliance.url}/healthz", None, None),
                ("/ui (session)", f"{appliance.url}/ui", None, {"peermr_session": browser.cookies["peermr_session"]}),
                ("/api/v1/me (token)", f"{appliance.url}/api/v1/me", {"Authorization": f"Bearer {token}"}, None),
            ]
            print(f"{REQUESTS} requests per case, {CONCURRENCY} concurrent, one client process")
            print(f"{'case':<22}{'req/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'vs ref':>10}")
            reference_rate = None
            for name, url, headers, cookies in cases:
                rate, p50, p99 = asyncio.run(measure(url, headers, cookies))
                reference_rate = reference_rate or rate
                print(f"{name:<22}{rate:>10.0f}{p50:>10.1f}{p99:>10.1f}{rate / reference_rate:>10.2f}")
        finally:
            appliance.stop()
            reference.terminate()
            reference.wait()


if __name__ == "__main__":
    main()
