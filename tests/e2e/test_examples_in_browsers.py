"""The documentation's kinds of jobs on real Chromium workers: an Emscripten (embind) module, images
read with OffscreenCanvas and a TF.js model trained on them, and WebGPU compute on a real adapter.
The examples run as they are, on the files the appliance ships under /static/examples/.

The worker tabs' Chromium runs with --enable-unsafe-webgpu: headless, it then exposes SwiftShader's
software WebGPU adapter (vendor google, architecture swiftshader) to pages and Web Workers alike,
which is the adapter the WebGPU jobs run on here. A small HTTP server on another origin stands in for
a data server an admin allowed (PEERMR_FETCH_ORIGINS): it serves, with CORS, an Emscripten module
built again with the documented command and a sprite of digits the test draws.
"""

from __future__ import annotations

import importlib.util
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.browsers import launch
from tests.e2e.test_jobs_in_browsers import logs, output, save_and_run, wait
from tests.integration.test_worker_runner import wait_for
from tests.support import ADMIN_EMAIL, ADMIN_PASSWORD, Appliance, Client, QuietHandler, free_port

pytestmark = pytest.mark.e2e

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
EMSCRIPTEN = EXAMPLES / "emscripten"
SHIPPED = "/static/examples/emscripten"  # where the appliance serves the build of lerp.cpp
_spec = importlib.util.spec_from_file_location("digits_data", EXAMPLES / "digits_data.py")
digits_data = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(digits_data)
EMCC_COMMAND = ["-lembind", "-O0", "-s", "ENVIRONMENT=worker", "-s", "EXPORT_NAME=LerpModule", "-s", "MODULARIZE=1"]
TYPES = {".js": "text/javascript", ".wasm": "application/wasm", ".png": "image/png"}


class DataServer(ThreadingHTTPServer):
    """Serves ``files`` (path -> bytes) with CORS and the content type of their extension."""

    def __init__(self, files: dict[str, bytes]):
        class Handler(QuietHandler):
            def do_GET(handler):  # noqa: N805
                body = files.get(handler.path)
                if body is None:
                    return handler.reply(404, b"not found")
                kind = TYPES.get(Path(handler.path).suffix, "application/octet-stream")
                handler.reply(200, body, kind, {"access-control-allow-origin": "*"})

        self.files = files
        super().__init__(("127.0.0.1", free_port()), Handler)
        self.origin = f"http://127.0.0.1:{self.server_address[1]}"
        threading.Thread(target=self.serve_forever, daemon=True).start()


# -- the Emscripten module ---------------------------------------------------------------------


