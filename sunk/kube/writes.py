"""What the scheduler writes to the API server: bindings, annotations, deletions, Events, node
taints and evictions, each with a typed body (a misspelt field is a type error, not an object
the server quietly drops)."""

from __future__ import annotations

import datetime
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Literal, NotRequired, TypedDict

from sunk import objects
from sunk.kube.client import Client, KubeError, Obj

log = logging.getLogger("sunk.kube")

MERGE_PATCH = {"Content-Type": "application/merge-patch+json"}
#: A strategic merge patch: a Pod's conditions merge by their type.
STRATEGIC_PATCH = {"Content-Type": "application/strategic-merge-patch+json"}


class ObjectMeta(TypedDict, total=False):
    name: str
    generateName: str
    namespace: str
    uid: str
    resourceVersion: str
    annotations: Mapping[str, str | None]


class ObjectReference(TypedDict, total=False):
    apiVersion: str
    kind: str
    name: str
    namespace: str | None
    uid: str | None


class Binding(TypedDict):
    apiVersion: Literal["v1"]
    kind: Literal["Binding"]
    metadata: ObjectMeta
    target: ObjectReference


class Preconditions(TypedDict):
    uid: str


class DeleteOptions(TypedDict):
    apiVersion: Literal["v1"]
    kind: Literal["DeleteOptions"]
    preconditions: Preconditions
    gracePeriodSeconds: NotRequired[int]


class Eviction(TypedDict):
    apiVersion: Literal["policy/v1"]
    kind: Literal["Eviction"]
    metadata: ObjectMeta


class EventSource(TypedDict):
    component: str


class Event(TypedDict):
    apiVersion: Literal["v1"]
    kind: Literal["Event"]
    metadata: ObjectMeta
    involvedObject: ObjectReference
    reason: str
    message: str
    type: str
    source: EventSource
    reportingComponent: str
    firstTimestamp: str
    lastTimestamp: str
    count: int


class MetadataPatch(TypedDict):
    metadata: ObjectMeta


class NodeSpecPatch(TypedDict):
    taints: Sequence[Mapping[str, Any]]


class NodeTaintsPatch(TypedDict):
    metadata: ObjectMeta
    spec: NodeSpecPatch


def binding_body(pod: Obj, node: str,
                 annotations: Mapping[str, str] | None = None) -> Binding:
    """``annotations``: set on the Pod by the API server with the binding, in one write."""
    meta = pod["metadata"]
    metadata: ObjectMeta = {"name": meta["name"], "namespace": meta["namespace"],
                            "uid": meta["uid"]}
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {"apiVersion": "v1", "kind": "Binding", "metadata": metadata,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}}


def delete_options(uid: str, grace: int | None = None) -> DeleteOptions:
    body: DeleteOptions = {"apiVersion": "v1", "kind": "DeleteOptions",
                           "preconditions": {"uid": uid}}
    if grace is not None:
        body["gracePeriodSeconds"] = grace
    return body


def eviction_body(namespace: str, name: str) -> Eviction:
    return {"apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace}}


def event_body(obj: Obj, *, reason: str, message: str, kind: str, type_: str, component: str,
               now: datetime.datetime) -> Event:
    meta = obj["metadata"]
    stamp = objects.timestamp(now)
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.",
                     "namespace": meta.get("namespace") or "default"},
        "involvedObject": {"apiVersion": "v1", "kind": kind, "name": meta["name"],
                           "namespace": meta.get("namespace"), "uid": meta.get("uid")},
        "reason": reason, "message": message[:1024], "type": type_,
        "source": {"component": component}, "reportingComponent": component,
        "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
    }


async def bind(api: Client, pod: Obj, node: str,
               annotations: Mapping[str, str] | None = None) -> None:
    """Bind as kube-scheduler's DefaultBinder does: a Binding carrying the Pod's uid, so a Pod
    deleted and recreated under the same name is never bound by mistake. The Binding's
    ``annotations`` land on the Pod in the same write (a gang member's rank and node)."""
    meta = pod["metadata"]
    await api.write("POST", f"pods/{meta['name']}/binding", namespace=meta["namespace"],
                    json=binding_body(pod, node, annotations))


async def annotate(api: Client, kind: str, namespace: str | None, name: str,
                   annotations: dict[str, str | None]) -> Obj:
    """Merge-patch annotations (None removes one)."""
    body: MetadataPatch = {"metadata": {"annotations": annotations}}
    return await api.request("PATCH", f"{kind}/{name}", namespace=namespace, json=body,
                             headers=MERGE_PATCH)


