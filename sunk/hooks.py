"""The hook API that Slurm's scripts call (served on ``--hooks-api-bind-address``).

Every call carries a credential (``Authorization: Bearer ...``, :mod:`sunk.hookauth`): the
prolog presents the node secret, a placeholder job the credential minted for its own Pod. A job
credential is good only for the hooks of that Pod's job, never for a lock, and a call must also
match what Slurm says of the job (a ``started`` only for a job Slurm runs on that node, a lock
only for a node a job of Slurm's is starting on): refused calls get 403 or 409 with the reason.

Calls are answered from the scheduler's caches where they can be, and at most ``max_in_flight``
are handled at once, so a flood of calls cannot starve scheduling: the excess is told to retry
(429). An outage of the API server or Slurm is answered 503 with Retry-After, never a 500.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Annotated, Protocol, TypeVar

from litestar import Litestar, Request, Response, get, post
from litestar.connection import ASGIConnection
from litestar.exceptions import HTTPException, NotAuthorizedException
from litestar.handlers import BaseRouteHandler
from litestar.openapi import OpenAPIConfig
from litestar.params import JSONBody, Parameter
from pydantic import BaseModel, Field

from sunk import metrics
from sunk.hookauth import JOB_PREFIX, HookKeys, HookRefused, bearer
from sunk.locking import LockState

MAX_WAIT = 30.0
NODE_PATTERN = r"^[A-Za-z0-9._-]{1,256}$"
T = TypeVar("T")


class HookScheduler(Protocol):
    """What the hook API asks of the scheduler. Each call returns the job's Pod (``ns/name``)
    and whether it is gone, None for a job that is not one of ours, or raises HookRefused."""

    ready: asyncio.Event

    def job_owner(self, job_id: int) -> str | None: ...

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

    job_id: int = Field(ge=1, le=2**32 - 1)
    strict: bool = Field(default=False,
                         description="A placeholder job of sunk's: no other workload may stay")


class LockStatus(BaseModel):
    node: str
    state: str = Field(description="false | pending | locked | locked_strict")
    locked: bool


class JobNodeRequest(BaseModel):
    """Sent by the placeholder job: which Slurm node it runs on."""

    node: str = Field(min_length=1, max_length=256, pattern=NODE_PATTERN,
                      description="The Slurm node the job runs on")


class PodStatus(BaseModel):
    pod: str = Field(description="namespace/name of the job's Pod")
    gone: bool = Field(description="Whether the Pod object no longer exists")


JobId = Annotated[int, Parameter(ge=1, le=2**32 - 1)]
Wait = Annotated[float, Parameter(ge=0, le=MAX_WAIT)]


def _refuse(hook: str, status: int, detail: str, retry_after: int | None = None) -> HTTPException:
    metrics.HOOK_CALLS.labels(hook=hook, status=str(status)).inc()
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return HTTPException(status_code=status, detail=detail, headers=headers)


def create_hooks_app(scheduler: HookScheduler, *, keys: HookKeys,
                     locks: HookLocks | None = None, max_in_flight: int = 64) -> Litestar:
    in_flight = asyncio.Semaphore(max_in_flight)

    async def authenticated(connection: ASGIConnection, _: BaseRouteHandler) -> None:  # type: ignore[type-arg]
        # async: Litestar runs a plain function guard in a worker thread, a thread hop per call
        if not keys.configured():
            raise HTTPException(status_code=503,
                                detail="the hook API has no secret configured; refusing calls")
        presented = bearer(connection.headers.get("authorization", ""))
        if presented is None or not (presented.startswith(JOB_PREFIX)
                                     or keys.is_node_secret(presented)):
            raise NotAuthorizedException(detail="missing or wrong hook credential")

    def caller(request: Request) -> str:  # type: ignore[type-arg]
        return bearer(request.headers.get("authorization", "")) or ""

    def authorize_job(hook: str, request: Request, job_id: int) -> None:  # type: ignore[type-arg]
        """The node secret may call for any job; a job credential only for its own Pod's.

        A placeholder whose job Slurm lost (a slurmctld crash) may find the id given to another
        Pod's job: when its credential proves it is the Pod it names (``X-Sunk-Pod-Uid``), it
        is told the job is not one of ours any more (404: release the node), not refused."""
        presented = caller(request)
        if keys.is_node_secret(presented):
            return
        owner = scheduler.job_owner(job_id)
        if owner is None:
            raise _refuse(hook, 404, f"no such job of this scheduler: {job_id}")
        if keys.is_job_credential(presented, owner):
            return
        claimed = request.headers.get("x-sunk-pod-uid", "")[:64]
        if claimed and keys.is_job_credential(
                presented, owner.rsplit("/", 1)[0] + "/" + claimed):
            raise _refuse(hook, 404, f"no such job of this scheduler for Pod uid {claimed}: "
                                     f"job {job_id} is another Pod's now (Slurm lost yours)")
        raise _refuse(hook, 403, f"this credential is not job {job_id}'s: a placeholder "
                                 "job may only call the hooks of its own job")

    async def answer(hook: str, call: Callable[[], Awaitable[T | None]], missing: str) -> T:
        """Run one hook's work within the in-flight bound; refusals become 4xx/503."""
        if in_flight.locked():
            raise _refuse(hook, 429, "too many hook calls in flight; retry", retry_after=1)
        if not scheduler.ready.is_set():
            raise _refuse(hook, 503, "the scheduler is starting; retry", retry_after=2)
        try:
            async with in_flight:
                result = await call()
        except HookRefused as refused:
            raise _refuse(hook, refused.status, refused.detail, refused.retry_after) from None
        if result is None:
            raise _refuse(hook, 404, missing)
        metrics.HOOK_CALLS.labels(hook=hook, status="200").inc()
        return result

    async def job_hook(hook: str, request: Request, job_id: int,  # type: ignore[type-arg]
                       call: Callable[[], Awaitable[tuple[str, bool] | None]]) -> PodStatus:
        authorize_job(hook, request, job_id)
        pod, gone = await answer(hook, call, f"no such job of this scheduler: {job_id}")
        return PodStatus(pod=pod, gone=gone)

    @post("/hooks/v1/jobs/{job_id:int}/terminating", status_code=200,
          summary="A placeholder job is ending: delete its Pod")
    async def terminating(request: Request, job_id: JobId,  # type: ignore[type-arg]
                          data: JSONBody[JobNodeRequest]) -> PodStatus:
        return await job_hook("terminating", request, job_id,
                              lambda: scheduler.job_terminating(job_id, data.node))

    @post("/hooks/v1/jobs/{job_id:int}/started", status_code=200,
          summary="A placeholder job's script started: bind its Pod now (no need to wait for "
                  "the next poll of Slurm)")
    async def started(request: Request, job_id: JobId,  # type: ignore[type-arg]
                      data: JSONBody[JobNodeRequest]) -> PodStatus:
        return await job_hook("started", request, job_id,
                              lambda: scheduler.job_started(job_id, data.node))

    @post("/hooks/v1/jobs/{job_id:int}/drain", status_code=200,
          summary="KillWait is near and the Pod is still there: drain the job's Slurm node")
    async def drain(request: Request, job_id: JobId,  # type: ignore[type-arg]
                    data: JSONBody[JobNodeRequest]) -> PodStatus:
        return await job_hook("drain", request, job_id,
                              lambda: scheduler.drain_for_job(job_id, data.node))

    @get("/hooks/v1/jobs/{job_id:int}/pod", summary="Whether a job's Pod is gone (long poll)")
    async def pod_status(request: Request, job_id: JobId,  # type: ignore[type-arg]
                         wait: Wait = 0) -> PodStatus:
        return await job_hook("pod", request, job_id,
                              lambda: scheduler.wait_pod_gone(job_id, wait))

    @post("/hooks/v1/nodes/{node:str}/lock", status_code=200,
          summary="The prolog: lock the node for a job and wait (long poll) until it is locked")
    async def lock(request: Request,  # type: ignore[type-arg]
                   node: Annotated[str, Parameter(pattern=NODE_PATTERN)],
                   data: JSONBody[LockRequestBody], wait: Wait = 0) -> LockStatus:
        if not keys.is_node_secret(caller(request)):
            raise _refuse("lock", 403, "locking a node takes the node secret (the prolog's), "
                                       "not a job credential")
        if locks is None:
            raise _refuse("lock", 503, "the syncer component is not running", retry_after=5)
        state = await answer("lock", lambda: locks.request_lock(node, data.job_id, data.strict,
                                                                wait),
                             f"no slurmd Pod has hostname {node}")
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
        [terminating, started, drain, pod_status, lock], guards=[authenticated],
        logging_config=None, exception_handlers={HTTPException: refused},
        openapi_config=OpenAPIConfig(title="sunk hook API", version="1"))