def lerp_build(tmp: Path) -> dict[str, bytes] | None:
    """lerp.js and lerp.wasm built from docs/examples/emscripten/lerp.cpp with the documentation's
    command by Debian's emcc (package emscripten, `make test-tools`), when it is installed."""
    if not shutil.which("emcc"):
        return None
    out = tmp / "lerp.js"
    built = subprocess.run(
        ["emcc", *EMCC_COMMAND, "-o", str(out), str(EMSCRIPTEN / "lerp.cpp")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    return {f"/emscripten/{n}": (tmp / n).read_bytes() for n in ("lerp.js", "lerp.wasm")}


# -- a sprite of digits for the convolutional example ----------------------------------------

# A 5x7 bitmap of each digit, drawn twice as large at a position that varies by up to 3 pixels either
# way, over noise: what a convolution and pooling are for (the same strokes wherever they are).
GLYPHS = {
    0: ("01110", "10001", "10011", "10101", "11001", "10001", "01110"),
    1: ("00100", "01100", "00100", "00100", "00100", "00100", "01110"),
    2: ("01110", "10001", "00001", "00010", "00100", "01000", "11111"),
    3: ("11110", "00001", "00001", "01110", "00001", "00001", "11110"),
    4: ("00010", "00110", "01010", "10010", "11111", "00010", "00010"),
    5: ("11111", "10000", "11110", "00001", "00001", "10001", "01110"),
    6: ("00110", "01000", "10000", "11110", "10001", "10001", "01110"),
    7: ("11111", "00001", "00010", "00100", "01000", "01000", "01000"),
    8: ("01110", "10001", "10001", "01110", "10001", "10001", "01110"),
    9: ("01110", "10001", "10001", "01111", "00001", "00010", "01100"),
}
GLYPH_IMAGES = 400


def glyph_sprite(count: int = GLYPH_IMAGES, seed: int = 11) -> tuple[bytes, bytes, int]:
    """A PNG of ``count`` 28x28 digit images, one per row as MNIST's sprite is laid out; their labels
    (a byte each); and the sum of their pixel values (0-255)."""
    side = digits_data.SIDE
    rng = random.Random(seed)
    labels = bytes(rng.randrange(10) for _ in range(count))
    pixels = bytearray()
    for digit in labels:
        image = bytearray(rng.randrange(0, 50) for _ in range(side * side))
        top, left = 7 + rng.randrange(-3, 4), 9 + rng.randrange(-3, 4)
        for y, row in enumerate(GLYPHS[digit]):
            for x, bit in enumerate(row):
                for dy, dx in ((0, 0), (0, 1), (1, 0), (1, 1)) if bit == "1" else ():
                    image[(top + 2 * y + dy) * side + left + 2 * x + dx] = rng.randrange(190, 256)
        pixels += image
    return digits_data.png(side * side, count, bytes(pixels)), labels, sum(pixels)


# -- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lerp_files(tmp_path_factory):
    return lerp_build(tmp_path_factory.mktemp("emcc"))


@pytest.fixture(scope="module")
def glyphs():
    return glyph_sprite()


@pytest.fixture(scope="module")
def data_server(lerp_files, glyphs):
    image, labels, _ = glyphs
    server = DataServer({**(lerp_files or {}), "/glyphs/sprite.png": image, "/glyphs/labels.bin": labels})
    yield server
    server.shutdown()


@pytest.fixture(scope="module")
def appliance(tmp_path_factory, data_server):
    server = Appliance(
        tmp_path_factory.mktemp("examples") / "data", env={"PEERMR_FETCH_ORIGINS": data_server.origin}
    ).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def browsers(playwright):
    """Chromium with WebGPU for the module's workers (--disable-gpu may stay: SwiftShader needs no GPU
    process), and one without."""
    webgpu = launch(playwright.chromium, extra=["--enable-unsafe-webgpu"])
    plain = launch(playwright.chromium)
    yield webgpu, plain
    webgpu.close()
    plain.close()


@pytest.fixture(scope="module")
def chromium(browsers):
    return browsers[0]


@pytest.fixture(scope="module")
def admin(appliance):
    client = Client(appliance.url)
    client.login(ADMIN_EMAIL, ADMIN_PASSWORD)
    yield client
    client.close()


def allow_software_gpus(admin: Client, allowed: bool) -> None:
    response = admin.form("/ui/admin/settings/software-gpus", {"allowed": "true"} if allowed else {})
    assert response.status_code == 303, response.text


# -- tests -------------------------------------------------------------------------------------


def f32(value: float) -> float:
    return struct.unpack("<f", struct.pack("<f", value))[0]


def test_an_embind_module_built_as_documented_runs_in_jobs(api, workers, data_server, lerp_files, record_property):
    script = (EMSCRIPTEN / "lerp-job.js").read_text()
    # The job as it is, on the build the appliance ships; and on one built now, served from elsewhere.
    scripts = {"the shipped build (checked in, made by Debian's emcc 3.1.6)": script}
    if lerp_files:
        emcc = subprocess.run(["emcc", "--version"], capture_output=True, text=True, timeout=60).stdout
        built_by = emcc.splitlines()[0] if emcc else "emcc"
        scripts[f"a build made now by {built_by}"] = script.replace(SHIPPED, f"{data_server.origin}/emscripten")
    # Which builds ran, said when the test passes too (pytest -rP prints it; JUnit XML records it).
    ran = "; ".join(scripts) + ("" if lerp_files else "; none built now: emcc is not installed")
    record_property("lerp_builds", ran)
    print(f"embind LERP job ran on: {ran}")
    for build, text in scripts.items():
        run_id = save_and_run(api, "lerp", text)
        run = wait(api, run_id)
        assert run["state"] == "succeeded", f"{build}: {run['reason']}\n{logs(api, run_id)[-3000:]}"
        # lerp(-4, 12, t) in float32 for t = 0, 0.05, ..., 1, computed by the C++ code in the browsers.
        expected = {i: f32(f32(-4) + f32(i / 20) * f32(16)) for i in range(21)}
        got = dict(output(api, run_id))
        assert set(got) == set(expected)
        assert all(abs(got[i] - expected[i]) < 1e-5 for i in expected), (build, got)


def test_a_job_reads_a_png_sprite_and_trains_on_it_with_the_wasm_backend(api, workers):
    pixels, _ = digits_data.images()
    run_id = save_and_run(api, "digits", (EXAMPLES / "digits.js").read_text())
    run = wait(api, run_id, timeout=300)
    assert run["state"] == "succeeded", run["reason"] + logs(api, run_id)[-3000:]
    results = dict(output(api, run_id))
    assert sorted(results) == [0, 1]
    for result in results.values():
        # Every pixel came through createImageBitmap, the OffscreenCanvas and getImageData unchanged.
        assert result["images"] == digits_data.DIGITS
        assert abs(result["pixelSum"] - sum(pixels) / 255) < 0.01
        # The workers' only WebGPU adapter is a software one: the example takes WebAssembly instead.
        assert result["backend"] == "wasm"
        assert result["accuracy"] >= 0.9, results


def test_a_convolutional_network_trains_on_a_sprite_on_the_cpu_backend(api, workers, data_server, glyphs):
    _, labels, pixel_sum = glyphs
    # The example on the test's sprite instead of the one the appliance ships.
    script = (EXAMPLES / "digits-conv.js").read_text()
    script = script.replace("/static/examples/digits/", f"{data_server.origin}/glyphs/")
    run_id = save_and_run(api, "digits-conv", script)
    run = wait(api, run_id, timeout=180)
    assert run["state"] == "succeeded", run["reason"] + logs(api, run_id)[-3000:]
    results = dict(output(api, run_id))
    assert sorted(results) == [0, 1]
    for result in results.values():
        # The sprite came through createImageBitmap, the OffscreenCanvas and getImageData unchanged.
        assert result["images"] == GLYPH_IMAGES
        assert abs(result["pixelSum"] - pixel_sum / 255) < 0.01
        # No GPU (SwiftShader is a software adapter) and no Conv2DBackpropFilter on wasm: cpu.
        assert result["backend"] == "cpu"
        # Well above chance (0.1) on the 80 held-out images: measured 0.89 to 1.0.
        assert result["accuracy"] >= 0.75, results


SOFTWARE_ADAPTER = "google swiftshader (software)"


def fleet_gpus(admin: Client) -> list[str]:
    """The GPU each connected worker shows on the fleet page (its Hardware cell)."""
    return re.findall(r"GPU: ([^<·]*?)\s*(?:·|</td>)", admin.get("/ui/workers/live").text)


def test_the_worker_page_shows_the_adapter_its_web_workers_get(workers, browsers, appliance, token, admin):
    # Each tab asked a Web Worker (where jobs run) for its adapter and told the appliance.
    expect(workers.tabs[0].locator("#gpu")).to_have_text(SOFTWARE_ADAPTER)
    expect(workers.tabs[0].locator("#gpu-note")).to_be_hidden()
    assert fleet_gpus(admin).count(SOFTWARE_ADAPTER) == len(workers.tabs)
    # A browser without WebGPU says so, and how to give it WebGPU.
    context = browsers[1].new_context()
    try:
        tab = context.new_page()
        tab.goto(f"{appliance.url}/worker/start#token={token}")
        expect(tab.locator("#gpu")).to_have_text("none", timeout=30_000)
        expect(tab.locator("#gpu-note")).to_contain_text("--enable-unsafe-webgpu")
    finally:
        context.close()


def test_a_wgsl_compute_job_waits_for_gpus_until_software_adapters_are_allowed(api, workers, admin, appliance):
    allow_software_gpus(admin, False)
    run_id = save_and_run(api, "webgpu-compute", (EXAMPLES / "webgpu-compute.js").read_text())
    # Four workers with WebGPU, but their adapter is SwiftShader's: not a GPU by default.
    queued = wait_for(lambda: (run := api.get(f"/runs/{run_id}").json())["reason"] and run)
    assert queued["state"] == "queued"
    assert "0 eligible with WebGPU" in queued["reason"]
    assert "4 connected worker(s) have a software WebGPU adapter only" in queued["reason"]
    settings = admin.get("/ui/admin/settings").text
    assert 'name="allowed" value="true">' in settings  # the box is not ticked

    allow_software_gpus(admin, True)
    assert 'name="allowed" value="true" checked>' in admin.get("/ui/admin/settings").text
    run = wait(api, run_id)
    assert run["state"] == "succeeded", run["reason"] + logs(api, run_id)[-3000:]
    got = dict(output(api, run_id))
    expected = {i: f32(f32(f32(i / 8) * f32(i / 8)) + 0.5) for i in range(1000)}
    assert got == expected
    assert "adapter: google swiftshader (software)" in logs(api, run_id)
    # The run page names the adapter of each rank's worker; the run is metered as GPU time.
    page = admin.get(f"/ui/runs/{run_id}").text
    assert page.count(f"GPU: {SOFTWARE_ADAPTER}</span>") >= 2
    metered = f"SELECT DISTINCT resource FROM billing_usage WHERE run = {run_id}"
    # Usage is written as it is metered: the bytes the shuffle moved may come in before the GPU time.
    resources = wait_for(lambda: (found := {r[0] for r in appliance.query(metered)}) >= {"gpu_ms"} and found)
    assert "cpu_ms" not in resources


def test_tfjs_runs_on_its_webgpu_backend_in_a_job(api, workers, admin):
    allow_software_gpus(admin, True)
    run_id = save_and_run(api, "tfjs-webgpu", (EXAMPLES / "tfjs-webgpu.js").read_text())
    run = wait(api, run_id, timeout=240)
    assert run["state"] == "succeeded", run["reason"] + logs(api, run_id)[-3000:]
    results = dict(output(api, run_id))
    for rank, scale in ((0, 2), (1, 3)):
        a = [[scale * (8 * r + c) for c in range(8)] for r in range(4)]
        expected = [[sum(row[0::2]), sum(row[1::2]), sum(row)] for row in a]
        assert results[rank] == {"backend": "webgpu", "scale": scale, "product": expected}


def test_peermr_worker_gpu_starts_chromium_with_webgpu(appliance, admin, tmp_path):
    """`peermr worker --gpu`: its browser has WebGPU (here SwiftShader's adapter)."""
    appliance.add_user("gpu-farm@example.com", "worker", "gpu-farm-password-1")
    farm_token = appliance.cli("token", "create", "gpu-farm@example.com").stdout.strip()
    before = len(fleet_gpus(admin))
    command = [sys.executable, "-m", "appliance", "worker", "--server", appliance.url, "--token", farm_token]
    runner = subprocess.Popen(
        [*command, "--gpu", "--ignore-busy", "--data-dir", str(tmp_path / "farm")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        wait_for(lambda: len(fleet_gpus(admin)) > before)
        assert "gpu-farm@example.com" in admin.get("/ui/workers/live").text
        assert fleet_gpus(admin).count(SOFTWARE_ADAPTER) == before + 1
    finally:
        runner.send_signal(signal.SIGTERM)
        out, _ = runner.communicate(timeout=60)
    assert runner.returncode == 0, out
    assert "with WebGPU" in out
