"""The whole Pod, for its policies: the Pod cache keeps Pods trimmed (:mod:`sunk.kube.trim`),
and a policy may read any field.

A Pod that names this scheduler and has no job yet (its policies are still to run) is kept
whole, as JSON, from its last event; any other is read again from the API server when asked for
(a Pod that had a job and needs another: rare enough for one more read).
"""

from __future__ import annotations

import typing
from typing import Any

import msgspec

from sunk import kube, objects
from sunk.settings import Settings

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


def _same_pod(found: Any, uid: str) -> bool:
    """``found`` is a Pod object, and the one of ``uid`` (not another of the same name)."""
    return isinstance(found, dict) and isinstance(found.get("metadata"), dict) and (
        objects.pod(found).metadata.uid == uid)


class WholePods:
    def __init__(self, api: kube.Client, settings: Settings, *, scheduling: bool) -> None:
        self.api = api
        self.scheduler_name = settings.scheduler_name
        #: Without the scheduler component no policy runs here: nothing is kept.
        self.scheduling = scheduling
        self._job_key = f"{settings.annotation_prefix}job-id"
        self._uid_key = f"{settings.annotation_prefix}pod-uid"
        #: Pod key -> the whole Pod, as JSON, while it waits for its policies (it names this
        #: scheduler and has no job yet).
        self.kept: dict[str, bytes] = {}

    def keep(self, pod: kube.Obj) -> kube.Obj:
        """What the Pod cache keeps of ``pod``: the trimmed Pod, and the whole one while its
        policies are still to run."""
        # Read from the dict, not sunk.objects: this runs on every Pod event, on the whole
        # Pod before the informer trims and decodes it (decoded here too, it costs 10 µs more).
        key = kube.key(pod)
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        annotations = meta.get("annotations") or {}
        if (self.scheduling and spec.get("schedulerName") == self.scheduler_name
                and not spec.get("nodeName") and not (
                    self._job_key in annotations
                    and annotations.get(self._uid_key) == meta.get("uid"))):
            meta.pop("managedFields", None)
            self.kept[key] = _encode(pod)
        elif self.kept:
            self.kept.pop(key, None)
        return kube.trim_pod(pod)

    def forget(self, key: str) -> None:
        """The Pod ``key`` is deleted."""
        self.kept.pop(key, None)

    async def read(self, pod: kube.Obj) -> kube.Obj | None:
        """``pod`` with every field: kept from its last event while it waits for a job, else
        read again from the API server. None if the API server no longer has this Pod (gone,
        or another of the same name)."""
        meta = objects.pod(pod).metadata
        whole = self.kept.get(meta.key)
        found: Any = _decode(whole) if whole is not None else None
        if not _same_pod(found, meta.uid):
            try:
                found = await self.api.request("GET", f"pods/{meta.name}",
                                               namespace=meta.namespace or None)
            except kube.KubeError as exc:
                if exc.status == 404:  # deleted meanwhile: its DELETED event follows
                    return None
                raise
            if not _same_pod(found, meta.uid):
                return None
            found["metadata"].pop("managedFields", None)
        return typing.cast(kube.Obj, found)
