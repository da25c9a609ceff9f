"""The job engine: the coordinator and the rooms it drives (docs/architecture.md, "The engine").

- ``admission``: the queue, and which queued run starts on which workers.
- ``placement``: the only writer of which worker serves which run, as a rank or an extra attempt.
- ``staging``: a task's inputs copied to its worker, prestaged shuffle pieces, the streaming feed.
- ``speculation``: stalled and slow tasks, their backup attempts, and validation's replicas.
- ``reports``: what a worker's task messages mean for its run.
- ``recovery``: checkpoints, re-adopting runs after a restart, and the drain before a stop.
- ``ending``: a run's end, its outputs kept or discarded, and the rows that record it.

The task graph they all act on, without I/O, is ``jobs/execution.py``.
"""
