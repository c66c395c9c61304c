"""What this process wrote to the API server, until the watch shows it, and the cancels it sent
Slurm, until its poll can show them (pure).

As kube-scheduler's assume cache: a write is assumed to have happened from the moment the API
server accepted it, and is confirmed (dropped from here) when the watch brings the object back
with it, or forgotten when the object goes. In between, a wake-up of the same object must
neither write it a second time nor act on the stale copy. The scheduler and the syncer share
one: annotations (job ids, lock states, Slurm node states), bindings, and the lock taint.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sunk import objects

#: How many deleted objects' uids are kept: more than the writes that can be in flight at once.
DELETED_KEPT = 4096
#: How long a cancel sent to Slurm is taken as in hand: the job poll (every second) shows the
#: job ending well within it. A job still not ended after it is cancelled again when asked.
CANCEL_IN_HAND = 10.0


class AssumeCache:
    def __init__(self) -> None:
        self._annotations: dict[str, dict[str, str | None]] = {}
        #: uid -> the resourceVersion the API server gave our newest write of annotations.
        self._written_at: dict[str, int] = {}
        self._bound: set[str] = set()
        self._taints: dict[str, tuple[str, bool]] = {}
        #: uid -> the resourceVersion our newest write (annotations or taints) got.
        self._taint_written_at: dict[str, int] = {}
        #: The newest uids the watch showed deleted (oldest first): a write answered after
        #: its object's DELETED event is not assumed, since nothing would ever confirm it.
        self._deleted: dict[str, None] = {}

    # -- what was written ------------------------------------------------------------------
    def wrote_annotations(self, uid: str, annotations: Mapping[str, str | None],
                          resource_version: str = "", *,
                          watched: Mapping[str, Any] | None = None) -> None:
        """``resource_version``: the object's, as the write's answer gave it. Once the watch
        shows that version or a later one, the watch is right, even if someone else changed
        the annotations since (compared as integers, as kube-scheduler's assume cache does).

        ``watched``: the object as the watch shows it now. The watch may bring the write back
        before its answer is read; then there is nothing left to wait for, and recorded, the
        write would stay until the object next changes (for a Pod pending in Slurm: its
        whole wait, one per pending Pod)."""
        if uid in self._deleted:
            return
        if (meta := _same(watched, uid)) is not None and (
                _caught_up(meta, _version(resource_version)) or _has(meta, annotations)):
            self._seen(uid, annotations)
            return
        self._annotations.setdefault(uid, {}).update(annotations)
        if resource_version.isdigit():
            self._written_at[uid] = int(resource_version)

    def assume_annotations(self, uid: str, annotations: Mapping[str, str | None]) -> None:
        """A write not sent yet (it goes in the background): believed from now on. A version an
        earlier write got no longer tells that the watch shows this one."""
        if uid in self._deleted:
            return
        self._annotations.setdefault(uid, {}).update(annotations)
        self._written_at.pop(uid, None)

    def still_assumed(self, uid: str, annotations: Mapping[str, str | None]) -> bool:
        """Whether ``annotations`` are still believed and not yet seen: not forgotten (the
        object gone), not confirmed by the watch, not replaced by a newer write."""
        pending = self._annotations.get(uid)
        return pending is not None and all(
            key in pending and pending[key] == value for key, value in annotations.items())

    def _seen(self, uid: str, annotations: Mapping[str, str | None]) -> None:
        """``annotations``, written, are shown by the watch: no longer assumed (a newer write
        of other values, assumed meanwhile, still is)."""
        pending = self._annotations.get(uid)
        if pending is None:
            return
        for key, value in annotations.items():
            if key in pending and pending[key] == value:
                del pending[key]
        if not pending:
            del self._annotations[uid]
            self._written_at.pop(uid, None)

    def waiting(self) -> int:
        """Writes the watch has not shown yet (an object's annotations, a binding, a taint):
        a number that stays up means a watch that lags."""
        return len(self._annotations) + len(self._bound) + len(self._taints)

    def bound(self, uid: str, *, watched: Mapping[str, Any] | None = None) -> None:
        """``watched``: as for :meth:`wrote_annotations` (already on its Node: not assumed)."""
        seen = objects.pod(watched) if watched is not None else None
        if uid in self._deleted or (
                seen is not None and seen.metadata.uid == uid and seen.spec.node_name):
            return
        self._bound.add(uid)

    def set_taint(self, uid: str, key: str, present: bool, resource_version: str = "", *,
                  watched: Mapping[str, Any] | None = None) -> None:
        """As :meth:`wrote_annotations`: a watched version at or past ours ends it, and a
        watched object that shows it already is not assumed."""
        if uid in self._deleted:
            return
        seen = objects.node(watched) if watched is not None else None
        if seen is not None and seen.metadata.uid == uid and (
                _caught_up(seen.metadata, _version(resource_version))
                or _shows_taint(seen.spec.taints, key) == present):
            self._taints.pop(uid, None)
            self._taint_written_at.pop(uid, None)
            return
        self._taints[uid] = (key, present)
        if resource_version.isdigit():
            self._taint_written_at[uid] = int(resource_version)

    def forget(self, uid: str) -> None:
        """A write failed, or the object is gone: trust the watch again."""
        self._annotations.pop(uid, None)
        self._written_at.pop(uid, None)
        self._bound.discard(uid)
        self._taints.pop(uid, None)
        self._taint_written_at.pop(uid, None)

    # -- reading an object as it will be -----------------------------------------------------
    def pending_annotations(self, uid: str) -> Mapping[str, str | None]:
        """Annotations written but not yet seen (None: removed)."""
        return self._annotations.get(uid, {})

    def annotations(self, obj: Mapping[str, Any]) -> dict[str, str]:
        """The object's annotations with what was written on top (removals applied)."""
        meta = _meta(obj)
        merged = dict(meta.annotations)
        for key, value in self._annotations.get(meta.uid, {}).items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        return merged

    def is_bound(self, pod: Mapping[str, Any]) -> bool:
        seen = objects.pod(pod)
        return bool(seen.spec.node_name) or seen.metadata.uid in self._bound

    def has_taint(self, node: Mapping[str, Any], key: str) -> bool:
        seen = objects.node(node)
        assumed = self._taints.get(seen.metadata.uid)
        if assumed is not None and assumed[0] == key:
            return assumed[1]
        return _shows_taint(seen.spec.taints, key)

    # -- the watch ----------------------------------------------------------------------------
    def observe(self, kind: str, obj: Mapping[str, Any]) -> None:
        """The watch shows ``obj``: confirm what it carries, forget all of it when it is gone."""
        seen = objects.pod_or_node(obj)
        meta, uid = seen.metadata, seen.metadata.uid
        if kind == "DELETED":
            self.forget(uid)
            self._deleted[uid] = None
            if len(self._deleted) > DELETED_KEPT:
                del self._deleted[next(iter(self._deleted))]
            return
        written = self._annotations.get(uid)
        if written is not None and (
                _caught_up(meta, self._written_at.get(uid)) or _has(meta, written)):
            del self._annotations[uid]
            self._written_at.pop(uid, None)
        if isinstance(seen, objects.Pod) and seen.spec.node_name:
            self._bound.discard(uid)
        taint = self._taints.get(uid)
        if taint is not None and (
                _caught_up(meta, self._taint_written_at.get(uid))
                or _shows_taint(seen.spec.taints if isinstance(seen, objects.Node)
                                else objects.node(obj).spec.taints, taint[0]) == taint[1]):
            del self._taints[uid]
            self._taint_written_at.pop(uid, None)


def _meta(obj: Mapping[str, Any]) -> objects.Meta:
    """A Pod's or a Node's metadata."""
    return objects.pod_or_node(obj).metadata


def _caught_up(meta: objects.Meta, written_at: int | None) -> bool:
    """The watch shows the object at or past the version our write produced."""
    seen = meta.resource_version
    return written_at is not None and seen.isdigit() and int(seen) >= written_at


def _same(watched: Mapping[str, Any] | None, uid: str) -> objects.Meta | None:
    """The watched object's metadata, if it is the object written (``uid``)."""
    meta = _meta(watched) if watched is not None else None
    return meta if meta is not None and meta.uid == uid else None


def _version(resource_version: str) -> int | None:
    return int(resource_version) if resource_version.isdigit() else None


def _has(meta: objects.Meta, annotations: Mapping[str, str | None]) -> bool:
    """The object's annotations are ``annotations`` (None: absent)."""
    return all(meta.annotations.get(k) == v for k, v in annotations.items())


def _shows_taint(taints: Iterable[Mapping[str, Any]], key: str) -> bool:
    return any(t.get("key") == key for t in taints)


class CancelsSent:
    """The jobs this process asked Slurm to cancel lately, counted from when the cancel was
    sent (on its way counts). A Pod being deleted asks for its job's cancel, and asks again
    once it is gone, often before the job poll shows the first one done, or before its answer:
    one cancel is enough. The caller gives the time (``time.monotonic()``)."""

    def __init__(self, in_hand: float = CANCEL_IN_HAND) -> None:
        self.in_hand = in_hand
        #: Job id -> when its cancel was sent, oldest first.
        self._sent: dict[int, float] = {}

    def sent(self, job_id: int, now: float) -> None:
        self._sent.pop(job_id, None)
        self._sent[job_id] = now
        while True:  # the oldest first: those no longer in hand go (this one stays)
            oldest, at = next(iter(self._sent.items()))
            if now - at < self.in_hand:
                return
            del self._sent[oldest]

    def pending(self, job_id: int, now: float) -> bool:
        """A cancel of ``job_id`` was sent less than ``in_hand`` seconds ago."""
        at = self._sent.get(job_id)
        return at is not None and now - at < self.in_hand

    def failed(self, job_id: int) -> None:
        """The cancel of ``job_id`` failed: asked again, it is sent."""
        self._sent.pop(job_id, None)

    def forget(self) -> None:
        """Slurm was away: what it was told may be lost with a slurmctld that crashed."""
        self._sent.clear()

    def __len__(self) -> int:
        return len(self._sent)
