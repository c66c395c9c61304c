"""A Pod's facts, for its plan (:class:`sunk.plans.podplan.PodFacts`).

What the Pod's annotations may be believed to say (:mod:`sunk.plans.ownership`, checked against
the job table), its job as Slurm has it, the Kubernetes Node of that job's Slurm node and the
room there, and what the executor remembers of the Pod. Read from the cluster model, and from
Slurm only where the job table cannot say.
"""

from __future__ import annotations

from sunk import kube, objects
from sunk.apply.executor import Executor
from sunk.model.cluster import Cluster
from sunk.model.slurmwatch import SlurmWatch
from sunk.plans import ownership, podplan
from sunk.plans.decide import JobView, PodView
from sunk.runtime import metrics
from sunk.slurm.client import SlurmError


class PodFactReader:
    def __init__(self, cluster: Cluster, watch: SlurmWatch, executor: Executor,
                 owned: ownership.Keys) -> None:
        self.cluster = cluster
        self.watch = watch
        self.executor = executor
        self.owned = owned

    async def gather(self, pod: kube.Obj, *, tries: int = 0) -> podplan.PodFacts:
        """The facts of ``pod``'s plan (:func:`sunk.plans.podplan.plan_pod`). ``tries``: its
        failed reconciles so far."""
        typed = objects.pod(pod)
        uid = typed.metadata.uid
        unanswered = await self.unanswered(uid)
        owned = await self.ownership(pod)
        job = await self.job_view(owned.job_id, uid)
        memory = self.executor.memory
        k8s_node = self.cluster.index().to_k8s.get(job.node) if job is not None else None
        placing = (job is not None and k8s_node is not None and job.started
                   and not self.cluster.assumed.is_bound(pod))
        no_room = tuple(self.cluster.room(pod, k8s_node)) if placing and k8s_node else ()
        return podplan.PodFacts(
            key=typed.metadata.key,
            view=PodView(phase=typed.status.phase,
                         bound=self.cluster.assumed.is_bound(pod),
                         deleting=typed.metadata.terminating,
                         job_id=owned.job_id, rejected=bool(owned.rejected),
                         node=typed.spec.node_name or ""),
            owned=owned, job=job,
            k8s_node=k8s_node,
            told_ignored=uid in memory.told_ignored,
            replaced=frozenset(memory.replaced.get(uid, ())),
            no_room=no_room,
            refitted=owned.job_id in memory.refitted.get(uid, ()),
            not_counted=tuple(self.cluster.not_counted_by_slurm(k8s_node))
            if no_room and k8s_node else (),
            unanswered=unanswered, tries=tries)

    async def unanswered(self, uid: str) -> str | None:
        """A submit for ``uid`` that got no answer may have reached Slurm: the jobs Slurm took
        since are read first, so one naming the Pod is among the facts (and adopted). Why
        they could not be read, if they could not (None: nothing to read, or read)."""
        if uid not in self.cluster.jobs.unanswered:
            return None
        try:
            await self.watch.find_unanswered(uid)
        except SlurmError as exc:
            metrics.SUBMIT_ERRORS.inc()
            return exc.slurm_message
        return None

    async def ownership(self, pod: kube.Obj) -> ownership.Ownership:
        """What the Pod's scheduler-owned annotations may be believed to say
        (:mod:`sunk.plans.ownership`): its job is the one Slurm ties to its uid."""
        uid = objects.pod(pod).metadata.uid
        annotations = self.cluster.assumed.annotations(pod)  # with what was written, not watched
        owner_of: dict[int, str | None] = {}
        jobs = self.cluster.jobs
        while True:
            owned = ownership.read(annotations, uid, self.owned, proven=jobs.by_uid.get(uid),
                                   owner_of=owner_of)
            if owned.check_job is None:
                return owned
            check = owned.check_job
            if (job := jobs.get(check)) is not None:
                # learned again: the Pod's newest job, should the table have forgotten a newer one
                self.watch.learn(job)
            else:
                job = await self.watch.read(check)  # learned, if it is ours
            who = jobs.owner(check) if job is not None and jobs.get(check) is job else None
            owner_of[check] = (ownership.GONE if job is None else
                               who.uid if who is not None else ownership.NOT_OURS)

    async def job_view(self, job_id: int | None, uid: str) -> JobView | None:
        """The job as Slurm has it, if it is still the job of the Pod ``uid`` (None: gone).
        Slurm may have given the id to another Pod's job since (after losing this one)."""
        if job_id is None:
            return None
        job = self.cluster.jobs.get(job_id)
        if job is None:
            job = await self.watch.read(job_id)
            if job is None or self.cluster.jobs.get(job_id) is not job:
                return None
        if job.owner is None or job.owner.uid != uid:
            return None
        return JobView.of(job)

    def job_cached(self, uid: str) -> tuple[int | None, JobView | None]:
        """The Pod's newest job as the job table has it (no read from Slurm)."""
        job_id = self.cluster.jobs.by_uid.get(uid)
        job = self.cluster.jobs.get(job_id) if job_id is not None else None
        if job is None or job.owner is None or job.owner.uid != uid:
            return job_id, None
        return job_id, JobView.of(job)
