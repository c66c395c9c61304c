"""Says on each Pod whose job waits in Slurm's queue why it waits and until when.

Once a second it walks the jobs Slurm holds pending for Pods (the job table: the poller reads a
pending job's reason and start estimate a second after its submission, then every 30 s) and
asks the executor to write what changed (:mod:`sunk.plans.waiting` decides what and whether).
It also keeps the queue's metrics: Pods waiting by namespace, partition and reason, and how far
Slurm's last start estimate was from the start.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import Counter
from collections.abc import Iterator

from sunk import kube, objects
from sunk.apply.executor import Executor
from sunk.apply.waiting import job_waiting
from sunk.model.cluster import Cluster
from sunk.plans import waiting
from sunk.runtime import metrics
from sunk.runtime.supervise import forever
from sunk.slurm.job import Job, member_id

#: Waits between two looks at the queue.
INTERVAL = 1.0


class WaitingReporter:
    def __init__(self, cluster: Cluster, executor: Executor) -> None:
        self.cluster = cluster
        self.executor = executor
        #: Job id -> Slurm's last start estimate for it (epoch seconds), until it starts.
        self.estimates: dict[int, float] = {}
        #: Job id -> the job as last shown on its Pods: the same record is not looked at again
        #: (the job table replaces a job's record when it reads something new of it).
        self._shown: dict[int, Job] = {}

    async def run(self) -> None:
        await forever("saying why Pods wait", self._every_second)

    async def _every_second(self) -> None:
        while True:
            self.look()
            await asyncio.sleep(INTERVAL)

    def look(self) -> None:
        """One pass over the queue: conditions written where they changed, metrics set."""
        now, wall = time.monotonic(), time.time()
        jobs = self.cluster.jobs
        waiting_pods: Counter[tuple[str, str, str]] = Counter()
        for job_id, job in jobs.jobs.items():
            owner = job.owner
            if owner is None:
                continue
            if job.state != "PENDING":
                if job_id in self.estimates:
                    self._started(job_id, job, now, wall)
                continue
            waiting_pods[(owner.namespace, str(job.raw.get("partition") or ""),
                          job.reason or "None")] += len(owner.members) or 1
            if self._shown.get(job_id) is job:
                continue
            found = job_waiting(self.cluster, job, wall) if job.reason else None
            if found is None:
                continue  # not read yet: its job id's write says it waits
            want, nodes = found
            if want.expected_start is not None:
                self.estimates[job_id] = want.expected_start
            submitted = jobs.submitted_at.get(job_id)
            if submitted is not None and now - submitted < waiting.SHOW_AFTER:
                continue  # likely to start at once; else its job id's write says it
            shown = [self.executor.waiting.show(pod, dataclasses.replace(
                         want, nominated=nominated if want.expected_start is not None else ""))
                     for pod, nominated in self._waiting_pods(job, nodes)]
            if all(shown):
                self._shown[job_id] = job
        for kept in (self.estimates, self._shown):
            for gone in kept.keys() - jobs.jobs.keys():
                del kept[gone]
        metrics.PODS_WAITING.clear()
        for (namespace, partition, reason), count in waiting_pods.items():
            metrics.PODS_WAITING.labels(namespace, partition, reason).set(count)

    def _started(self, job_id: int, job: Job, now: float, wall: float) -> None:
        """A job that left the queue: how far off its last start estimate was."""
        estimate = self.estimates.pop(job_id, None)
        if estimate is None or (job.finished and job_id not in self.cluster.jobs.started_at):
            return
        started = self.cluster.jobs.started_at.get(job_id)
        at = wall - (now - started) if started is not None else wall
        metrics.START_ESTIMATE_ERROR.observe(abs(at - estimate))

    def _waiting_pods(self, job: Job, nodes: list[str]) -> Iterator[tuple[kube.Obj, str]]:
        """The job's Pods that still wait (not bound, not being deleted), each with the Node
        planned for it: a gang member's rank is its node's place in the job."""
        owner = job.owner
        assert owner is not None
        if owner.gang:
            rank = {member: r for r, member in enumerate(owner.members)}
            pods = self.cluster.gang_members(owner)
        else:
            found = self.cluster.pod_of(owner)
            pods, rank = ([found] if found is not None else []), {}
        for pod in pods:
            typed = objects.pod(pod)
            if typed.spec.node_name or typed.metadata.terminating:
                continue
            r = rank.get(member_id(typed.metadata.uid), 0)
            yield pod, nodes[r] if r < len(nodes) else ""
