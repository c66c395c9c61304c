"""The two ports the executor acts through: Kubernetes and Slurm.

Small on purpose: every write sunk makes is one of these calls. The real ones are the kube
package's functions on one client (:class:`KubeAPI`) and :class:`sunk.slurm.client.SlurmClient`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any, Final, Protocol

from sunk import kube, objects
from sunk.slurm.job import Job

Obj = dict[str, Any]

#: Events sent at once. An Event is a courtesy: when many jobs start together (gangs of 16,
#: seven at a time), one Event per bound Pod sent all at once took half the API server from
#: the bindings still to make. Beyond this, Events wait their turn, in order.
EVENTS_IN_FLIGHT: Final = 4
#: Events waiting for a slot beyond which a new one is dropped (an API server that takes
#: calls but does not answer them must not make the queue grow without end), as client-go's
#: event broadcaster drops beyond its queue of 1,000.
EVENTS_WAITING_MAX: Final = 1000

log = logging.getLogger("sunk.apply.ports")


class KubePort(Protocol):
    async def annotate(self, kind: str, namespace: str | None, name: str,
                       annotations: Mapping[str, str | None]) -> str:
        """Merge-patch annotations (None removes one); the object's new resourceVersion."""
        ...

    async def bind(self, pod: Obj, node: str,
                   annotations: Mapping[str, str] | None = None) -> None: ...

    async def delete_pod(self, pod: Obj) -> None: ...

    async def event(self, obj: Obj, *, kind: str, reason: str, message: str,
                    warning: bool) -> None: ...

    async def show_waiting(self, pod: Obj, condition: Mapping[str, Any], nominated: str) -> None:
        """Patch the Pod's ``PodScheduled`` condition and ``nominatedNodeName`` ("": none)."""
        ...

    async def annotate_showing_waiting(self, pod: Obj, annotations: Mapping[str, str | None],
                                       condition: Mapping[str, Any], nominated: str) -> str:
        """:meth:`annotate` and :meth:`show_waiting` in one write; the Pod's resourceVersion."""
        ...

    async def patch_status(self, plural: str, version: str, obj: Obj,
                           status: Mapping[str, Any], *, strategic: bool = False) -> None:
        """Patch an object's status (``plural`` of API ``version``): merge, or strategic
        merge for a built-in type."""
        ...

    async def set_taints(self, node: Obj, taints: list[dict[str, Any]]) -> str:
        """Replace the Node's taints (compare-and-swap); the Node's new resourceVersion."""
        ...

    async def evict(self, namespace: str, name: str) -> bool:
        """Evict through the Eviction API; False if the Pod was gone already."""
        ...


class SlurmPort(Protocol):
    async def submit(self, job: dict[str, Any],
                     components: tuple[dict[str, Any], ...] = ()) -> int: ...

    async def cancel(self, job_id: int) -> None: ...

    async def update_node(self, name: str, fields: dict[str, Any]) -> None: ...

    async def job(self, job_id: int) -> Job | None: ...

    async def job_gres(self, job_id: int) -> dict[str, str]: ...

    async def job_states(self) -> Mapping[int, str]: ...


class KubeAPI:
    """:class:`KubePort` on the API server."""

    def __init__(self, api: kube.Client, component: str,
                 events_in_flight: int = EVENTS_IN_FLIGHT,
                 events_waiting_max: int = EVENTS_WAITING_MAX) -> None:
        self.api = api
        self.component = component
        self._event_slots = asyncio.Semaphore(events_in_flight)
        self._status_slots = asyncio.Semaphore(events_in_flight)
        self._events_waiting = 0
        self._events_waiting_max = events_waiting_max
        self.events_dropped = 0

    async def annotate(self, kind: str, namespace: str | None, name: str,
                       annotations: Mapping[str, str | None]) -> str:
        patched = await kube.annotate(self.api, kind, namespace, name, dict(annotations))
        # the object as patched: a Node or a Pod
        typed = objects.node(patched) if kind == "nodes" else objects.pod(patched)
        return typed.metadata.resource_version

    async def bind(self, pod: Obj, node: str,
                   annotations: Mapping[str, str] | None = None) -> None:
        await kube.bind(self.api, pod, node, annotations)

    async def delete_pod(self, pod: Obj) -> None:
        await kube.delete_pod(self.api, pod)

    async def event(self, obj: Obj, *, kind: str, reason: str, message: str,
                    warning: bool) -> None:
        if self._events_waiting >= self._events_waiting_max:
            self.events_dropped += 1
            if self.events_dropped & (self.events_dropped - 1) == 0:  # 1st, 2nd, 4th, ...
                meta = (objects.node(obj) if kind == "Node" else objects.pod(obj)).metadata
                log.warning("%d Events dropped so far (%s on %s the newest): %d wait for "
                            "the API server to take them", self.events_dropped, reason,
                            meta.key, self._events_waiting)
            return
        self._events_waiting += 1
        try:
            await self._event_slots.acquire()
        finally:  # acquired, or cancelled while waiting (the scheduler stopping)
            self._events_waiting -= 1
        try:
            await kube.event(self.api, obj, kind=kind, reason=reason, message=message,
                             type_="Warning" if warning else "Normal", component=self.component)
        finally:
            self._event_slots.release()

    async def show_waiting(self, pod: Obj, condition: Mapping[str, Any], nominated: str) -> None:
        async with self._status_slots:  # a courtesy as an Event is: as few at once
            await kube.show_waiting(self.api, pod, condition, nominated)

    async def annotate_showing_waiting(self, pod: Obj, annotations: Mapping[str, str | None],
                                       condition: Mapping[str, Any], nominated: str) -> str:
        written = await kube.annotate_showing_waiting(self.api, pod, annotations, condition,
                                                      nominated)
        return objects.pod(written).metadata.resource_version

    async def patch_status(self, plural: str, version: str, obj: Obj,
                           status: Mapping[str, Any], *, strategic: bool = False) -> None:
        meta = objects.custom(obj).metadata
        async with self._status_slots:
            await kube.patch_status(self.api, plural, version, meta.namespace, meta.name,
                                    meta.uid, status, strategic=strategic)

    async def set_taints(self, node: Obj, taints: list[dict[str, Any]]) -> str:
        meta = objects.node(node).metadata
        # resourceVersion makes this a compare-and-swap: a concurrent taint change is not lost.
        written = await kube.set_taints(self.api, meta.name, meta.resource_version, taints)
        return objects.node(written).metadata.resource_version

    async def evict(self, namespace: str, name: str) -> bool:
        return await kube.evict(self.api, namespace, name)

    async def pod_events(self, namespace: str, uid: str) -> list[Obj]:
        """The Events of the Pod ``uid`` (for the dashboard); raises KubeError."""
        body = await kube.request(self.api, "GET", "events", namespace=namespace,
                                  params={"fieldSelector": f"involvedObject.uid={uid}"})
        return list(body.get("items") or [])
