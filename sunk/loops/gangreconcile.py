"""The reconcile of one gang: facts from the cluster model, a plan, the executor.

The scheduler hands a gang's key (``namespace/source:name``, :mod:`sunk.plans.gang`) here whenever
one of its Pods, its Job or PodGroup, or its Slurm job changes. Like a Pod's reconcile it can
stop and start anywhere: the gang's newest Slurm job names its members in rank order, so a
restarted scheduler binds the rest of a half-bound gang to the same nodes.
"""

from __future__ import annotations

import datetime
import logging
import time

from sunk import kube, objects
from sunk.apply.executor import Executor
from sunk.model.cluster import Cluster
from sunk.model.slurmwatch import SlurmWatch
from sunk.model.state import GangMember, GangRecord
from sunk.plans import actions as do
from sunk.plans import gang, gangplan, hetjob, podgroup, podplan, workload
from sunk.plans.decide import JobView
from sunk.plans.keys import GangKey
from sunk.plans.translate import TranslateSettings
from sunk.policy.loader import PolicyStore
from sunk.runtime import metrics
from sunk.slurm.job import PodIdentity, member_id
from sunk.slurm.text import expand_hostlist

log = logging.getLogger("sunk.gangs")


class GangReconciler:
    def __init__(self, cluster: Cluster, watch: SlurmWatch, executor: Executor,
                 policies: PolicyStore, translate_settings: TranslateSettings) -> None:
        self.cluster = cluster
        self.watch = watch
        self.executor = executor
        self.policies = policies
        self.translate_settings = translate_settings
        self.settings = cluster.settings
        self.prefix = self.settings.annotation_prefix
        #: Slurm's node table as last indexed (its place per node name), and the listing it
        #: was indexed from: indexed again only when the poller replaces the listing.
        self._node_order: tuple[object, dict[str, int]] = (None, {})

    def node_order(self) -> dict[str, int]:
        """Each Slurm node's place in Slurm's node table (the order ranks follow)."""
        table = self.cluster.state.slurm_nodes
        if self._node_order[0] is not table:
            self._node_order = (table, {name: i for i, name in enumerate(table)})
        return self._node_order[1]

    def claim(self, pod: kube.Obj) -> gang.Claim | None:
        return gang.claim(pod, self.prefix, self.cluster.gang_owners())

    async def reconcile(self, key: GangKey, *, first_try: bool) -> do.RetryLater | None:
        """One look at the gang; a wait if it must look again (a timeout due is one)."""
        namespace, name = key.namespace, key.name
        owners = self.cluster.gang_owners()
        pods = [(p, gang.claim(p, self.prefix, owners))
                for p in self.cluster.gang_pods(str(key))]
        # a Pod filed here whose claim names another gang now (its PodGroup or JobSet was just
        # seen) is that gang's: filed there again by the index, it is not counted here
        claimed = [(p, c) for p, c in pods if c is not None and c.name == name]
        live = [(p, c) for p, c in claimed if _live(p)]
        found = gang.assemble(namespace, name, live, max_size=self.settings.gang_max_size)
        # a submit that got no answer may have reached Slurm: its jobs since are read first
        await self.watch.find_unanswered(found.id)
        facts = self._facts(found, [p for p, _ in claimed])
        plan = gangplan.plan_gang(facts)
        record = self._record(found, facts, plan)
        by_key = {kube.key(p): p for p, _ in claimed}
        steps = plan.steps
        if plan.submit:  # what a submission needs is read only when there is one to make
            steps += await self._plan_submission(found, by_key, first_try=first_try)
        later = await self.executor.gangs.apply(found.id, record, by_key, steps)
        binds = [a for _, a in plan.steps if isinstance(a, do.Bind)]
        if binds and later is None and (
                facts.job is not None) and (
                started := self.cluster.jobs.started_at.get(facts.job.job_id)) is not None:
            took = time.monotonic() - started  # every member is bound now
            metrics.GANG_BIND_LATENCY.observe(took)
            record.note("bound", f"every member, {took:.3f}s after job {facts.job.job_id} "
                                 "started")
            log.info("gang %s: all %d members bound %.3fs after job %d started", found.key,
                     len(facts.job.members), took, facts.job.job_id)
        if plan.show is not None:
            for pod, _ in claimed:
                self.executor.waiting.show(pod, plan.show)
        self._show_podgroup(found, record, [p for p, _ in claimed])
        if later is None and plan.recheck_in is not None:
            later = do.RetryLater(plan.waiting or "a timeout is due", after=plan.recheck_in)
        return later

    def _facts(self, found: gang.Gang, pods: list[kube.Obj]) -> gangplan.GangFacts:
        job_id = self.cluster.jobs.by_uid.get(found.id)
        job = self.cluster.jobs.get(job_id) if job_id is not None else None
        gang_job = None
        if job is not None and job.owner is not None and job.owner.uid == found.id:
            view = JobView.of(job)
            nodes = hetjob.ranked_nodes([expand_hostlist(c) for c in job.components] if
                                        job.components else [expand_hostlist(job.nodes)],
                                        job.owner.parts, self.node_order())
            gang_job = gangplan.GangJob(job.job_id, view, job.owner.members, nodes,
                                        job.owner.parts)
        started_for = None
        if gang_job is not None and gang_job.view.started:  # since sunk heard it start
            started = self.cluster.jobs.started_at.get(gang_job.job_id)
            started_for = 0.0 if started is None else time.monotonic() - started
        members = {}
        for pod in pods:
            typed = objects.pod(pod)
            uid = typed.metadata.uid
            annotations = self.cluster.assumed.annotations(pod)
            members[member_id(uid)] = gangplan.MemberFacts(
                key=typed.metadata.key, id=member_id(uid), phase=typed.status.phase,
                bound=self.cluster.assumed.is_bound(pod),
                deleting=typed.metadata.terminating,
                rejected=bool(annotations.get(self.prefix + "rejected")) and annotations.get(
                    self.prefix + "pod-uid") == uid)
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

    async def _plan_submission(self, found: gang.Gang, pods: dict[str, kube.Obj], *,
                               first_try: bool) -> tuple[gangplan.Step, ...]:
        """The gang's job as part of its plan: every member through the policies and
        translated as a Pod would be (stopping at the first that cannot be submitted), then
        :func:`gangplan.plan_gang_submission`."""
        if (why := self.policies.not_in_force()) is not None:  # each member says why
            return tuple((member.key, podplan.await_policies(why)) for member in found.members)
        members: list[gangplan.MemberSubmission] = []
        for member in found.members:
            pod = pods[member.key]
            actions = await self._member_submission(pod, first_try=first_try)
            members.append(gangplan.MemberSubmission(member.key, objects.pod(pod).metadata.name,
                                                     actions))
            if not isinstance(actions[-1], do.Submit):
                break
        who = PodIdentity(found.namespace, found.name, found.id,
                          self.settings.scheduler_name, tuple(m.id for m in found.members))
        shape = hetjob.shape_of([objects.pod(pods[m.key]).metadata.annotations.get(
            self.prefix + hetjob.SHAPE_ANNOTATION) for m in found.members])
        return gangplan.plan_gang_submission(found, who, members, self.cluster.snapshot(),
                                             shape)

    async def _member_submission(self, pod: kube.Obj, *, first_try: bool
                                 ) -> tuple[do.PodAction, ...]:
        meta = objects.pod(pod).metadata
        namespace = self.cluster.namespace(meta.namespace)
        if namespace is None:  # its watch is behind the Pod's: policies may read it
            return (do.RetryLater(f"namespace {meta.namespace} not seen yet"),)
        whole = await self.cluster.whole_pod(pod)
        if whole is None:  # gone, or replaced by a Pod of that name: its events follow
            return (do.RetryLater(f"pod {meta.key} is gone or was replaced"),)
        decision = self.policies.evaluate(whole, namespace)
        return podplan.plan_submission(pod, decision, self.cluster.snapshot(),
                                       self.translate_settings, annotation_prefix=self.prefix,
                                       claims=self.cluster.devices.claims_of(pod),
                                       first_try=first_try)

    def _show_podgroup(self, found: gang.Gang, record: GangRecord, pods: list[kube.Obj]) -> None:
        """A PodGroup's gang: its phase and counts onto a scheduler-plugins PodGroup's status,
        its condition onto a Kubernetes PodGroup's."""
        source, _, name = found.name.partition(":")
        if not self.settings.podgroup_status:
            return
        if source == "workload":
            self._show_workload_podgroup(found, record, name)
        if source != "podgroup" or found.size is None:
            return
        group = self.cluster.gang_index.podgroup(found.namespace, name)
        if group is None:
            return
        want = podgroup.status(objects.custom(group).status, found.size,
                               [objects.pod(p).status.phase for p in pods],
                               datetime.datetime.now(datetime.UTC))
        if want is not None:
            self.executor.waiting.show_podgroup(group, record, want)

    def _show_workload_podgroup(self, found: gang.Gang, record: GangRecord, name: str) -> None:
        index = self.cluster.gang_index
        version, group = index.workload_version, index.workload_podgroup(found.namespace, name)
        if version is None or group is None:
            return
        typed = objects.custom(group)
        conditions = typed.status.get("conditions")
        want = workload.gang_condition(
            version, gang=found.name, size=found.size,
            bound=sum(1 for m in record.members if m.k8s_node), job_id=record.job_id,
            problem=record.problem, waiting=record.waiting,
            generation=typed.metadata.generation,
            now=objects.timestamp(time.time()),
            current=conditions if isinstance(conditions, list) else [])
        if want is not None:
            self.executor.waiting.show_podgroup(
                group, record, {"conditions": [want]}, version=f"{workload.GROUP}/{version}",
                strategic=True)

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
        parts = dict(zip(facts.job.members, facts.job.parts, strict=False)) if facts.job else {}
        record.members = []
        for member in found.members:
            pod = self.cluster.pod(member.key)
            typed = objects.pod(pod) if pod is not None else objects.Pod()
            node, phase = typed.spec.node_name, typed.status.phase
            record.members.append(GangMember(member.key, member.rank,
                                             nodes.get(member.id, ""), node, phase,
                                             parts.get(member.id)))
            state.gang_of[member.key] = found.key
            if pod is not None:  # its line on the Pods page
                line = self.executor.record(pod)
                line.phase = "Terminating" if typed.metadata.terminating else phase
                line.k8s_node, line.slurm_node = node, nodes.get(member.id, "")
                if facts.job is not None:
                    line.job_id, line.job_state = facts.job.job_id, facts.job.view.state
        record.waiting = plan.waiting
        if plan.waiting:
            record.note("waiting", plan.waiting)
        if not facts.pods and (facts.job is None or facts.job.view.finished):
            state.gangs.pop(found.key, None)  # every Pod of it is gone
            self.executor.forget_gang(found.id)
        return record


def _live(pod: kube.Obj) -> bool:
    typed = objects.pod(pod)
    return not typed.metadata.terminating and typed.status.phase not in gang.TERMINAL
