"""What this process wrote to the API server, until the watch shows it (pure).

As kube-scheduler's assume cache: a write is assumed to have happened from the moment the API
server accepted it, and is confirmed (dropped from here) when the watch brings the object back
with it, or forgotten when the object goes. In between, a wake-up of the same object must
neither write it a second time nor act on the stale copy. The scheduler and the syncer share
one: annotations (job ids, lock states, Slurm node states), bindings, and the lock taint.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class AssumeCache:
    def __init__(self) -> None:
        self._annotations: dict[str, dict[str, str | None]] = {}
        self._bound: set[str] = set()
        self._taints: dict[str, tuple[str, bool]] = {}

    # -- what was written ------------------------------------------------------------------
    def wrote_annotations(self, uid: str, annotations: Mapping[str, str | None]) -> None:
        self._annotations.setdefault(uid, {}).update(annotations)

    def bound(self, uid: str) -> None:
        self._bound.add(uid)

    def set_taint(self, uid: str, key: str, present: bool) -> None:
        self._taints[uid] = (key, present)

    def forget(self, uid: str) -> None:
        """A write failed, or the object is gone: trust the watch again."""
        self._annotations.pop(uid, None)
        self._bound.discard(uid)
        self._taints.pop(uid, None)

    # -- reading an object as it will be -----------------------------------------------------
    def pending_annotations(self, uid: str) -> Mapping[str, str | None]:
        """Annotations written but not yet seen (None: removed)."""
        return self._annotations.get(uid, {})

    def annotations(self, obj: Mapping[str, Any]) -> dict[str, str]:
        """The object's annotations with what was written on top (removals applied)."""
        meta = obj.get("metadata") or {}
        merged = dict(meta.get("annotations") or {})
        for key, value in self._annotations.get(meta.get("uid", ""), {}).items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        return merged

    def is_bound(self, pod: Mapping[str, Any]) -> bool:
        return bool((pod.get("spec") or {}).get("nodeName")) or (
            (pod.get("metadata") or {}).get("uid", "") in self._bound)

    def has_taint(self, node: Mapping[str, Any], key: str) -> bool:
        assumed = self._taints.get((node.get("metadata") or {}).get("uid", ""))
        if assumed is not None and assumed[0] == key:
            return assumed[1]
        return any(t.get("key") == key for t in (node.get("spec") or {}).get("taints") or [])

    # -- the watch ----------------------------------------------------------------------------
    def observe(self, kind: str, obj: Mapping[str, Any]) -> None:
        """The watch shows ``obj``: confirm what it carries, forget all of it when it is gone."""
        meta = obj.get("metadata") or {}
        uid = meta.get("uid", "")
        if kind == "DELETED":
            self.forget(uid)
            return
        written = self._annotations.get(uid)
        if written is not None:
            have = meta.get("annotations") or {}
            if all(have.get(k) == v for k, v in written.items()):
                del self._annotations[uid]
        if (obj.get("spec") or {}).get("nodeName"):
            self._bound.discard(uid)
        taint = self._taints.get(uid)
        if taint is not None:
            taints = (obj.get("spec") or {}).get("taints") or []
            if any(t.get("key") == taint[0] for t in taints) == taint[1]:
                del self._taints[uid]
