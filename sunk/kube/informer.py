"""List-then-watch caches of API objects.

kr8s's own watch reconnects with a stale resourceVersion on ``410 Gone`` and no backoff (its
issue #476), so :class:`Informer` does list-then-watch itself: it re-lists on 410, skips
bookmarks, keeps the newest resourceVersion and backs off on errors.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from sunk.kube.client import Client, KubeError, Obj
from sunk.objects import Decoded

log = logging.getLogger("sunk.kube")

Handler = Callable[[str, Obj], Awaitable[None] | None]

#: How long the server keeps one watch open; then it ends and is resumed where it stopped.
WATCH_SECONDS = 300

_decode = msgspec.json.Decoder().decode

#: Events handled between two turns given to the rest of the event loop. A burst (a thousand
#: Pods deleted at once) arrives already read, and would otherwise be handled in one go while
#: hook calls and dashboard pages wait.
YIELD_EVERY = 16


def key(obj: Obj) -> str:
    """``namespace/name``, or ``name`` for a cluster-scoped object: the cache key."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


def created(obj: Obj) -> float:
    """When the object was created (epoch seconds; now if it does not say)."""
    text = (obj.get("metadata") or {}).get("creationTimestamp")
    if not isinstance(text, str) or not text:
        return time.time()
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return time.time()


