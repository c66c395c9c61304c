"""The Kubernetes API: the only module that imports kr8s.

kr8s's own watch reconnects with a stale resourceVersion on ``410 Gone`` and no backoff (its
issue #476), so :class:`Informer` does list-then-watch itself: it re-lists on 410, skips
bookmarks, keeps the newest resourceVersion and backs off on errors.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import kr8s
import kr8s.asyncio
import msgspec
from httpx_aiohttp import HttpxAiohttpClient

log = logging.getLogger("sunk.kube")

Obj = dict[str, Any]
Handler = Callable[[str, Obj], Awaitable[None] | None]


_decode = msgspec.json.Decoder().decode

#: What a call raises when the API server cannot be reached or drops the connection (kr8s
#: passes httpx's errors through; aiohttp's and the OS's can surface from the transport).
UNREACHABLE = (httpx.HTTPError, OSError, aiohttp.ClientError, kr8s.APITimeoutError)


class KubeError(Exception):
    def __init__(self, message: str, *, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


async def connect_waiting(kubeconfig: Path | None) -> kr8s.asyncio.Api:
    """:func:`connect`, waiting out an API server that is not up yet (a control-plane restart
    while the scheduler starts is no reason to crash-loop)."""
    delay = 0.5
    while True:
        try:
            return await connect(kubeconfig)
        except (*UNREACHABLE, kr8s.ServerError) as exc:
            log.warning("the API server does not answer (%s); trying again in %.0fs", exc, delay)
            await asyncio.sleep(delay)
            delay = min(30.0, delay * 2)


async def connect(kubeconfig: Path | None) -> kr8s.asyncio.Api:
    """An API client from ``kubeconfig``, or the in-cluster service account.

    kr8s's httpx session is rebuilt on aiohttp's connections (same base URL, headers, TLS
    context and timeout, so kr8s's own re-authentication keeps working): httpcore's pool and
    TLS layers cost about twice the CPU per call, and the scheduler is CPU-bound on its calls
    (docs/benchmarks.md)."""
    api = await kr8s.asyncio.api(kubeconfig=str(kubeconfig) if kubeconfig else None)
    create_session = api._create_session

    async def create_session_on_aiohttp() -> None:
        await create_session()
        plain = api._session
        assert plain is not None
        api._session = HttpxAiohttpClient(
            base_url=plain.base_url, headers=plain.headers, timeout=plain.timeout,
            verify=await api.auth.ssl_context(),  # type: ignore[no-untyped-call]
            follow_redirects=True, proxy=api.auth.proxy)
        await plain.aclose()

    api._create_session = create_session_on_aiohttp  # type: ignore[method-assign]
    if api._session is not None:  # kr8s made one already (it asks the server's version)
        await create_session_on_aiohttp()
    return api


async def close(api: kr8s.asyncio.Api) -> None:
    """kr8s has no close(); its httpx session must still be closed before the loop ends."""
    if api._session is not None:
        await api._session.aclose()


def key(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


async def request(api: kr8s.asyncio.Api, method: str, url: str, *, namespace: str | None = None,
                  version: str = "v1", **kwargs: Any) -> Obj:
    """One API call; errors become KubeError with the server's status and message."""
    try:
        async with api.call_api(method, version=version, namespace=namespace, url=url,
                                **kwargs) as r:
            return _decode(r.content) if r.content else {}
    except kr8s.ServerError as exc:
        status = exc.response.status_code if exc.response is not None else 0
        raise KubeError(f"{method} {url}: {exc}", status=status) from exc
    except UNREACHABLE as exc:  # the API server is down, restarting or out of reach
        raise KubeError(f"{method} {url}: {exc!r}") from exc


class Informer:
    """A cache of one kind of object kept current by list-then-watch; calls ``handler(type, obj)``
    for ADDED, MODIFIED and DELETED (objects gone during a disconnect arrive as DELETED)."""

    def __init__(self, api: kr8s.asyncio.Api, resource: str, *, namespace: str | None = None,
                 version: str = "v1", label_selector: str | None = None,
                 field_selector: str | None = None, handler: Handler | None = None) -> None:
        self.api, self.resource, self.namespace, self.version = api, resource, namespace, version
        self.params = {k: v for k, v in (("labelSelector", label_selector),
                                         ("fieldSelector", field_selector)) if v}
        self.handler = handler
        self.cache: dict[str, Obj] = {}
        #: Grows with every change to the cache: what is derived from it can be kept until then.
        self.generation = 0
        self.synced = asyncio.Event()
        self.healthy = False
        self.last_error = ""

    async def _emit(self, kind: str, obj: Obj) -> None:
        if self.handler is not None:
            result = self.handler(kind, obj)
            if asyncio.iscoroutine(result):
                await result

    async def _list(self) -> str:
        body = await request(self.api, "GET", self.resource, namespace=self.namespace,
                             version=self.version, params=self.params)
        fresh = {key(o): o for o in body.get("items") or []}
        gone = [o for k, o in self.cache.items() if k not in fresh]
        self.cache = fresh
        self.generation += 1
        for obj in gone:
            await self._emit("DELETED", obj)
        for obj in fresh.values():
            await self._emit("ADDED", obj)
        self.synced.set()
        self.healthy, self.last_error = True, ""
        return str(body["metadata"]["resourceVersion"])

    async def _watch(self, rv: str) -> str:
        params = {**self.params, "watch": "true", "resourceVersion": rv,
                  "allowWatchBookmarks": "true", "timeoutSeconds": "300"}
        async with self.api.call_api("GET", version=self.version, namespace=self.namespace,
                                     url=self.resource, params=params, stream=True,
                                     timeout=httpx.Timeout(None, connect=10)) as r:
            async for line in r.aiter_lines():
                if not line.strip():
                    continue
                # msgspec: several times faster than json, and watch events are most of what
                # the scheduler reads
                event = _decode(line)
                kind, obj = event["type"], event["object"]
                if kind == "ERROR":
                    code = obj.get("code")
                    raise KubeError(f"watch {self.resource}: {obj.get('message')}",
                                    status=int(code or 0))
                rv = obj["metadata"]["resourceVersion"]
                if kind == "BOOKMARK":
                    continue
                if kind == "DELETED":
                    self.cache.pop(key(obj), None)
                else:
                    self.cache[key(obj)] = obj
                self.generation += 1
                await self._emit(kind, obj)
        return rv

    async def run(self) -> None:
        """Forever: list, then watch from there; re-list on 410 Gone; back off on errors."""
        delay = 0.5
        rv: str | None = None
        while True:
            try:
                if rv is None:
                    rv = await self._list()
                rv = await self._watch(rv)
                self.healthy, self.last_error, delay = True, "", 0.5
            except asyncio.CancelledError:
                raise
            except (KubeError, kr8s.ServerError) as exc:
                status = getattr(exc, "status", 0) or (
                    exc.response.status_code if isinstance(exc, kr8s.ServerError)
                    and exc.response is not None else 0)
                if status == 410:
                    log.info("watch of %s expired (410 Gone); listing again", self.resource)
                    rv = None
                    continue
                self._failed(exc)
                rv = None
            except (*UNREACHABLE, ValueError, KeyError, TypeError, msgspec.DecodeError) as exc:
                self._failed(exc)
                # A dropped stream keeps its resourceVersion: resume where it stopped.
            except Exception as exc:  # never end the watch: log, back off, list again
                log.exception("watching %s failed unexpectedly", self.resource)
                self._failed(exc)
                rv = None
            await asyncio.sleep(delay)
            delay = min(30.0, delay * 2)

    def _failed(self, exc: BaseException) -> None:
        self.healthy, self.last_error = False, f"{type(exc).__name__}: {exc}"
        log.warning("watching %s failed: %s", self.resource, self.last_error)


# -- writes ---------------------------------------------------------------------------------


async def bind(api: kr8s.asyncio.Api, pod: Obj, node: str) -> None:
    """Bind as kube-scheduler's DefaultBinder does: a Binding carrying the Pod's uid, so a Pod
    deleted and recreated under the same name is never bound by mistake."""
    meta = pod["metadata"]
    body = {"apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"],
                         "uid": meta["uid"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
    await request(api, "POST", f"pods/{meta['name']}/binding", namespace=meta["namespace"],
                  json=body)


async def annotate(api: kr8s.asyncio.Api, kind: str, namespace: str | None, name: str,
                   annotations: dict[str, str | None]) -> Obj:
    """Merge-patch annotations (None removes one)."""
    return await request(api, "PATCH", f"{kind}/{name}", namespace=namespace,
                         json={"metadata": {"annotations": annotations}},
                         headers={"Content-Type": "application/merge-patch+json"})


async def delete_pod(api: kr8s.asyncio.Api, pod: Obj, *, grace: int | None = None) -> None:
    """Delete the Pod (only this incarnation of it: uid precondition). Gone already is fine."""
    meta = pod["metadata"]
    body: Obj = {"apiVersion": "v1", "kind": "DeleteOptions",
                 "preconditions": {"uid": meta["uid"]}}
    if grace is not None:
        body["gracePeriodSeconds"] = grace
    try:
        await request(api, "DELETE", f"pods/{meta['name']}", namespace=meta["namespace"],
                      json=body)
    except KubeError as exc:
        if exc.status not in (404, 409):
            raise


async def event(api: kr8s.asyncio.Api, obj: Obj, *, reason: str, message: str,
                kind: str = "Pod", type_: str = "Normal", component: str = "sunk") -> None:
    """A core/v1 Event on ``obj`` (``kubectl describe`` shows it). Failures are only logged:
    an Event is a courtesy, never a reason to stop."""
    meta = obj["metadata"]
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    ns = meta.get("namespace") or "default"
    body = {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": ns},
        "involvedObject": {"apiVersion": "v1", "kind": kind, "name": meta["name"],
                           "namespace": meta.get("namespace"), "uid": meta.get("uid")},
        "reason": reason, "message": message[:1024], "type": type_,
        "source": {"component": component}, "reportingComponent": component,
        "firstTimestamp": now[:19] + "Z", "lastTimestamp": now[:19] + "Z", "count": 1,
    }
    try:
        await request(api, "POST", "events", namespace=ns, json=body)
    except KubeError as exc:
        log.warning("could not record Event %s on %s/%s: %s", reason, ns, meta["name"], exc)
