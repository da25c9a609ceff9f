"""Which WebGPU adapters count as GPUs for GPU runs, and the flags `peermr worker --gpu` passes."""

from __future__ import annotations

import re
from pathlib import Path

from appliance.fleet.protocol import SOFTWARE_ADAPTERS, Capabilities, Gpu
from appliance.fleet.registry import Worker
from appliance.fleet.runner import Runner
from appliance.jobs import selection
from appliance.jobs.spec import GpuRequirements, JobSpec, StageSpec

SWIFTSHADER = Gpu(info={"vendor": "google", "architecture": "swiftshader"}, features=["timestamp-query"], fallback=True)
NVIDIA = Gpu(info={"vendor": "nvidia", "architecture": "ampere"}, features=["shader-f16"])


def worker(gpu: Gpu | None) -> Worker:
    async def nothing(*args):
        return None

    return Worker("w-0000001", 1, "w@example.com", Capabilities(gpu=gpu), "127.0.0.1", nothing, nothing)


def gpu_spec(**requirements) -> JobSpec:
    stage = StageSpec(kind="map", source="async function map(x) {}")
    return JobSpec(stages=[stage], gpu=True, gpu_requirements=GpuRequirements(**requirements))


def test_software_adapters_are_told_apart_by_the_fallback_flag_or_their_name():
    assert SWIFTSHADER.software and SWIFTSHADER.label == "google swiftshader (software)"
    assert Gpu(info={"vendor": "mesa", "description": "llvmpipe (LLVM 15.0.6, 256 bits)"}).software
    assert Gpu(fallback=True).label == "WebGPU (software)"
    assert not NVIDIA.software and NVIDIA.label == "nvidia ampere"


def test_the_worker_page_and_the_examples_tell_software_adapters_apart_by_the_same_names():
    # One rule: the names the appliance matches are the ones the page and the examples match.
    root = Path(__file__).resolve().parents[2]
    for path in (
        "static/worker/runtime.js",
        "docs/examples/digits.js",
        "docs/examples/digits-conv.js",
        "docs/examples/webgpu-compute.js",
    ):
        match = re.search(r"const SOFTWARE_ADAPTERS = /([^/]+)/i;", (root / path).read_text())
        assert match, path
        assert tuple(match.group(1).split("|")) == SOFTWARE_ADAPTERS, path


def test_a_software_adapter_runs_gpu_runs_only_when_allowed():
    spec = gpu_spec()
    assert not selection.meets_gpu(worker(SWIFTSHADER), spec)
    assert selection.meets_gpu(worker(SWIFTSHADER), spec, software_gpus=True)
    assert selection.meets_gpu(worker(NVIDIA), spec)
    assert not selection.meets_gpu(worker(None), spec, software_gpus=True)
    # A CPU run does not care.
    assert selection.meets_gpu(worker(SWIFTSHADER), JobSpec(stages=spec.stages))
    # Allowed software adapters still have to meet the requirements.
    assert not selection.meets_gpu(worker(SWIFTSHADER), gpu_spec(features=["shader-f16"]), software_gpus=True)
    assert selection.meets_gpu(worker(SWIFTSHADER), gpu_spec(info={"vendor": "google"}), software_gpus=True)


def test_a_waiting_gpu_run_says_when_software_adapters_are_what_the_fleet_has():
    workers = [worker(SWIFTSHADER), worker(SWIFTSHADER), worker(None)]
    note = selection.software_gpu_note(gpu_spec(), workers, software_gpus=False)
    assert "2 connected worker(s) have a software WebGPU adapter only" in note and "Admin → Settings" in note
    assert selection.software_gpu_note(gpu_spec(), workers, software_gpus=True) == ""
    assert selection.software_gpu_note(JobSpec(stages=gpu_spec().stages), workers, software_gpus=False) == ""


def test_peermr_worker_gpu_passes_webgpu_flags_instead_of_disable_gpu(tmp_path: Path):
    plain = Runner("http://a", "pmr_x", 1, "/usr/bin/chromium", tmp_path)
    gpu = Runner("http://a", "pmr_x", 1, "/usr/bin/chromium", tmp_path, gpu=True)
    plain_flags, gpu_flags = plain._command(plain.workers[0]), gpu._command(gpu.workers[0])
    assert "--disable-gpu" in plain_flags and "--enable-unsafe-webgpu" not in plain_flags
    assert "--disable-gpu" not in gpu_flags
    assert "--enable-unsafe-webgpu" in gpu_flags and "--enable-features=Vulkan" in gpu_flags
