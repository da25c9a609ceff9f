"""Past one machine: the roles of one binary (edges and schedulers) on PostgreSQL and Redis, and the
scheduler's leadership (leadership.py)."""
