"""HTTP servers inside the scheduler's event loop: probes and metrics (hooks and dashboard add
their own apps). Litestar apps are served by uvicorn (:func:`serve`); the hook API, which Slurm's
scripts call twice per Pod, is an aiohttp.web app (:func:`serve_aiohttp`), cheaper per call."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Generator

import uvicorn
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
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


class OneLineBadRequests(logging.Filter):
    """aiohttp logs a request it cannot parse at ERROR, with a traceback: anyone who reaches
    the port could fill the log with them. Such a record becomes one WARNING line naming the
    client and what was wrong (as uvicorn logged it); every other record passes unchanged."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            client = record.args[0] if isinstance(record.args, tuple) and record.args else "?"
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            said = " ".join(str(exc.message or type(exc).__name__).split())
            record.msg, record.args = "invalid HTTP request from %s: %.300s", (client, said)
            record.exc_info, record.exc_text = None, None
        return True


_SERVER_LOG = logging.getLogger("aiohttp.server")
if not any(isinstance(f, OneLineBadRequests) for f in _SERVER_LOG.filters):
    _SERVER_LOG.addFilter(OneLineBadRequests())


async def serve_aiohttp(app: web.Application, bind: str, *,
                        shutdown_timeout: float = 2.5) -> None:
    """Serve an aiohttp.web ``app`` until cancelled, then shut down cleanly: stop listening,
    let the calls in flight finish (then they are cancelled: aiohttp waits ``shutdown_timeout``
    for them, then as long again for their connections), run the app's cleanup. No access
    log, no signal handling of its own; an idle kept-alive connection is closed after 5 s, as
    uvicorn does.

    A long poll may have 30 s left to wait (a prolog's lock): the scheduler stops serving
    before it lets its Lease go, so waiting for it would hold the next leader back, close to
    the Pod's 30 s grace. At most 5 s: a call cut short is asked again by its script, of the
    next leader."""
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
