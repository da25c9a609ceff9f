"""CPU cgroups for uneven machines on one host: a browser started inside a group with a CPU quota
runs as a machine with that share of a core would (tests/e2e/test_stragglers_in_browsers.py,
bench/uneven_fleet.py). The cgroup v1 ``cpu`` controller where it is mounted (writable as root),
else a cgroup v2 child group."""

from __future__ import annotations

import time
from pathlib import Path

PERIOD_US = 100_000
V1_ROOT = Path("/sys/fs/cgroup/cpu")
V1_ACCOUNT = Path("/sys/fs/cgroup/cpuacct")
V2_ROOT = Path("/sys/fs/cgroup")


class CpuGroup:
    """A CPU cgroup with a quota, and the CPU time its processes used: v1's cpu controller (and a group
    of the same name under cpuacct) where it is mounted, else a v2 child group (cpu.max, cpu.stat)."""

    v1 = (V1_ROOT / "cpu.cfs_quota_us").exists()

    def __init__(self, name: str):
        if self.v1:
            self.path, self.paths = V1_ROOT / name, [V1_ROOT / name, V1_ACCOUNT / name]
        else:
            self.path = V2_ROOT / name
            self.paths = [self.path]
            if "cpu" not in (V2_ROOT / "cgroup.subtree_control").read_text().split():
                (V2_ROOT / "cgroup.subtree_control").write_text("+cpu")
        for path in self.paths:
            path.mkdir(exist_ok=True)
        if self.v1:
            (self.path / "cpu.cfs_period_us").write_text(str(PERIOD_US))
        self.limit(None)

    def limit(self, cores: float | None) -> None:
        """At most ``cores`` of CPU time (None: no limit)."""
        quota = None if cores is None else round(cores * PERIOD_US)
        if self.v1:
            (self.path / "cpu.cfs_quota_us").write_text(str(-1 if quota is None else quota))
        else:
            (self.path / "cpu.max").write_text(f"{'max' if quota is None else quota} {PERIOD_US}")

    def used(self) -> float:
        """CPU seconds the group's processes used so far."""
        if self.v1:
            return int((self.paths[1] / "cpuacct.usage").read_text()) / 1e9
        stat = dict(line.split() for line in (self.path / "cpu.stat").read_text().splitlines())
        return int(stat["usage_usec"]) / 1e6

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` run inside the group: the shell moves itself in, then execs (its children inherit it)."""
        moves = " && ".join(f"echo $$ > {path}/cgroup.procs" for path in self.paths)
        return ["sh", "-c", f'{moves} && exec "$@"', "sh", *argv]

    def remove(self) -> None:
        """Move what is left in the group to its parent, then remove it."""
        for path in self.paths:
            for _ in range(50):
                for pid in (path / "cgroup.procs").read_text().split():
                    try:
                        (path.parent / "cgroup.procs").write_text(pid)
                    except OSError:
                        pass  # it exited meanwhile
                try:
                    path.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)
            else:
                raise RuntimeError(f"could not remove {path}")
