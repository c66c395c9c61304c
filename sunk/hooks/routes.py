"""The hook API that Slurm's scripts call (served on ``--hooks-api-bind-address``).

Every call carries a credential (``Authorization: Bearer ...``, :mod:`sunk.hooks.auth`): the
prolog presents the node secret, a placeholder job the credential minted for its own Pod. A job
credential is good only for the hooks of that Pod's job, never for a lock, and a call must also
match what Slurm says of the job (a ``started`` only for a job Slurm runs on that node, a lock
only for a node a job of Slurm's is starting on): refused calls get 403 or 409 with the reason.

Calls are answered from the scheduler's caches where they can be, and at most ``max_in_flight``
are at work at once, so a flood of calls cannot starve scheduling: the excess is told to retry
(429). A long poll waiting (a lock not taken yet, a Pod not gone yet), or a lock's read of
its job from slurmrestd, is not at work (:mod:`sunk.hooks.inflight`). An outage of the API server
or Slurm is answered 503 with Retry-After, never a 500.

Served by :mod:`sunk.http.server` (``sunk.runtime.servers.serve_hooks``): two calls per Pod come
here, each on a new connection (curl). The server's CPU per such call was about 265 µs with
aiohttp.web (which had replaced Litestar on uvicorn), 125 µs on sunk's own server. What a caller
sees is what it saw from Litestar: the routes below (a trailing or doubled slash is ignored),
every error a JSON body ``{"status_code", "detail", "errors"}``, the input checks of
:mod:`sunk.hooks.inputs`, made in the same order (route, method, credential, body, path and
query, then the call itself).

=========================================  ==============================================
``POST /hooks/v1/jobs/{id}/terminating``   a placeholder job is ending: delete its Pod
``POST /hooks/v1/jobs/{id}/started``       a placeholder job's script started: bind its Pod
``POST /hooks/v1/jobs/{id}/drain``         KillWait is near, the Pod is still there: drain
``GET /hooks/v1/jobs/{id}/pod?wait=``      whether the job's Pod is gone (long poll)
``POST /hooks/v1/nodes/{node}/lock?wait=`` the prolog: lock the node for a job (long poll)
=========================================  ==============================================
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol, TypeVar
from urllib.parse import unquote

import msgspec

from sunk.hooks.auth import JOB_PREFIX, HookKeys, HookRefused, bearer, job_owner
from sunk.hooks.inflight import InFlight
from sunk.hooks.inputs import (
    ErrorMessage,
    JobId,
    LockStatus,
    Node,
    PodStatus,
    Wait,
    check,
    job_node_request,
    lock_request,
)
from sunk.http.server import Handler, Request, Response
from sunk.plans.locking import LockState
from sunk.runtime import metrics

log = logging.getLogger("sunk.hooks.routes")
T = TypeVar("T")
#: The largest body read (Litestar's default, which the API had): larger is refused with 413.
MAX_BODY = 10_000_000
JOB_HOOKS = frozenset({"terminating", "started", "drain", "pod"})
#: A Host header of other characters is refused (400), as Litestar's router did.
_HOST = re.compile(r"[0-9A-Za-z!$&'()*+,;=\-._~:\[\]@%]*")


class HookScheduler(Protocol):
    """What the hook API asks of the scheduler. Each call returns the job's Pod (``ns/name``)
    and whether it is gone, None for a job that is not one of ours, or raises HookRefused."""

    ready: asyncio.Event
    scheduler_name: str

    def job_owner(self, job_id: int) -> str | None: ...

    async def read_job(self, job_id: int) -> None:
        """Learn the job from Slurm now (raises HookRefused 503 while Slurm does not answer)."""

    async def job_terminating(self, job_id: int, node: str) -> tuple[str, bool] | None: ...

    async def wait_pod_gone(self, job_id: int, within: float) -> tuple[str, bool] | None: ...

    async def drain_for_job(self, job_id: int, node: str) -> tuple[str, bool] | None: ...

    async def job_started(self, job_id: int, node: str) -> tuple[str, bool] | None: ...


class HookLocks(Protocol):
    """What the hook API asks of the syncer (node locks)."""

    async def request_lock(self, node: str, job_id: int, strict: bool,
                           within: float) -> LockState | None: ...


class _Answer(Exception):
    """An answer other than 200: the JSON error body, and its headers."""

    def __init__(self, status: int, detail: str, errors: list[ErrorMessage] | None = None,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.errors = errors
        self.headers = headers

    def response(self) -> Response:
        body = {"status_code": self.status, "detail": self.detail, "errors": self.errors}
        return _json(self.status, msgspec.json.encode(body), self.headers)


def _json(status: int, body: bytes, headers: Mapping[str, str] | None = None) -> Response:
    return Response(status, body, "application/json", headers)


def _count(hook: str, status: int) -> None:
    metrics.child(metrics.HOOK_CALLS, hook, str(status)).inc()


def _refuse(hook: str, status: int, detail: str, retry_after: int | None = None) -> _Answer:
    _count(hook, status)
    if status == 404 and hook in JOB_HOOKS:  # a placeholder told this lets its node go
        log.info("hook %s: 404: %s", hook, detail)
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return _Answer(status, detail, headers=headers)


_NO_BODY = object()


def _not_found() -> _Answer:
    return _Answer(404, "Not Found")


def _header(request: Request, name: str) -> str:
    """A header's bytes read as Latin-1, as ASGI servers give them."""
    return request.headers.get(name.lower(), "")


