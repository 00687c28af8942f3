"""The worker daemon: one per host, runs jobs as their owners (docs/architecture/workers.md)."""
