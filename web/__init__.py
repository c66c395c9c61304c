"""The dashboard: what the scheduler is doing, as HTML pages and a JSON API (read-only).

Outside the ``sunk`` package and importing no client (no Kubernetes or Slurm client, no HTTP
library): it reads the scheduler's in-memory state through :class:`web.protocol.SchedulerView`,
so a page costs the scheduler no call to the API server or slurmrestd. Everything here runs on
the scheduler's event loop (never in a thread): the caches it reads are mutated by that loop,
and reading them between two awaits is what keeps the reads consistent.
"""

from web.app import create_app
from web.auth import auth_from_env

__all__ = ["auth_from_env", "create_app"]
