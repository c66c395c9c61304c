"""The hook API that Slurm's scripts call (served on ``--hooks-api-bind-address``).

Every call carries the token shared with the Slurm nodes (``Authorization: Bearer ...``); a call
without it is refused. Calls are answered from the scheduler's caches (no slurmrestd call per
hook) and at most ``max_in_flight`` are handled at once, so a flood of calls cannot starve
scheduling: the excess is told to retry (429).
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Callable
from typing import Annotated, Protocol

from litestar import Litestar, Request, Response, get, post
from litestar.connection import ASGIConnection
from litestar.exceptions import HTTPException, NotAuthorizedException, NotFoundException
from litestar.handlers import BaseRouteHandler
from litestar.openapi import OpenAPIConfig
from litestar.params import JSONBody, Parameter
from pydantic import BaseModel, Field

from sunk import metrics
from sunk.locking import LockState

MAX_WAIT = 30.0


class HookScheduler(Protocol):
    """What the hook API asks of the scheduler."""

    ready: asyncio.Event

    async def job_terminating(self, job_id: int, node: str) -> tuple[str, bool] | None: ...

    async def wait_pod_gone(self, job_id: int, within: float) -> tuple[str, bool] | None: ...

    async def drain_for_job(self, job_id: int, node: str) -> tuple[str, bool] | None: ...

    async def job_started(self, job_id: int, node: str) -> tuple[str, bool] | None: ...


class HookLocks(Protocol):
    """What the hook API asks of the syncer (node locks)."""

    async def request_lock(self, node: str, job_id: int, strict: bool,
                           within: float) -> LockState | None: ...


class LockRequestBody(BaseModel):
    """Sent by the prolog: the job that is about to start on the node."""

    job_id: int = Field(ge=1)
    strict: bool = Field(default=False,
                         description="A placeholder job of sunk's: no other workload may stay")


class LockStatus(BaseModel):
    node: str
    state: str = Field(description="false | pending | locked | locked_strict")
    locked: bool


class JobNodeRequest(BaseModel):
    """Sent by the placeholder job: which Slurm node it runs on."""

    node: str = Field(min_length=1, max_length=256, pattern=r"^[A-Za-z0-9._-]+$",
                      description="The Slurm node the job runs on")


class PodStatus(BaseModel):
    pod: str = Field(description="namespace/name of the job's Pod")
    gone: bool = Field(description="Whether the Pod object no longer exists")


def create_hooks_app(scheduler: HookScheduler, *, token: Callable[[], str | None],
                     locks: HookLocks | None = None, max_in_flight: int = 64) -> Litestar:
    in_flight = asyncio.Semaphore(max_in_flight)

    async def authorized(connection: ASGIConnection, _: BaseRouteHandler) -> None:  # type: ignore[type-arg]
        # async: Litestar runs a plain function guard in a worker thread, a thread hop per call
        expected = token()
        if not expected:
            raise HTTPException(status_code=503,
                                detail="the hook API has no token configured; refusing calls")
        given = connection.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {expected}".encode()):
            raise NotAuthorizedException(detail="missing or wrong hook token")

    async def guarded(hook: str, call: Callable[[], object]) -> PodStatus:
        if in_flight.locked():
            metrics.HOOK_CALLS.labels(hook=hook, status="429").inc()
            raise HTTPException(status_code=429, detail="too many hook calls in flight; retry",
                                headers={"Retry-After": "1"})
        if not scheduler.ready.is_set():
            raise HTTPException(status_code=503, detail="the scheduler is starting; retry")
        async with in_flight:
            result = await call()  # type: ignore[misc]
        if result is None:
            metrics.HOOK_CALLS.labels(hook=hook, status="404").inc()
            raise NotFoundException(detail="no such job of this scheduler")
        pod, gone = result
        metrics.HOOK_CALLS.labels(hook=hook, status="200").inc()
        return PodStatus(pod=pod, gone=gone)

    @post("/hooks/v1/jobs/{job_id:int}/terminating", status_code=200,
          summary="A placeholder job is ending: delete its Pod")
    async def terminating(job_id: Annotated[int, Parameter(ge=1)],
                          data: JSONBody[JobNodeRequest]) -> PodStatus:
        return await guarded("terminating",
                             lambda: scheduler.job_terminating(job_id, data.node))

    @post("/hooks/v1/jobs/{job_id:int}/started", status_code=200,
          summary="A placeholder job's script started: bind its Pod now (no need to wait for "
                  "the next poll of Slurm)")
    async def started(job_id: Annotated[int, Parameter(ge=1)],
                      data: JSONBody[JobNodeRequest]) -> PodStatus:
        return await guarded("started", lambda: scheduler.job_started(job_id, data.node))

    @post("/hooks/v1/jobs/{job_id:int}/drain", status_code=200,
          summary="KillWait is near and the Pod is still there: drain the job's Slurm node")
    async def drain(job_id: Annotated[int, Parameter(ge=1)],
                    data: JSONBody[JobNodeRequest]) -> PodStatus:
        return await guarded("drain", lambda: scheduler.drain_for_job(job_id, data.node))

    @get("/hooks/v1/jobs/{job_id:int}/pod", summary="Whether a job's Pod is gone (long poll)")
    async def pod_status(job_id: Annotated[int, Parameter(ge=1)],
                         wait: Annotated[float, Parameter(ge=0, le=MAX_WAIT)] = 0) -> PodStatus:
        return await guarded("pod", lambda: scheduler.wait_pod_gone(job_id, wait))

    @post("/hooks/v1/nodes/{node:str}/lock", status_code=200,
          summary="The prolog: lock the node for a job and wait (long poll) until it is locked")
    async def lock(node: Annotated[str, Parameter(pattern=r"^[A-Za-z0-9._-]{1,256}$")],
                   data: JSONBody[LockRequestBody],
                   wait: Annotated[float, Parameter(ge=0, le=MAX_WAIT)] = 0) -> LockStatus:
        if locks is None:
            raise HTTPException(status_code=503, detail="the syncer component is not running")
        if in_flight.locked():
            metrics.HOOK_CALLS.labels(hook="lock", status="429").inc()
            raise HTTPException(status_code=429, detail="too many hook calls in flight; retry",
                                headers={"Retry-After": "1"})
        if not scheduler.ready.is_set():
            raise HTTPException(status_code=503, detail="the scheduler is starting; retry")
        async with in_flight:
            state = await locks.request_lock(node, data.job_id, data.strict, wait)
        if state is None:
            metrics.HOOK_CALLS.labels(hook="lock", status="404").inc()
            raise NotFoundException(detail=f"no slurmd Pod has hostname {node}")
        metrics.HOOK_CALLS.labels(hook="lock", status="200").inc()
        wanted = LockState.LOCKED_STRICT if data.strict else LockState.LOCKED
        return LockStatus(node=node, state=state.value,
                          locked=state is wanted or state is LockState.LOCKED_STRICT)

    def refused(_: Request, exc: Exception) -> Response[dict[str, object]]:  # type: ignore[type-arg]
        status = getattr(exc, "status_code", 500)
        detail = getattr(exc, "detail", str(exc))
        extra = getattr(exc, "extra", None)
        return Response({"status_code": status, "detail": detail, "errors": extra},
                        status_code=status, headers=getattr(exc, "headers", None))

    return Litestar(
        [terminating, started, drain, pod_status, lock], guards=[authorized], logging_config=None,
        exception_handlers={HTTPException: refused},
        openapi_config=OpenAPIConfig(title="sunk hook API", version="1"))
