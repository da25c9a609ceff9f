"""The built binary as a user meets it: its size, how long `peermr version` takes, how long `serve` takes
to answer /healthz on a fresh data dir, and its resident memory once idle.

Measures `make binary`'s output (the unpacked dist/peermr/peermr and the tarball next to it; built
first when missing), or any `peermr` executable given as an argument, e.g. an older one-file build.
The resident set is summed over the process and its children (a one-file build runs the server in a
child of its launcher).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.support import free_port  # noqa: E402

DEFAULT = ROOT / "dist" / "peermr" / "peermr"
IDLE_SECONDS = 10


def mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


def sizes(binary: Path) -> list[str]:
    if binary.parent.name != "peermr" or not (binary.parent / "_internal").is_dir():
        return [f"file {mib(binary.stat().st_size)}"]
    folder = sum(path.lstat().st_size for path in binary.parent.rglob("*") if path.is_file() and not path.is_symlink())
    tarballs = binary.parent.parent.glob("peermr-*.tar.xz")
    return [f"unpacked {mib(folder)}", *(f"{tarball.name} {mib(tarball.stat().st_size)}" for tarball in tarballs)]


def version_seconds(binary: Path, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([str(binary), "version"], check=True, capture_output=True)
        times.append(time.perf_counter() - started)
    return times


def tree_rss(pid: int) -> int:
    """Resident bytes of a process and its descendants."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    status = Path(f"/proc/{pid}/status").read_text()
    kib = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
    return kib * 1024 + sum(tree_rss(int(child)) for child in children)


def serve(binary: Path) -> tuple[float, int]:
    """Seconds until /healthz answers 200, and the resident bytes after IDLE_SECONDS idle."""
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("PEERMR_")}
        env["PEERMR_TURN_PORT"] = str(free_port())
        command = [str(binary), "serve", "--data-dir", f"{tmp}/data", "--host", "127.0.0.1", "--port", str(port)]
        started = time.perf_counter()
        proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while True:
                if proc.poll() is not None:
                    raise SystemExit(f"serve exited with {proc.returncode}")
                with contextlib.suppress(httpx.TransportError):
                    if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                        break
                time.sleep(0.02)
            healthy = time.perf_counter() - started
            time.sleep(IDLE_SECONDS)
            return healthy, tree_rss(proc.pid)
        finally:
            proc.terminate()
            proc.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("binary", nargs="?", type=Path, default=DEFAULT)
    parser.add_argument("--runs", type=int, default=5, help="runs of `peermr version` and of `serve`")
    args = parser.parse_args()
    binary = args.binary.resolve()
    if binary == DEFAULT and not binary.is_file():  # make bench runs every script: build what it measures
        subprocess.run([str(ROOT / "packaging" / "build.sh")], check=True, env={**os.environ, "PYTHON": sys.executable})
    if not binary.is_file():
        raise SystemExit(f"{binary} not found")
    print(f"{binary}: {', '.join(sizes(binary))}")
    version = version_seconds(binary, args.runs)
    print(f"peermr version: median {statistics.median(version):.3f} s, max {max(version):.3f} s")
    served = [serve(binary) for _ in range(args.runs)]
    healthy = [seconds for seconds, _ in served]
    print(f"serve healthy: median {statistics.median(healthy):.2f} s, max {max(healthy):.2f} s")
    print(f"idle RSS after {IDLE_SECONDS} s: median {mib(int(statistics.median(rss for _, rss in served)))}")


if __name__ == "__main__":
    main()
