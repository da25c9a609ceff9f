"""Which worker to blame when copies of a run's stage outputs fail between browsers.

A failed copy has two ends and either may be at fault: a source whose browser hangs while its page
still answers pings cannot send, a target whose store is broken cannot receive. A run keeps its
failed copies and blames a worker once the evidence points at it:

- a worker whose copies failed with two or more different peers (the peers' other copies are the
  witnesses that the fault is on its side);
- the source of a copy that failed twice between the same two workers, as Spark treats a fetch
  failure: its outputs are taken as lost and computed again elsewhere.

The coordinator takes a blamed worker off the run; lineage recomputes what only it held. The run
fails instead (``limit_reached``) once more than half its ranks' worth of workers are blamed, or
its failed copies exceed a few per rank: then the fault is the network between the browsers, not
one of them, and shuffling ranks would go on forever.
"""

from __future__ import annotations

from collections import Counter, defaultdict

# Failed copies a run tolerates per rank it asks for before it fails as transfer-failed.
FAILED_COPIES_PER_RANK = 3


class CopyFailures:
    def __init__(self, ranks: int):
        self.ranks = max(ranks, 1)
        self.pairs: Counter[tuple[str, str]] = Counter()  # (source, target) -> failed copies
        self.peers: defaultdict[str, set[str]] = defaultdict(set)  # worker -> peers it failed with
        self.blamed: set[str] = set()

    @property
    def total(self) -> int:
        return sum(self.pairs.values())

    def record(self, source: str, target: str) -> None:
        self.pairs[(source, target)] += 1
        self.peers[source].add(target)
        self.peers[target].add(source)

    def to_blame(self) -> dict[str, str]:
        """Workers newly blamed, each with the reason; they are not blamed again."""
        found: dict[str, str] = {}
        for worker, peers in self.peers.items():
            # A peer already blamed is no witness: its failures were its own.
            witnesses = peers - self.blamed
            if len(witnesses) >= 2 and worker not in self.blamed:
                found[worker] = f"its copies with {len(witnesses)} workers failed ({', '.join(sorted(witnesses))})"
        for (source, target), count in self.pairs.items():
            if count >= 2 and not {source, target} & (self.blamed | found.keys()):
                found[source] = f"{count} copies from it to worker {target} failed"
        self.blamed |= found.keys()
        return found

    def limit_reached(self) -> bool:
        return len(self.blamed) > self.ranks // 2 or self.total > FAILED_COPIES_PER_RANK * self.ranks
