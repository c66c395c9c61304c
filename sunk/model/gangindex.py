"""The Pods naming this scheduler by the gang they may belong to, and what a gang's size comes
from (docs/gangs.md).

Kept as the Pods' watch goes, so a gang's reconcile reads its own Pods, not every Pod. Whether a
Pod is in fact a member is for its claim (:func:`sunk.plans.gang.claim`), which reads the sizes
of batch Jobs and PodGroups from :meth:`GangIndex.owners`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from sunk import kube, objects
from sunk.plans import gang, jobset, workload
from sunk.plans.keys import GangKey
from sunk.settings import Settings
from sunk.slurm.job import PodIdentity, member_id

log = logging.getLogger("sunk.gangs")


class GangIndex:
    def __init__(self, api: kube.Client, annotation_prefix: str,
                 scheduler_name: str | None = None) -> None:
        self.api = api
        self.annotation_prefix = annotation_prefix
        #: A JobSet is a gang only if all its Pods name this scheduler.
        self.scheduler_name = scheduler_name
        #: What a gang's size comes from: batch Jobs, and PodGroups if their CRD is installed
        #: (not waited for: without it, PodGroup gangs wait and say why).
        self.job_informer = kube.Informer(api, "jobs", version="batch/v1",
                                          handler=lambda _, obj: self._on_owner("job", obj))
        self.podgroup_informer = kube.Informer(
            api, "podgroups", version=gang.PODGROUP_VERSION,
            handler=lambda _, obj: self._on_owner("podgroup", obj))
        #: Kubernetes' own PodGroups, in the version the API server serves (found at start).
        self.workload_informer = kube.Informer(
            api, "podgroups", version=f"{workload.GROUP}/{workload.VERSIONS[0]}",
            handler=lambda _, obj: self._on_group("workload", obj))
        #: The version of ``scheduling.k8s.io`` read, once found; None before or if not served.
        self.workload_version: str | None = None
        #: JobSets, if their CRD is installed (not waited for, as PodGroups).
        self.jobset_informer = kube.Informer(
            api, "jobsets", version=jobset.VERSION, trim=jobset.trim,
            handler=lambda _, obj: self._on_group("jobset", obj))
        #: Gang key -> its Pods (that name this scheduler) by key; Pod key -> its gang key.
        self._pods: dict[str, dict[str, kube.Obj]] = {}
        self._gang_of: dict[str, str] = {}
        #: (namespace, "workload:<PodGroup>" or "jobset:<JobSet>") -> the Pods naming it, by
        #: key: whether they are its gang depends on the object (a basic policy, a JobSet that
        #: does not run all at once, leave them to the other sources).
        self._in_group: dict[tuple[str, str], dict[str, kube.Obj]] = {}
        #: Pod key -> the groups it was filed under (so a changed label files it out again).
        self._groups_named: dict[str, tuple[tuple[str, str], ...]] = {}
        #: (namespace, group) -> what it said last (a policy, a shape): a change of status
        #: alone (the JobSet controller's counts, sunk's own condition) files nothing again.
        self._group_said: dict[tuple[str, str], object] = {}
        #: Called with a gang's key when its Job or PodGroup changes.
        self.handlers: list[Callable[[str], None]] = []
        #: Called with each Pod filed again as its Kubernetes PodGroup or JobSet changes.
        self.pod_handlers: list[Callable[[str, kube.Obj], None]] = []
        #: The lookups of :meth:`owners`, with which informers had listed when they were made.
        self._owners: tuple[tuple[bool, bool, bool], gang.Owners] | None = None

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
        for where in self._groups_named.pop(key, ()):  # as it was: it may name others now
            in_group = self._in_group[where]
            in_group.pop(key, None)
            if not in_group:
                del self._in_group[where]
        if kind != "DELETED" and (named := _groups_of(pod)):  # filed again as those change
            self._groups_named[key] = named
            for where in named:
                self._in_group.setdefault(where, {})[key] = pod

    def gang_of(self, pod: kube.Obj) -> str | None:
        """The key of the gang ``pod`` may belong to (whether it is one is for its claim)."""
        name = gang.gang_name(pod, self.annotation_prefix, self.owners())
        return None if name is None else str(GangKey(pod["metadata"]["namespace"], name))

    def pods(self, key: str) -> list[kube.Obj]:
        """The Pods naming this scheduler that may belong to the gang ``key``."""
        return list(self._pods.get(key, {}).values())

    def podgroup(self, namespace: str, name: str) -> kube.Obj | None:
        """The PodGroup ``namespace/name`` as the informer has it now."""
        return self.podgroup_informer.cache.get(f"{namespace}/{name}")

    def workload_podgroup(self, namespace: str, name: str) -> kube.Obj | None:
        """Kubernetes' PodGroup ``namespace/name`` as the informer has it now."""
        return self.workload_informer.cache.get(f"{namespace}/{name}")

    def optional_runs(self, settings: Settings) -> list[Callable[[], Coroutine[Any, Any, None]]]:
        """The watches of PodGroups and JobSets that ``settings`` asks for."""
        runs: list[Callable[[], Coroutine[Any, Any, None]]] = []
        if settings.watch_podgroups:
            runs += [self.podgroup_informer.run, self.run_workloads]
        if settings.watch_jobsets:
            runs.append(self.jobset_informer.run)
        return runs

    async def run_workloads(self) -> None:
        """Find which version of ``scheduling.k8s.io`` the API server serves PodGroups in,
        then watch them; without one, look again every minute (an API server restarted with
        the API switched on serves it from then)."""
        for looks in itertools.count():
            if (version := await find_workload_version(self.api)) is not None:
                break
            if looks == 0:
                log.info("the API server serves no PodGroups of %s: looking again every "
                         "minute", workload.GROUP)
            await asyncio.sleep(60)
        self.workload_version = version
        self.workload_informer.version = f"{workload.GROUP}/{version}"
        log.info("reading PodGroups of %s/%s", workload.GROUP, version)
        await self.workload_informer.run()

    def members(self, who: PodIdentity) -> list[kube.Obj]:
        """The Pods a gang's job is for that still exist (any phase)."""
        wanted = set(who.members)
        return [p for p in self.pods(who.key)
                if member_id(p["metadata"].get("uid", "")) in wanted]

    def owners(self) -> gang.Owners:
        """The sizes the batch Jobs and PodGroups give, as the informers have them now. Made
        again only when an informer's first listing lands (every Pod event asks)."""
        known = (self.podgroup_informer.synced.is_set(), self.workload_informer.synced.is_set(),
                 self.jobset_informer.synced.is_set())
        if self._owners is None or self._owners[0] != known:
            self._owners = known, self._make_owners(*known)
        return self._owners[1]

    def _make_owners(self, podgroups_known: bool, workloads_known: bool,
                     jobsets_known: bool) -> gang.Owners:
        # each lookup reads the informer's cache at call time: a relist replaces it

        def job(namespace: str, name: str) -> tuple[int | None, int | None] | None:
            found = self.job_informer.cache.get(f"{namespace}/{name}")
            if found is None:
                return None
            spec = found.get("spec") or {}
            return spec.get("parallelism"), spec.get("completions")

        def podgroup(namespace: str, name: str) -> int | None:
            found = self.podgroup_informer.cache.get(f"{namespace}/{name}")
            size = ((found or {}).get("spec") or {}).get("minMember")
            return size if isinstance(size, int) and not isinstance(size, bool) else None

        def kubernetes_podgroup(namespace: str, name: str) -> workload.Policy | None:
            found = self.workload_informer.cache.get(f"{namespace}/{name}")
            return workload.policy(found) if found is not None else None

        def jobset_shape(namespace: str, name: str) -> jobset.Shape | None:
            found = self.jobset_informer.cache.get(f"{namespace}/{name}")
            return jobset.shape(found, self.scheduler_name) if found is not None else None

        return gang.Owners(job=job, podgroup=podgroup, podgroups_known=podgroups_known,
                           workload=kubernetes_podgroup, workloads_known=workloads_known,
                           jobset=jobset_shape, jobsets_known=jobsets_known)

    def _on_group(self, source: str, obj: kube.Obj) -> None:
        """A Kubernetes PodGroup or a JobSet seen, changed or gone: the Pods naming it are
        filed again (it may leave them to the other sources), and each gang they were in
        looks again, as each of them does."""
        meta = objects.custom(obj).metadata
        name = f"{source}:{meta.name}"
        where = (meta.namespace, name)
        cache = self.workload_informer.cache if source == "workload" else (
            self.jobset_informer.cache)
        found = cache.get(meta.key)
        said = None if found is None else (
            workload.policy(found) if source == "workload"
            else jobset.shape(found, self.scheduler_name))
        if where in self._group_said and self._group_said[where] == said:
            return
        if found is None:
            self._group_said.pop(where, None)
        else:
            self._group_said[where] = said
        touched = {str(GangKey(meta.namespace, name))}
        refiled = list(self._in_group.get(where, {}).values())
        for pod in refiled:
            if (was := self._gang_of.get(kube.key(pod))) is not None:
                touched.add(was)
            self.observe("MODIFIED", pod)
        for gang_key in sorted(touched):
            for handler in self.handlers:
                handler(gang_key)
        for pod in refiled:  # each looks again: in its gang now, or alone
            for pod_handler in self.pod_handlers:
                pod_handler("MODIFIED", pod)

    def _on_owner(self, source: str, obj: kube.Obj) -> None:
        meta = obj.get("metadata") or {}
        key = str(GangKey(str(meta.get("namespace")), f"{source}:{meta.get('name')}"))
        for handler in self.handlers:
            handler(key)


def _groups_of(pod: kube.Obj) -> tuple[tuple[str, str], ...]:
    """The Kubernetes PodGroup and the JobSet a Pod names: either may decide its gang."""
    typed = objects.pod(pod)
    namespace, named = typed.metadata.namespace, []
    if group := typed.spec.scheduling_group.pod_group_name:
        named.append((namespace, f"workload:{group}"))
    if (set_name := typed.metadata.labels.get(jobset.NAME_LABEL)) is not None:
        named.append((namespace, f"jobset:{set_name}"))
    return tuple(named)


async def find_workload_version(api: kube.Client) -> str | None:
    """The version of ``scheduling.k8s.io`` to read PodGroups in (discovery); None if the API
    server serves none, or cannot say now (logged)."""
    try:
        group = await api.request("GET", f"/apis/{workload.GROUP}")
        served: dict[str, list[str]] = {}
        for version in workload.served_versions(group):
            listing = await api.request("GET", f"/apis/{workload.GROUP}/{version}")
            served[version] = workload.served_resources(listing)
    except kube.KubeError as exc:
        if exc.status != 404:
            log.warning("could not read which versions of %s are served: %s", workload.GROUP,
                        exc)
        return None
    return workload.choose_version(served)
