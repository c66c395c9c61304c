"""HTTP servers inside the scheduler's event loop: probes and metrics (hooks and dashboard add
their own apps). Litestar apps are served by uvicorn (:func:`serve`); the hook API, which Slurm's
scripts call twice per Pod, is an aiohttp.web app (:func:`serve_aiohttp`), cheaper per call."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Generator

import uvicorn
from aiohttp import web
from litestar import Litestar, MediaType, Response, get
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

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


async def serve_aiohttp(app: web.Application, bind: str, *,
                        shutdown_timeout: float = 60.0) -> None:
    """Serve an aiohttp.web ``app`` until cancelled, then shut down cleanly: stop listening,
    let the calls in flight finish (at most ``shutdown_timeout`` seconds, then they are
    cancelled), run the app's cleanup. No access log, no signal handling of its own; an idle
    kept-alive connection is closed after 5 s, as uvicorn does."""
    host, port = parse_bind(bind)
    runner = web.AppRunner(app, access_log=None, handle_signals=False,
                           shutdown_timeout=shutdown_timeout, keepalive_timeout=5.0)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, backlog=BACKLOG)
        try:
            await site.start()
        except OSError as exc:
            raise OSError(f"could not serve on {bind} (address in use?)") from exc
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


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