def _parse_query(query: str) -> dict[str, str]:
    """``dict(parse_qsl(query, keep_blank_values=True))``, without its cost for the plain
    ``wait=20`` that Slurm's scripts send."""
    parsed = {}
    for pair in query.split("&"):
        if pair:
            name, _, value = pair.partition("=")
            parsed[_unquote_plus(name)] = _unquote_plus(value)
    return parsed


def _unquote_plus(text: str) -> str:
    if "%" in text or "+" in text:
        return unquote(text.replace("+", " "))
    return text


class _Call:
    """One request's route and parameters, read the way the API has always read them: the
    path percent-decoded, empty segments dropped; a query parameter's last value counts."""

    def __init__(self, request: Request) -> None:
        host = request.headers.get("host")
        if host is not None and _HOST.fullmatch(host) is None:
            raise _Answer(400, "Invalid host header")
        raw = request.path
        parts = [part for part in (unquote(raw) if "%" in raw else raw).split("/") if part]
        if not (len(parts) == 5 and parts[0] == "hooks" and parts[1] == "v1"
                and ((parts[2] == "jobs" and parts[4] in JOB_HOOKS)
                     or (parts[2] == "nodes" and parts[4] == "lock"))):
            raise _not_found()
        self.request = request
        self.hook = parts[4]
        self.param = parts[3]
        self.path = "/" + "/".join(parts)
        self.query = request.query
        self._query: dict[str, str] | None = None

    def query_value(self, name: str) -> str | None:
        if self._query is None:
            self._query = _parse_query(self.query)
        return self._query.get(name)

    def source(self, key: str, default: str) -> str:
        """Where an input was read from, as Litestar named it (a query parameter of the name
        first)."""
        return "query" if self.query_value(key) is not None else default

    def invalid(self, errors: list[ErrorMessage]) -> _Answer:
        query = f"?{self.query}" if self.query else ""
        return _Answer(400, f"Validation failed for {self.request.method} {self.path}{query}",
                       errors)


