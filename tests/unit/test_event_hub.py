"""The EventHub's synchronous hand-out (publish_now), which a task message behind an edge takes."""

from __future__ import annotations

import logging

from appliance.events import EventHub, TaskMessage, WorkerLeft


def test_publish_now_hands_an_event_to_plain_subscribers_in_order_and_logs_their_errors(caplog):
    hub, heard = EventHub(), []
    hub.subscribe(TaskMessage, lambda event: heard.append(("first", event.message)))

    def broken(event):
        raise ValueError("boom")

    hub.subscribe(TaskMessage, broken)
    hub.subscribe(TaskMessage, lambda event: heard.append(("last", event.message)))
    assert hub.at_once(TaskMessage)
    with caplog.at_level(logging.ERROR):
        hub.publish_now(TaskMessage(None, "done"))
    assert heard == [("first", "done"), ("last", "done")]
    assert "TaskMessage subscriber" in caplog.text


def test_a_coroutine_subscriber_keeps_its_kind_on_the_awaited_path():
    hub = EventHub()

    async def heard(event):
        return None

    hub.subscribe(WorkerLeft, heard)
    hub.subscribe(TaskMessage, lambda event: None)
    assert not hub.at_once(WorkerLeft)
    assert hub.at_once(TaskMessage)
