"""The audit log: who did what, when, from which address, before and after; hash-chained."""
