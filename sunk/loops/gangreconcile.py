"""The reconcile of one gang: facts from the cluster model, a plan, the executor.

The scheduler hands a gang's key (``namespace/source:name``, :mod:`sunk.plans.gang`) here whenever
one of its Pods, its Job or PodGroup, or its Slurm job changes. Like a Pod's reconcile it can
stop and start anywhere: the gang's newest Slurm job names its members in rank order, so a
restarted scheduler binds the rest of a half-bound gang to the same nodes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from sunk import kube
from sunk.apply.executor import Executor, RetryLater
from sunk.model.cluster import Cluster
from sunk.model.state import GangMember, GangRecord
from sunk.plans import actions as do
from sunk.plans import gang, gangplan, podplan
from sunk.plans.decide import JobView
from sunk.plans.translate import NoRoom, TranslateSettings, Unschedulable, gang_job_description
from sunk.policy.loader import PolicyStore
from sunk.runtime import metrics
from sunk.slurm.client import SlurmError
from sunk.slurm.job import PodIdentity, member_id
from sunk.slurm.text import expand_hostlist

log = logging.getLogger("sunk.gangs")


class GangReconciler:
    def __init__(self, cluster: Cluster, executor: Executor, policies: PolicyStore,
                 translate_settings: TranslateSettings, *,
                 recheck: Callable[[str, float], None]) -> None:
        self.cluster = cluster
        self.executor = executor
        self.policies = policies
        self.translate_settings = translate_settings
        self.settings = cluster.settings
        self.prefix = self.settings.annotation_prefix
        self.recheck = recheck

    def claim(self, pod: kube.Obj) -> gang.Claim | None:
        return gang.claim(pod, self.prefix, self.cluster.gang_owners())

    async def reconcile(self, key: str, *, first_try: bool) -> None:
        namespace, name = key.split("/", 1)
        owners = self.cluster.gang_owners()
        pods = [(p, gang.claim(p, self.prefix, owners)) for p in self.cluster.gang_pods(key)]
        claimed = [(p, c) for p, c in pods if c is not None]
        live = [(p, c) for p, c in claimed if _live(p)]
        found = gang.assemble(namespace, name, live, max_size=self.settings.gang_max_size)
        facts = self._facts(found, [p for p, _ in claimed])
        plan = gangplan.plan_gang(facts)
        record = self._record(found, facts, plan)
        by_key = {kube.key(p): p for p, _ in claimed}
        await self.executor.apply_gang(found.id, by_key, plan.steps)
        binds = [a for _, a in plan.steps if isinstance(a, do.Bind)]
        if binds and not any(isinstance(a, do.RetryLater) for _, a in plan.steps) and (
                first := self.executor.memory.gang_started.get(found.id)):
            took = time.monotonic() - first[1]  # every member is bound now
            metrics.GANG_BIND_LATENCY.observe(took)
            record.note("bound", f"every member, {took:.3f}s after job {first[0]} started")
            log.info("gang %s: all %d members bound %.3fs after job %d started", found.key,
                     len(facts.job.members) if facts.job else 0, took, first[0])
        if plan.recheck_in is not None:
            self.recheck(key, plan.recheck_in)
        if plan.submit:
            await self._submit(found, [by_key[m.key] for m in found.members], record,
                               first_try=first_try)

    def _facts(self, found: gang.Gang, pods: list[kube.Obj]) -> gangplan.GangFacts:
        job_id = self.cluster.jobs.by_uid.get(found.id)
        job = self.cluster.jobs.get(job_id) if job_id is not None else None
        gang_job = None
        if job is not None and job.owner is not None and job.owner.uid == found.id:
            view = JobView.of(job)
            nodes = tuple(expand_hostlist(job.nodes)) if job.nodes else ()
            gang_job = gangplan.GangJob(job.job_id, view, job.owner.members, nodes)
        started_for = None
        if gang_job is not None and gang_job.view.started:
            first = self.executor.memory.gang_started.get(found.id)
            if first is None or first[0] != gang_job.job_id:
                first = (gang_job.job_id, time.monotonic())
                self.executor.memory.gang_started[found.id] = first
            started_for = time.monotonic() - first[1]
        members = {}
        for pod in pods:
            meta = pod["metadata"]
            annotations = self.cluster.assumed.annotations(pod)
            members[member_id(meta["uid"])] = gangplan.MemberFacts(
                key=kube.key(pod), id=member_id(meta["uid"]),
                phase=(pod.get("status") or {}).get("phase", "Pending"),
                bound=self.cluster.assumed.is_bound(pod),
                deleting=bool(meta.get("deletionTimestamp")),
                rejected=bool(annotations.get(self.prefix + "rejected")) and annotations.get(
                    self.prefix + "pod-uid") == meta["uid"])
        live_created = [kube.created(p) for p in pods if _live(p)]
        return gangplan.GangFacts(
            gang=found, pods=members, job=gang_job, prefix=self.prefix,
            k8s_nodes=self.cluster.index().to_k8s,
            replaced=frozenset(self.executor.memory.replaced.get(found.id, ())),
            withdrawn=frozenset(self.executor.memory.withdrawn.get(found.id, ())),
            cancelled=frozenset(self.executor.memory.gang_cancelled.get(found.id, ())),
            started_for=started_for,
            waited_for=time.time() - min(live_created, default=time.time()),
            incomplete_after=self.settings.gang_incomplete_timeout,
            bind_within=self.settings.gang_bind_timeout)

    async def _submit(self, found: gang.Gang, members: list[kube.Obj], record: GangRecord, *,
                      first_try: bool) -> None:
        """Every member through the policies and translated; one denied fails the gang."""
        descriptions = []
        by_key = {kube.key(p): p for p in members}
        for pod in members:
            namespace = self.cluster.namespace(pod["metadata"]["namespace"])
            if namespace is None:
                raise RetryLater(f"namespace {pod['metadata']['namespace']} not seen yet")
            whole = await self.cluster.whole_pod(pod)
            if whole is None:  # gone, or replaced by a Pod of that name: its events follow
                raise RetryLater(f"pod {kube.key(pod)} is gone or was replaced")
            decision = self.policies.evaluate(whole, namespace)
            actions = podplan.plan_submission(
                pod, decision, self.cluster.snapshot(), self.translate_settings,
                annotation_prefix=self.prefix, first_try=first_try)
            *told, last = actions
            for action in told:  # warnings: on the member they are about
                await self.executor.apply_gang(found.id, by_key, [(kube.key(pod), action)])
            match last:
                case do.Submit(description):
                    descriptions.append(dict(description))
                case do.Reject(reason, message):
                    await self._fail(found, members, record, reason,
                                     f"member {pod['metadata']['name']}: {message}")
                    return
                case do.RetryLater(why, room):
                    raise RetryLater(f"member {pod['metadata']['name']}: {why}", room=room)
        who = PodIdentity(found.namespace, found.name, found.id,
                          self.settings.scheduler_name, tuple(m.id for m in found.members))
        try:
            job = gang_job_description(descriptions, who, self.cluster.snapshot())
        except Unschedulable as exc:
            await self._fail(found, members, record, exc.reason, str(exc))
            return
        except NoRoom as exc:
            raise RetryLater(str(exc), room=True) from exc
        try:
            record.job_id = await self.executor.submit_gang(who, members, job)
        except SlurmError as exc:
            if not exc.permanent:
                raise
            await self._fail(found, members, record, "SlurmRefused",
                             f"Slurm refused the job: {exc.slurm_message}")
            return
        record.note("JobSubmitted", f"Slurm job {record.job_id} for {len(members)} nodes")
        await self.executor.apply_gang(found.id, by_key, [
            (kube.key(p), do.PodEvent(
                "GangSubmitted", f"gang {found.name}: Slurm job {record.job_id} asks for "
                                 f"{len(members)} nodes at once; this Pod is rank "
                                 f"{m.rank}")) for p, m in zip(members, found.members,
                                                              strict=True)])

    async def _fail(self, found: gang.Gang, members: list[kube.Obj], record: GangRecord,
                    reason: str, message: str) -> None:
        """One member can never run: the whole gang is rejected, with an Event on each."""
        record.problem = f"{reason}: {message}"
        metrics.PODS_REJECTED.inc(len(members))
        log.info("gang %s rejected: %s: %s", found.key, reason, message)
        by_key = {kube.key(p): p for p in members}
        await self.executor.apply_gang(found.id, by_key, [
            (kube.key(p), do.Reject(reason, f"gang {found.name}: {message}")) for p in members])

    def _record(self, found: gang.Gang, facts: gangplan.GangFacts,
                plan: gangplan.GangPlan) -> GangRecord:
        state = self.cluster.state
        record = state.gangs.get(found.key)
        if record is None:
            record = state.gangs[found.key] = GangRecord(found.namespace, found.name, found.size)
            record.note("seen")
        record.size, record.problem = found.size, found.problem
        if facts.job is not None:
            record.job_id, record.job_state = facts.job.job_id, facts.job.view.state
        nodes = dict(zip(facts.job.members, facts.job.nodes, strict=False)) if facts.job else {}
        record.members = []
        for member in found.members:
            pod = self.cluster.pod(member.key)
            node = ((pod or {}).get("spec") or {}).get("nodeName") or ""
            phase = ((pod or {}).get("status") or {}).get("phase", "Pending")
            record.members.append(GangMember(member.key, member.rank,
                                             nodes.get(member.id, ""), node, phase))
            state.gang_of[member.key] = found.key
            if pod is not None:  # its line on the Pods page
                line = self.executor.record(pod)
                line.phase = "Terminating" if pod["metadata"].get("deletionTimestamp") else phase
                line.k8s_node, line.slurm_node = node, nodes.get(member.id, "")
                if facts.job is not None:
                    line.job_id, line.job_state = facts.job.job_id, facts.job.view.state
        record.waiting = plan.waiting
        if plan.waiting:
            record.note("waiting", plan.waiting)
        if not facts.pods and (facts.job is None or facts.job.view.finished):
            state.gangs.pop(found.key, None)  # every Pod of it is gone
            self.executor.memory.forget_gang(found.id)
        return record


def _live(pod: kube.Obj) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and (
        (pod.get("status") or {}).get("phase") not in gang.TERMINAL)
