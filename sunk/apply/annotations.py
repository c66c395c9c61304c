"""A Pod's annotations written through the Kubernetes port, in the order they were made.

Most go in the background (:meth:`AnnotationWriter.write_soon`): believed at once through the
assume cache, tried again until written or the Pod is gone, so a Pod's binding never waits
behind an API server slow to answer. A new job's id waits :data:`JOB_ID_WAIT` first: a job that
starts within it has its id carried by the Pod's binding
(:meth:`AnnotationWriter.carried_by_binding`), one write instead of two.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from sunk import kube, objects
from sunk.apply.background import Background
from sunk.apply.ports import KubePort
from sunk.model.cluster import Cluster

log = logging.getLogger("sunk.apply.executor")

class RideAlong(Protocol):
    """What a Pod's delayed job-id write also carries: why it waits
    (:class:`sunk.apply.waiting.WaitingWriter`)."""

    def ride_along(self, pod: kube.Obj) -> tuple[Mapping[str, Any], str] | None:
        """The status (condition, nominated Node) to carry, taken as shown; None: nothing."""
        ...

    def not_carried(self, pod: kube.Obj) -> None:
        """The write carrying it failed: it is sent without it, and shown by a later look."""
        ...

#: The first wait before a background write of annotations is tried again (doubling to 30 s).
ANNOTATE_RETRY = 0.5

#: How long a new job's id waits before it is written on its Pod by a write of its own. Most
#: jobs that start at all start within it (below capacity, submit to started was 1.2 s at most
#: in the open-loop runs): their Pod's binding carries the id, and the API server takes one
#: write per Pod, not two. A job pending longer has its id on the Pod after this.
JOB_ID_WAIT = 2.0

@dataclass(eq=False)
class DelayedWrite:
    """Annotations waiting out :data:`JOB_ID_WAIT` from their submission; a binding that
    comes first takes them."""

    annotations: dict[str, str | None]
    #: No earlier write of the Pod is still going on: a binding may carry these (one that
    #: did while an older value was in flight could be overwritten by it).
    alone: bool = False
    #: A binding carries them: not written on their own.
    taken: bool = False
    #: Done when :data:`JOB_ID_WAIT` has passed, or :meth:`hurry` was called. A future and a
    #: timer: a wait under ``asyncio.timeout`` ends by cancelling its task, which cost each
    #: Pod of the saturated run more than the rest of the delay.
    due: asyncio.Future[None] = field(init=False)
    _timer: asyncio.TimerHandle = field(init=False)

    def __post_init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.due = loop.create_future()
        self._timer = loop.call_later(JOB_ID_WAIT, self.hurry)

    def hurry(self) -> None:
        """Write them now (a newer write of the Pod waits behind this one, or it was bound)."""
        self._timer.cancel()
        if not self.due.done():
            self.due.set_result(None)


class AnnotationWriter:
    """Writes Pods' annotations, each Pod's in order, and records them in the assume cache."""

    def __init__(self, cluster: Cluster, kube_port: KubePort, background: Background, *,
                 ride_along: RideAlong | None = None) -> None:
        """``ride_along``: what a Pod's delayed job-id write also carries."""
        self.cluster = cluster
        self.kube = kube_port
        self.background = background
        self.ride_along = ride_along
        #: Pod uid -> the newest write of its annotations still going on in the background.
        self._writing: dict[str, asyncio.Task[None]] = {}
        #: Pod uid -> its job id waiting out JOB_ID_WAIT (a binding may carry it).
        self._delayed: dict[str, DelayedWrite] = {}
        #: Background writes sent at once, at most: a burst of submissions cannot open a
        #: connection per Pod.
        self._sending = asyncio.Semaphore(cluster.settings.workers)

    async def write(self, pod: kube.Obj, annotations: Mapping[str, str | None]) -> None:
        """Write ``annotations`` now, after any of the Pod's writes still in the background."""
        meta = objects.pod(pod).metadata
        if (writing := self._writing.get(meta.uid)) is not None:
            self._hurry(meta.uid)
            await asyncio.wait([writing])  # a Pod's writes land in the order they were made
        if self.cluster.assumed.still_assumed(meta.uid, annotations):
            return  # written already; the watch has not brought it back yet
        version = await self.kube.annotate("pods", meta.namespace, meta.name, annotations)
        self.cluster.assumed.wrote_annotations(meta.uid, annotations, version,
                                               watched=self.cluster.watched("pods", pod))

    def write_soon(self, pod: kube.Obj, annotations: Mapping[str, str | None], *,
                   wait: bool = False) -> None:
        """Write ``annotations`` in the background, believed written from now on. For the job
        id after a submission: one worker handles a Pod at a time, so the Pod's binding waited
        behind this write, which an API server in a burst took seconds to answer while the job
        had started. Tried again until written, or the Pod is gone; a Pod's writes land in the
        order they were made. ``wait``: not before :data:`JOB_ID_WAIT`, unless hurried; a
        binding before then carries them."""
        uid = objects.pod(pod).metadata.uid
        self.cluster.assumed.assume_annotations(uid, annotations)
        self._hurry(uid)  # an older value waiting: replaced by this one, it writes nothing
        after = self._writing.get(uid)
        delayed: DelayedWrite | None = None
        if wait:
            delayed = self._delayed[uid] = DelayedWrite(
                dict(annotations), alone=after is None or after.done())
        task = asyncio.create_task(self._write_in_background(
            pod, dict(annotations), after=after, delayed=delayed))
        self._writing[uid] = task
        self.background.keep(task)

        def done(finished: asyncio.Task[None]) -> None:
            if self._writing.get(uid) is finished:
                del self._writing[uid]

        task.add_done_callback(done)

    def carried_by_binding(self, pod: kube.Obj) -> dict[str, str | None]:
        """The Pod's delayed job id, taken for its binding to carry (empty: none, or one a
        binding cannot carry: a binding sets annotations, it cannot remove one)."""
        meta = objects.pod(pod).metadata
        delayed = self._delayed.get(meta.uid)
        if delayed is None:
            return {}
        delayed.hurry()  # bound now: nothing more to wait for
        watched = self.cluster.watched("pods", pod)
        present = [meta.annotations,  # as the reconcile read it, and as watched
                   objects.pod(watched).metadata.annotations if watched is not None else {}]
        if not delayed.alone or any(value is None and any(key in p for p in present)
                                    for key, value in delayed.annotations.items()):
            return {}  # written on its own, at once
        self._drop_delayed(meta.uid, delayed)
        delayed.taken = True
        return delayed.annotations

    def _hurry(self, uid: str) -> None:
        if (delayed := self._delayed.get(uid)) is not None:
            delayed.hurry()

    def _drop_delayed(self, uid: str, delayed: DelayedWrite) -> None:
        if self._delayed.get(uid) is delayed:
            del self._delayed[uid]

    async def _write_in_background(self, pod: kube.Obj, annotations: dict[str, str | None], *,
                                   after: asyncio.Task[None] | None,
                                   delayed: DelayedWrite | None = None) -> None:
        meta = objects.pod(pod).metadata
        uid = meta.uid
        if after is not None:
            await asyncio.wait([after])
        try:
            status, asked = None, False
            if delayed is not None:
                delayed.alone = True
                await delayed.due
            delay = ANNOTATE_RETRY
            while self.cluster.assumed.still_assumed(uid, annotations):
                try:
                    async with self._sending:
                        # a binding may take them until they go out, even while they wait
                        # for a slot (a burst: the case this is for)
                        if delayed is not None:
                            if delayed.taken:
                                return  # the binding carried them (or, failing, wrote them)
                            self._drop_delayed(uid, delayed)
                        if not self.cluster.assumed.still_assumed(uid, annotations):
                            return  # replaced, or the Pod gone, while waiting for the slot
                        if delayed is not None and self.ride_along is not None and not asked:
                            asked, status = True, self.ride_along.ride_along(pod)
                        version = await (
                            self.kube.annotate("pods", meta.namespace, meta.name, annotations)
                            if status is None else
                            self.kube.annotate_showing_waiting(pod, annotations, *status))
                except Exception as exc:  # whatever failed, the job id must not stay unwritten
                    if isinstance(exc, kube.KubeError) and exc.status == 404:
                        return  # the Pod is gone: its DELETED event forgets what was assumed
                    if status is not None and self.ride_along is not None:
                        # a courtesy must never keep the job id off the Pod (a status write
                        # refused, say, by an RBAC without pods/status): again without it
                        status = None
                        self.ride_along.not_carried(pod)
                    log.warning("pod %s: writing %s failed: %s (again in %.1fs)",
                                meta.key, ", ".join(annotations), exc, delay,
                                exc_info=not isinstance(exc, kube.KubeError))
                    await asyncio.sleep(delay)
                    delay = min(30.0, 2 * delay)
                    continue
                if self._writing.get(uid) is asyncio.current_task():
                    self.cluster.assumed.wrote_annotations(
                        uid, annotations, version, watched=self.cluster.watched("pods", pod))
                # else a newer write is assumed over this one: its version, not ours, ends it
                return
        finally:
            if delayed is not None:
                self._drop_delayed(uid, delayed)
