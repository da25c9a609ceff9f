"""The parameter server's values and clocks, without a network (appliance/jobs/paramserver.py)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from appliance.jobs.api_routes import parameter_download
from appliance.jobs.parameters import value_file
from appliance.jobs.paramserver import ParameterError, ParameterServer


def f32(*values: float) -> bytes:
    return np.array(values, dtype="<f4").tobytes()


def test_updates_apply_element_wise_and_replace_keeps_the_budget():
    ps = ParameterServer(0, ["A"], 2, max_bytes=16)
    assert ps.update("A", "w", "float32", "add", f32(1, 2)) == 1  # a missing key starts from the delta
    assert ps.update("A", "w", "float32", "add", f32(0.5, 0.5)) == 2
    assert ps.update("A", "w", "float32", "max", f32(3, 0)) == 3
    assert ps.update("A", "w", "float32", "mul", f32(2, 2)) == 4
    assert ps.read("A", "w").value.tolist() == [6.0, 5.0]
    assert ps.update("A", "w", "float32", "replace", f32(9, 9, 9)) == 5  # another length is a new value
    assert ps.bytes == 12
    with pytest.raises(ParameterError, match="PEERMR_PS_MAX_BYTES_PER_RUN"):
        ps.write("A", "v", "float32", f32(1, 2), None)  # 12 + 8 > 16: refused, nothing changed
    assert ("A", "v") not in ps.values and ps.bytes == 12
    ps.write("A", "w", "float32", f32(1), None)  # a smaller value gives bytes back
    assert ps.bytes == 4


def test_groups_have_their_own_keys():
    ps = ParameterServer(0, ["A", "B"], 1, max_bytes=1 << 20)
    ps.write("A", "w", "int32", np.array([1], "<i4").tobytes(), None)
    with pytest.raises(ParameterError, match="no parameter 'w' in group B"):
        ps.read("B", "w")


async def test_a_rank_that_ended_its_task_holds_nobody_back_and_a_replacement_restarts_its_clock():
    ps = ParameterServer(0, ["A"], 2, max_bytes=1 << 20)
    ps.task_started("A", 0, replacement=False)
    ps.task_started("A", 1, replacement=False)
    ps.tick("A", 0)
    waiting = asyncio.create_task(ps.within_staleness("A", 0))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    ps.tick("A", 1)
    ps.tick("A", 1)
    await asyncio.wait_for(waiting, 1)
    # Rank 1's worker leaves at clock 2; its replacement starts from clock 0 again (it redoes them).
    ps.rank_lost("A", 1)
    ps.task_started("A", 1, replacement=True)
    assert ps.clock_of("A", 1) == 0
    ps.tick("A", 0)
    waiting = asyncio.create_task(ps.within_staleness("A", 0))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    ps.task_ended("A", 1)  # resting: not waited for
    await asyncio.wait_for(waiting, 1)


def test_a_downloaded_value_is_named_after_its_key_in_plain_characters_only():
    # A key is job code's text: a quote or a line break must not reach the response's headers.
    file = value_file(7, "A", 'layer/"w"\r\nSet-Cookie: x=1', "float32", b"\0\0\x80?", "raw")
    response = parameter_download("float32", file)
    name = "run-7-A-layer__w___Set-Cookie__x_1.float32"
    assert response.headers["Content-Disposition"] == f'attachment; filename="{name}"'
    assert "Set-Cookie" not in {name.title() for name in response.headers}
