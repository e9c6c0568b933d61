"""``oak serve``: the scheduler as a service (docs/jobs.md)."""
