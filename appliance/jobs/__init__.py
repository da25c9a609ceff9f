"""Jobs: scripts, spec extraction, the queue, scheduling, executions, tasks, logs, outputs."""
