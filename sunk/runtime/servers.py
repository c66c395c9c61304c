"""HTTP servers inside the scheduler's event loop: probes and metrics (hooks and dashboard add
their own apps). Litestar apps are served by uvicorn (:func:`serve`); the hook API, which Slurm's
scripts call twice per Pod, by :mod:`sunk.http.server` (:func:`serve_hooks`), cheaper per call."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Generator

import uvicorn
from litestar import Litestar, MediaType, Response, get
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from sunk.http import server as httpserver
from sunk.settings import parse_bind


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: the scheduler owns SIGTERM and runs several."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


async def serve(app: Litestar, bind: str) -> None:
    """Serve ``app`` until cancelled, then shut down cleanly (close the listening socket,
    finish the lifespan) instead of dying mid-request."""
    host, port = parse_bind(bind)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on",
                            access_log=False)
    server = _Server(config)
    task = asyncio.ensure_future(server.serve())
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        server.should_exit = True
        await task
        raise
    if server.started is False and not task.cancelled():
        raise OSError(f"could not serve on {bind} (address in use?)")


#: Pending connections the kernel keeps for us (uvicorn's default, which the hook API had).
BACKLOG = 2048


async def serve_hooks(handler: httpserver.Handler, bind: str, *, max_body: int,
                      shutdown_timeout: float = 5.0) -> None:
    """Serve the hook API's ``handler`` (:mod:`sunk.http.server`) until cancelled, then shut
    down cleanly: stop listening, let the calls in flight finish (at most ``shutdown_timeout``,
    then they are cancelled), close every connection. An idle kept-open connection is closed
    after 5 s, as uvicorn does.

    A long poll may have 30 s left to wait (a prolog's lock): the scheduler stops serving
    before it lets its Lease go, so waiting for it would hold the next leader back, close to
    the Pod's 30 s grace. At most 5 s: a call cut short is asked again by its script, of the
    next leader."""
    host, port = parse_bind(bind)
    await httpserver.serve(handler, host, port, max_body=max_body, backlog=BACKLOG,
                           shutdown_timeout=shutdown_timeout)


def probes_app(ready: Callable[[], tuple[bool, str]]) -> Litestar:
    """``/healthz``: the process answers. ``/readyz``: caches synced and Slurm reachable (a
    standby of leader election: it can read the Lease); the body says which, or what is wrong."""

    @get("/healthz", media_type=MediaType.TEXT, include_in_schema=False, sync_to_thread=False)
    def healthz() -> str:
        return "ok"

    @get("/readyz", media_type=MediaType.TEXT, include_in_schema=False, sync_to_thread=False)
    def readyz() -> Response[str]:
        ok, why = ready()
        return Response(why, status_code=200 if ok else 503)

    return Litestar([healthz, readyz], openapi_config=None, logging_config=None)


def metrics_app() -> Litestar:
    @get("/metrics", include_in_schema=False, sync_to_thread=False)
    def metrics() -> Response[bytes]:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    return Litestar([metrics], openapi_config=None, logging_config=None)
