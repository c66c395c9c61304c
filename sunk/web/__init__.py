"""The dashboard: what the scheduler is doing, as HTML pages and a JSON API (read-only).

The only package that imports litestar's templating; it reads the scheduler's in-memory state.
"""

from sunk.web.app import auth_from_env, create_app

__all__ = ["auth_from_env", "create_app"]
