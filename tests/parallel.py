"""How `make test` spreads the suite over pytest-xdist's workers (``pytest -n N``).

The suite mostly waits (on sleeps, timeouts, subprocesses and browsers), so its modules run side by
side on the machine's cores, each whole on one worker, as its module-scoped appliance wants. The
modules that drive browsers run on a worker of their own, one after the other in the suite's order:
one Chromium's tabs at a time load the machine enough, and Playwright's sync API holds its worker's
asyncio loop, so no async test may follow them there. Being the longest chain, they start first.
The one-file binary's tests come last, when the build that the session started beside the other
tests is done.

Which modules form these groups only the workers know, from the items they collect: each writes them
(tests/conftest.py) to a file that the controller reads before it schedules. xdist's own
``--dist loadgroup`` carries groups in the test ids, which pytest 9.2 no longer lets a plugin change.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from xdist.scheduler import LoadScopeScheduling

BROWSERS, BINARY = "browsers", "binary"
WORKER_INPUT = "peermr_groups"  # the groups file's path, in each worker's workerinput
GROUPS_FILE = pytest.StashKey[Path]()


def configure_node(node) -> None:
    """On the controller, as a worker is set up: the file it writes the groups to."""
    config = node.config
    if GROUPS_FILE not in config.stash:
        directory = tempfile.mkdtemp(prefix="peermr-groups-")
        config.add_cleanup(lambda: shutil.rmtree(directory, ignore_errors=True))
        config.stash[GROUPS_FILE] = Path(directory) / "groups.json"
    node.workerinput[WORKER_INPUT] = str(config.stash[GROUPS_FILE])


def tell(config: pytest.Config, groups: dict[str, str]) -> None:
    """On a worker, the group of each module that has one (by the module's node id), for the controller."""
    if path := getattr(config, "workerinput", {}).get(WORKER_INPUT):
        part = Path(f"{path}.{os.getpid()}")
        part.write_text(json.dumps(groups))
        part.replace(path)  # whole when read: the workers write the same groups


def groups(config: pytest.Config) -> dict[str, str]:
    """On the controller, once a worker has collected: the groups it found."""
    path = config.stash.get(GROUPS_FILE, None)
    return json.loads(path.read_text()) if path and path.exists() else {}


class BrowsersApart(LoadScopeScheduling):
    def __init__(self, config: pytest.Config, log=None):
        super().__init__(config, log)
        config.option.loadscopereorder = False  # the suite's order (tests/conftest.py), not the largest first
        self.groups: dict[str, str] = {}
        self.browser_node = None

    def schedule(self) -> None:
        if self.collection is None:
            self.groups = groups(self.config)  # every worker has collected
        super().schedule()

    def _split_scope(self, nodeid: str) -> str:
        module = nodeid.split("::", 1)[0]
        return self.groups.get(module, module)

    def _assign_work_unit(self, node) -> None:
        if self.browser_node is None and BROWSERS in self.workqueue and len(self.nodes) > 1:
            self.workqueue.move_to_end(BROWSERS, last=False)
            self.browser_node = node
        super()._assign_work_unit(node)

    def _reschedule(self, node) -> None:
        if node is not self.browser_node:
            super()._reschedule(node)
        elif not self._pending_of(self.assigned_work[node]) and not node.shutting_down:
            node.shutdown()  # nothing follows the browsers on their worker

    def remove_node(self, node):
        if node is self.browser_node:
            self.browser_node = None  # it crashed: the next worker to ask takes the rest of the browsers
        return super().remove_node(node)