def waiting_body(uid: str, condition: Mapping[str, Any], nominated: str) -> Obj:
    """The status patch that says why a Pod waits: its ``PodScheduled`` condition (the other
    conditions are kept: they merge by type) and ``nominatedNodeName`` (removed when "").
    The uid makes it a precondition: a Pod recreated under the same name is not written."""
    return {"metadata": {"uid": uid},
            "status": {"conditions": [dict(condition)], "nominatedNodeName": nominated or None}}


async def show_waiting(api: Client, pod: Obj, condition: Mapping[str, Any],
                       nominated: str) -> None:
    """Patch the Pod's status as kube-scheduler does for a Pod it cannot place yet."""
    meta = pod["metadata"]
    await api.write("PATCH", f"pods/{meta['name']}/status", namespace=meta["namespace"],
                    json=waiting_body(meta["uid"], condition, nominated),
                    headers=STRATEGIC_PATCH)


async def patch_status(api: Client, plural: str, version: str, namespace: str, name: str,
                       uid: str, status: Mapping[str, Any], *, strategic: bool = False) -> None:
    """Patch an object's status subresource: a merge patch (a custom resource takes no
    other), or a strategic one (a built-in type's conditions merge by their type). The uid
    makes it a precondition: an object recreated under the same name is not written."""
    await api.write("PATCH", f"{plural}/{name}/status", namespace=namespace, version=version,
                    json={"metadata": {"uid": uid}, "status": dict(status)},
                    headers=STRATEGIC_PATCH if strategic else MERGE_PATCH)


async def annotate_showing_waiting(api: Client, pod: Obj, annotations: Mapping[str, str | None],
                                   condition: Mapping[str, Any], nominated: str) -> Obj:
    """Annotations (None removes one) and why the Pod waits, in one write: the status
    subresource takes the Pod's metadata too. The Pod as written."""
    meta = pod["metadata"]
    body = waiting_body(meta["uid"], condition, nominated)
    body["metadata"]["annotations"] = dict(annotations)
    return await api.request("PATCH", f"pods/{meta['name']}/status", namespace=meta["namespace"],
                             json=body, headers=STRATEGIC_PATCH)


async def delete_pod(api: Client, pod: Obj, *, grace: int | None = None) -> None:
    """Delete the Pod (only this incarnation of it: uid precondition). Gone already (404) or
    replaced by a new Pod of the same name (409) is fine."""
    meta = pod["metadata"]
    try:
        await api.request("DELETE", f"pods/{meta['name']}", namespace=meta["namespace"],
                          json=delete_options(meta["uid"], grace))
    except KubeError as exc:
        if exc.status not in (404, 409):
            raise


async def event(api: Client, obj: Obj, *, reason: str, message: str, kind: str = "Pod",
                type_: str = "Normal", component: str = "sunk") -> None:
    """A core/v1 Event on ``obj`` (``kubectl describe`` shows it). Failures are only logged:
    an Event is a courtesy, never a reason to stop."""
    body = event_body(obj, reason=reason, message=message, kind=kind, type_=type_,
                      component=component, now=datetime.datetime.now(datetime.UTC))
    ns = body["metadata"]["namespace"]
    try:
        await api.write("POST", "events", namespace=ns, json=body)
    except KubeError as exc:
        log.warning("could not record Event %s on %s/%s: %s", reason, ns,
                    obj["metadata"]["name"], exc)


async def set_taints(api: Client, node_name: str, resource_version: str,
                     taints: Sequence[Mapping[str, Any]]) -> Obj:
    """Replace the Node's taints. The resourceVersion makes this a compare-and-swap: if the
    Node changed since it was read, the server answers 409 (KubeError) and no concurrent
    taint change is lost. Returns the Node as written."""
    body: NodeTaintsPatch = {"metadata": {"resourceVersion": resource_version},
                             "spec": {"taints": taints}}
    return await api.request("PATCH", f"nodes/{node_name}", json=body, headers=MERGE_PATCH)


async def evict(api: Client, namespace: str, name: str) -> bool:
    """Evict the Pod through the Eviction API, which honours PodDisruptionBudgets (a refusal is
    a KubeError, 429 for a budget). False: the Pod was gone already (404), which is fine."""
    try:
        await api.request("POST", f"pods/{name}/eviction", namespace=namespace,
                          json=eviction_body(namespace, name))
    except KubeError as exc:
        if exc.status != 404:
            raise
        return False
    return True