def create_hooks_app(scheduler: HookScheduler, *, keys: HookKeys,
                     locks: HookLocks | None = None, max_in_flight: int = 64) -> Handler:
    """The hook API: one function that answers every call (served by
    ``sunk.runtime.servers.serve_hooks``, bodies up to :data:`MAX_BODY`)."""
    in_flight = InFlight(max_in_flight)

    def authenticate(request: Request) -> str:
        """The caller's credential, once it is one this API accepts at all."""
        if not keys.configured():
            raise _Answer(503, "the hook API has no secret configured; refusing calls")
        presented = bearer(_header(request, "Authorization"))
        if presented is None or not (presented.startswith(JOB_PREFIX)
                                     or keys.is_node_secret(presented)):
            raise _Answer(401, "missing or wrong hook credential")
        return presented

    def admit(hook: str) -> None:
        """A hook's work waits for room in the in-flight bound, and for the scheduler to have
        adopted every job: before that, what it knows of a job proves nothing (429 or 503: the
        caller retries)."""
        if in_flight.full:
            raise _refuse(hook, 429, "too many hook calls in flight; retry", retry_after=1)
        if not scheduler.ready.is_set():
            raise _refuse(hook, 503, "the scheduler is starting; retry", retry_after=2)

    def admitted(hook: str) -> contextlib.AbstractContextManager[None]:
        admit(hook)
        return in_flight.working_on()

    async def authorize_job(hook: str, request: Request, presented: str, job_id: int) -> None:
        """The node secret may call for any job; a job credential only for its own Pod's.

        A 404 tells a placeholder its job is not one of ours, and it lets its node go: never
        said while the scheduler is starting (its job table is not whole yet), and to a
        placeholder that proves which Pod it is for (``X-Sunk-Pod-Uid``) only on Slurm's word,
        read now. A placeholder whose job Slurm lost (a slurmctld crash) may find the id given
        to another Pod's job: it is told the job is not one of ours any more (404), not
        refused."""
        if keys.is_node_secret(presented):
            return
        admit(hook)
        owner = scheduler.job_owner(job_id)
        if owner is not None and keys.is_job_credential(presented, owner):
            return
        claimed = _header(request, "X-Sunk-Pod-Uid")[:64]
        proven = bool(claimed) and keys.is_job_credential(
            presented, job_owner(scheduler.scheduler_name, claimed))
        if owner is None and proven:
            try:
                with admitted(hook):
                    await scheduler.read_job(job_id)
            except HookRefused as refused:
                raise _refuse(hook, refused.status, refused.detail,
                              refused.retry_after) from None
            owner = scheduler.job_owner(job_id)
            if owner is not None and keys.is_job_credential(presented, owner):
                return
        if owner is None:
            raise _refuse(hook, 404, f"no such job of this scheduler: {job_id}")
        if proven:
            raise _refuse(hook, 404, f"no such job of this scheduler for Pod uid {claimed}: "
                                     f"job {job_id} is another Pod's now (Slurm lost yours)")
        raise _refuse(hook, 403, f"this credential is not job {job_id}'s: a placeholder "
                                 "job may only call the hooks of its own job")

    async def answer(hook: str, call: Callable[[], Awaitable[T | None]], missing: str) -> T:
        """Run one hook's work within the in-flight bound; refusals become 4xx/503."""
        try:
            with admitted(hook):
                result = await call()
        except HookRefused as refused:
            raise _refuse(hook, refused.status, refused.detail, refused.retry_after) from None
        if result is None:
            raise _refuse(hook, 404, missing)
        _count(hook, 200)
        return result

    def read_body(call: _Call) -> object:
        """The JSON body; _NO_BODY when it is empty (Litestar's "'data'" error, reported with
        the path's and the query's, where a body that is not JSON or not of the model is
        reported alone)."""
        request = call.request
        length = request.content_length
        if request.too_large or (length is not None and length > MAX_BODY):
            raise _Answer(413, "Request Entity Too Large")
        body = request.body
        if not body:
            return _NO_BODY
        try:
            return msgspec.json.decode(body)
        except msgspec.DecodeError as exc:
            raise _Answer(400, str(exc)) from None

    def refused_body(call: _Call, errors: list[ErrorMessage]) -> _Answer:
        for error in errors:
            if "key" in error and call.query_value(error["key"]) is not None:
                error["source"] = "query"
        return call.invalid(errors)

    def missing_body() -> ErrorMessage:
        return {"message": "'data'", "key": "data", "source": "body"}

    async def job_hook(call: _Call, job_id: int, presented: str) -> Response:
        hook, errors = call.hook, []
        job, error = check(job_id, JobId, "job_id")
        if error is not None:
            errors.append({**error, "source": call.source("job_id", "path")})
        node, within = "", 0.0
        if hook == "pod":
            within, error = wait(call)
            if error is not None:
                errors.append(error)
        else:
            data = read_body(call)
            if data is not _NO_BODY:
                body = job_node_request(data)
                if isinstance(body, list):
                    raise refused_body(call, body)
                node = body.node
            else:
                errors.append(missing_body())
        if errors:
            raise call.invalid(errors)
        await authorize_job(hook, call.request, presented, job)
        if hook == "pod":
            work = functools.partial(scheduler.wait_pod_gone, job, within)
        elif hook == "started":
            work = functools.partial(scheduler.job_started, job, node)
        elif hook == "terminating":
            work = functools.partial(scheduler.job_terminating, job, node)
        else:
            work = functools.partial(scheduler.drain_for_job, job, node)
        pod, gone = await answer(hook, work, f"no such job of this scheduler: {job}")
        return _json(200, msgspec.json.encode(PodStatus(pod=pod, gone=gone)))

    def wait(call: _Call) -> tuple[float, ErrorMessage | None]:
        text = call.query_value("wait")
        if text is None:
            return 0.0, None
        within, error = check(text, Wait, "wait")
        return within, (None if error is None else {**error, "source": "query"})

    async def lock(call: _Call, presented: str) -> Response:
        errors: list[ErrorMessage] = []
        node, error = check(call.param, Node, "node")
        if error is not None:
            errors.append({**error, "source": call.source("node", "path")})
        data = read_body(call)
        job_id, strict = 0, False
        if data is not _NO_BODY:
            body = lock_request(data)
            if isinstance(body, list):
                raise refused_body(call, body)
            job_id, strict = body.job_id, body.strict
        else:
            errors.append(missing_body())
        within, error = wait(call)
        if error is not None:
            errors.append(error)
        if errors:
            raise call.invalid(errors)
        if not keys.is_node_secret(presented):
            raise _refuse("lock", 403, "locking a node takes the node secret (the prolog's), "
                                       "not a job credential")
        if locks is None:
            raise _refuse("lock", 503, "the syncer component is not running", retry_after=5)
        state = await answer("lock", functools.partial(locks.request_lock, node, job_id, strict,
                                                       within),
                             f"no slurmd Pod has hostname {node}")
        wanted = LockState.LOCKED_STRICT if strict else LockState.LOCKED
        status = LockStatus(node=node, state=state.value,
                            locked=state is wanted or state is LockState.LOCKED_STRICT)
        return _json(200, msgspec.json.encode(status))

    async def route(request: Request) -> Response:
        call = _Call(request)
        allowed = "GET" if call.hook == "pod" else "POST"
        method = request.method
        if method != allowed and method != "OPTIONS":
            raise _Answer(405, "Method Not Allowed", headers={"Allow": f"{allowed}, OPTIONS"})
        job_id = 0
        if call.hook != "lock":
            try:
                job_id = int(call.param)
            except ValueError:
                raise _not_found() from None
        presented = authenticate(request)
        if method == "OPTIONS":
            return Response(204, headers={
                "Allow": "GET, OPTIONS" if allowed == "GET" else "OPTIONS, POST"})
        if call.hook == "lock":
            return await lock(call, presented)
        return await job_hook(call, job_id, presented)

    async def handle(request: Request) -> Response:
        """A refusal's JSON answer; any other exception is the server's to log (a 500)."""
        try:
            return await route(request)
        except _Answer as refused:
            return refused.response()

    return handle