def _slim(obj: Obj) -> Obj:
    """The object without ``metadata.managedFields``: nothing here reads them, and they are
    often the largest part of a Pod (as client-go's informers, the cache drops them)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


class Informer:
    """A cache of one kind of object kept current by list-then-watch; calls ``handler(type, obj)``
    for ADDED, MODIFIED and DELETED (objects gone during a disconnect arrive as DELETED)."""

    def __init__(self, api: Client, resource: str, *, namespace: str | None = None,
                 version: str = "v1", label_selector: str | None = None,
                 field_selector: str | None = None, handler: Handler | None = None,
                 trim: Callable[[Obj], Obj] = _slim,
                 decoded: Decoded[Any] | None = None) -> None:
        self.api, self.resource, self.namespace, self.version = api, resource, namespace, version
        #: What the cache keeps of each object (by default all but managedFields).
        self.trim = trim
        #: Where the typed fields of each cached object are kept (Pods and Nodes).
        self.decoded = decoded
        self.params = {k: v for k, v in (("labelSelector", label_selector),
                                         ("fieldSelector", field_selector)) if v}
        self.handler = handler
        self.cache: dict[str, Obj] = {}
        #: Grows with every change to the cache: what is derived from it can be kept until then.
        self.generation = 0
        self.synced = asyncio.Event()
        self.healthy = False
        self.last_error = ""
        #: Where the next watch starts: the newest resourceVersion seen; None: list first.
        self.resource_version: str | None = None

    async def _emit(self, kind: str, obj: Obj) -> None:
        if self.handler is not None:
            result = self.handler(kind, obj)
            if asyncio.iscoroutine(result):
                await result

    async def _list(self) -> str:
        listing = await self.api.list(self.resource, namespace=self.namespace,
                                      version=self.version, params=self.params)
        fresh: dict[str, Obj] = {}
        for raw in listing.items or ():  # one at a time: each trimmed before the next is read
            obj = _decode(raw)
            if isinstance(obj, dict):
                obj = self.trim(obj)
                fresh[key(obj)] = obj
        gone = [o for k, o in self.cache.items() if k not in fresh]
        if self.decoded is not None:
            for obj in self.cache.values():
                self.decoded.drop(obj)
            for obj in fresh.values():
                self.decoded.keep(obj)
        self.cache = fresh
        self.generation += 1
        events = [*(("DELETED", o) for o in gone), *(("ADDED", o) for o in fresh.values())]
        for n, (kind, obj) in enumerate(events, 1):
            await self._emit(kind, obj)
            if n % YIELD_EVERY == 0:
                await asyncio.sleep(0)
        self.synced.set()
        self.healthy, self.last_error = True, ""
        self.resource_version = str(listing.metadata["resourceVersion"])
        return self.resource_version

    async def _watch(self, since: str) -> None:
        """Apply watch events after ``since``, keeping :attr:`resource_version` at the newest
        seen (so a dropped stream resumes where it stopped)."""
        params = {**self.params, "watch": "true", "resourceVersion": since,
                  "allowWatchBookmarks": "true", "timeoutSeconds": str(WATCH_SECONDS)}
        async with self.api.watch_lines(self.resource, namespace=self.namespace,
                                        version=self.version, params=params) as lines:
            # The server took the watch: it answers again (a resumed watch may run 5 min).
            self.healthy, self.last_error = True, ""
            handled = 0
            async for line in lines:
                if not line.strip():
                    continue
                handled += 1
                if handled % YIELD_EVERY == 0:
                    await asyncio.sleep(0)
                # msgspec: several times faster than json, and watch events are most of what
                # the scheduler reads
                event = _decode(line)
                kind, obj = event["type"], event["object"]
                if kind == "ERROR":
                    code = obj.get("code")
                    raise KubeError(f"watch {self.resource}: {obj.get('message')}",
                                    status=int(code or 0))
                version = str(obj["metadata"]["resourceVersion"])
                obj = self.trim(obj)
                if kind != "BOOKMARK":
                    if kind == "DELETED":
                        old = self.cache.pop(key(obj), None)
                    else:
                        old = self.cache.get(key(obj))
                        self.cache[key(obj)] = obj
                    if self.decoded is not None:
                        if old is not None:
                            self.decoded.drop(old)
                        if kind != "DELETED":
                            self.decoded.keep(obj)
                    self.generation += 1
                    await self._emit(kind, obj)
                # only once handled: an event whose handler failed comes again
                self.resource_version = version

    async def run(self) -> None:
        """Forever: list, then watch from there; re-list on 410 Gone; back off on errors."""
        delay = 0.5
        while True:
            try:
                since = self.resource_version
                if since is None:
                    since = await self._list()
                await self._watch(since)
                self.healthy, self.last_error, delay = True, "", 0.5
            except asyncio.CancelledError:
                raise
            except KubeError as exc:
                if exc.status == 410:
                    log.info("watch of %s expired (410 Gone); listing again", self.resource)
                    self.resource_version = None
                    continue
                self._failed(exc)
                if exc.status != 0:  # refused, not dropped: start again from a list
                    self.resource_version = None
                # A dropped stream (status 0) keeps its resourceVersion: resume where it stopped.
            except (ValueError, KeyError, TypeError, msgspec.DecodeError) as exc:
                self._failed(exc)  # a garbled event: resume after the last good one
            except Exception as exc:  # never end the watch: log, back off, list again
                log.exception("watching %s failed unexpectedly", self.resource)
                self._failed(exc)
                self.resource_version = None
            await asyncio.sleep(delay)
            delay = min(30.0, delay * 2)

    def _failed(self, exc: BaseException) -> None:
        self.healthy, self.last_error = False, f"{type(exc).__name__}: {exc}"
        log.warning("watching %s failed: %s", self.resource, self.last_error)


class Subset:
    """The objects of another informer that ``keep`` selects, in a cache of their own: one
    watch, and one decoded copy of each object, serve both (the Pods that name the scheduler
    are a subset of every Pod, which the node locks and fit checks watch anyway). Fed by
    :meth:`observe` from the source's handler; healthy and synced as its source is."""

    def __init__(self, source: Informer, keep: Callable[[Obj], bool], *,
                 namespace: str | None = None,
                 handler: Callable[[str, Obj], None] | None = None) -> None:
        self.source, self.keep, self.handler = source, keep, handler
        self.namespace = namespace
        self.resource = source.resource
        self.cache: dict[str, Obj] = {}
        self.generation = 0

    @property
    def synced(self) -> asyncio.Event:
        return self.source.synced

    @property
    def healthy(self) -> bool:
        return self.source.healthy

    @property
    def last_error(self) -> str:
        return self.source.last_error

    def observe(self, kind: str, obj: Obj) -> None:
        """A change the source saw: kept, changed or dropped here, and told to the handler."""
        name = key(obj)
        if kind == "DELETED" or not self.keep(obj):
            if self.cache.pop(name, None) is None:
                return
            kind = "DELETED"
        else:
            self.cache[name] = obj
        self.generation += 1
        if self.handler is not None:
            self.handler(kind, obj)
