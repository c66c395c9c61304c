"""The Pods naming this scheduler by the gang they may belong to, and what a gang's size comes
from (docs/gangs.md).

Kept as the Pods' watch goes, so a gang's reconcile reads its own Pods, not every Pod. Whether a
Pod is in fact a member is for its claim (:func:`sunk.plans.gang.claim`), which reads the sizes
of batch Jobs and PodGroups from :meth:`GangIndex.owners`.
"""

from __future__ import annotations

from collections.abc import Callable

from sunk import kube
from sunk.plans import gang
from sunk.plans.keys import GangKey
from sunk.slurm.job import PodIdentity, member_id


class GangIndex:
    def __init__(self, api: kube.Client, annotation_prefix: str) -> None:
        self.annotation_prefix = annotation_prefix
        #: What a gang's size comes from: batch Jobs, and PodGroups if their CRD is installed
        #: (not waited for: without it, PodGroup gangs wait and say why).
        self.job_informer = kube.Informer(api, "jobs", version="batch/v1",
                                          handler=lambda _, obj: self._on_owner("job", obj))
        self.podgroup_informer = kube.Informer(
            api, "podgroups", version=gang.PODGROUP_VERSION,
            handler=lambda _, obj: self._on_owner("podgroup", obj))
        #: Gang key -> its Pods (that name this scheduler) by key; Pod key -> its gang key.
        self._pods: dict[str, dict[str, kube.Obj]] = {}
        self._gang_of: dict[str, str] = {}
        #: Called with a gang's key when its Job or PodGroup changes.
        self.handlers: list[Callable[[str], None]] = []

    def observe(self, kind: str, pod: kube.Obj) -> None:
        """A watch event of a Pod naming this scheduler: file it under its gang, if any."""
        key = kube.key(pod)
        was = self._gang_of.pop(key, None)
        if was is not None:
            members = self._pods[was]
            members.pop(key, None)
            if not members:
                del self._pods[was]
        gang_key = self.gang_of(pod)
        if gang_key is not None and kind != "DELETED":
            self._pods.setdefault(gang_key, {})[key] = pod
            self._gang_of[key] = gang_key

    def gang_of(self, pod: kube.Obj) -> str | None:
        """The key of the gang ``pod`` may belong to (whether it is one is for its claim)."""
        name = gang.gang_name(pod, self.annotation_prefix)
        return None if name is None else str(GangKey(pod["metadata"]["namespace"], name))

    def pods(self, key: str) -> list[kube.Obj]:
        """The Pods naming this scheduler that may belong to the gang ``key``."""
        return list(self._pods.get(key, {}).values())

    def podgroup(self, namespace: str, name: str) -> kube.Obj | None:
        """The PodGroup ``namespace/name`` as the informer has it now."""
        return self.podgroup_informer.cache.get(f"{namespace}/{name}")

    def members(self, who: PodIdentity) -> list[kube.Obj]:
        """The Pods a gang's job is for that still exist (any phase)."""
        wanted = set(who.members)
        return [p for p in self.pods(who.key)
                if member_id(p["metadata"].get("uid", "")) in wanted]

    def owners(self) -> gang.Owners:
        """The sizes the batch Jobs and PodGroups give, as the informers have them now."""
        jobs, groups = self.job_informer.cache, self.podgroup_informer.cache

        def job(namespace: str, name: str) -> tuple[int | None, int | None] | None:
            found = jobs.get(f"{namespace}/{name}")
            if found is None:
                return None
            spec = found.get("spec") or {}
            return spec.get("parallelism"), spec.get("completions")

        def podgroup(namespace: str, name: str) -> int | None:
            found = groups.get(f"{namespace}/{name}")
            size = ((found or {}).get("spec") or {}).get("minMember")
            return size if isinstance(size, int) and not isinstance(size, bool) else None

        return gang.Owners(job=job, podgroup=podgroup,
                           podgroups_known=self.podgroup_informer.synced.is_set())

    def _on_owner(self, source: str, obj: kube.Obj) -> None:
        meta = obj.get("metadata") or {}
        key = str(GangKey(str(meta.get("namespace")), f"{source}:{meta.get('name')}"))
        for handler in self.handlers:
            handler(key)
