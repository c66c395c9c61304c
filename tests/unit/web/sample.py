"""A scheduler made of plain data, for the dashboard's tests, benchmark and local previews.

:class:`StaticScheduler` has the attributes the views read of ``sunk.loops.scheduler.Scheduler`` and
no I/O; :func:`sample` fills one with a cluster of any size in a realistic mix of states.
``python -m tests.unit.web.sample`` serves the dashboard on it.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import random
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sunk.model.nodeindex import NodeIndex
from sunk.model.state import GangMember, GangRecord, PodRecord, SchedulerState, Transition
from sunk.plans.locking import LOCK_KEY, LOCK_TAINT_SPEC
from sunk.policy.engine import PolicyEngine
from sunk.policy.loader import PolicyStatus, RecentError, load_sources
from sunk.policy.model import Origin, PolicyIssue, PolicyLoadError
from sunk.runtime.servers import serve
from sunk.runtime.trends import Latency, Reading, TrendPoint, TrendRecorder
from sunk.settings import Settings
from sunk.slurm.job import Job
from web import create_app

SAMPLE_POLICIES = {"10-sample.yaml": """
apiVersion: sunk.coreweave.com/v1alpha1
kind: SchedulingPolicy
metadata: {name: sunk-annotations}
spec:
  validations:
    - expression: "!has(object.metadata.annotations) || true"
      reason: InvalidAnnotation
      message: annotations must be valid
  mappings:
    comment: {type: string, expression: "null"}
---
apiVersion: sunk.coreweave.com/v1alpha1
kind: SchedulingPolicy
metadata: {name: sunk-pod}
spec:
  failurePolicy: Ignore
  validationActions: [Warn]
  matchConditions:
    - {name: has-containers, expression: "has(object.spec.containers)"}
  validations:
    - expression: "object.spec.containers.size() > 0"
      reason: NoContainers
"""}


@functools.cache
def _sample_engine() -> PolicyEngine:
    """Compiled once: an engine is immutable."""
    return load_sources(SAMPLE_POLICIES)


@dataclass
class StaticPolicies:
    """``sunk.policy.PolicyStore`` as the dashboard reads it, from plain data."""

    engine: PolicyEngine = field(default_factory=_sample_engine)
    generation: int = 1
    loaded_at: float = field(default_factory=time.time)
    error: PolicyLoadError | None = None
    error_at: float | None = None

    recent: list[RecentError] = field(default_factory=list)

    def status(self) -> PolicyStatus:
        return PolicyStatus(generation=self.generation, policies=self.engine.names,
                            loaded_at=self.loaded_at, error=self.error, error_at=self.error_at)

    def recent_errors(self) -> list[RecentError]:
        return list(self.recent)


@dataclass
class StaticScheduler:
    """Satisfies :class:`web.protocol.SchedulerView`."""

    state: SchedulerState = field(default_factory=SchedulerState)
    settings: Settings = field(default_factory=lambda: Settings(scheduler_name="sunk-sample"))
    policies: StaticPolicies = field(default_factory=StaticPolicies)
    jobs: dict[int, Job] = field(default_factory=dict)
    #: "namespace/name" -> the Pod object, as the scheduler's cache holds it.
    pod_objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Kubernetes Node name -> the Node.
    node_objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: "namespace/name" -> a slurmd Pod.
    slurmd_pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: What :meth:`kube_problem` answers.
    watch_problem: str = ""
    #: Pod uid -> its core/v1 Events, as the API server returns them.
    events: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: When set, what :meth:`pod_events` answers instead: the API server did not answer.
    events_error: str = ""
    #: How long :meth:`pod_events` takes (seconds), to stand for a slow API server.
    events_delay: float = 0.0
    #: Kubernetes Node -> what the Pods that stay there request.
    requests: dict[str, dict[str, int]] = field(default_factory=dict)
    #: The scheduler's throughput and latency (empty: no sample yet); :func:`sample_trends`.
    trends: TrendRecorder = field(default_factory=lambda: TrendRecorder(reader=Reading))

    def node_requests(self, node: str) -> Mapping[str, int]:
        return self.requests.get(node, {})

    def pod(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.pod_objects.get(f"{namespace}/{name}")

    def node(self, name: str) -> Mapping[str, Any] | None:
        return self.node_objects.get(name)

    @property
    def node_index(self) -> NodeIndex:
        return NodeIndex.build(self.slurmd_pods.values())

    def kube_problem(self) -> str:
        return self.watch_problem

    async def pod_events(self, namespace: str, name: str, uid: str
                         ) -> list[dict[str, Any]] | str:
        if self.events_delay:
            await asyncio.sleep(self.events_delay)
        return self.events_error or list(self.events.get(uid, ()))

    # -- building ------------------------------------------------------------------------------
    def add_node(self, slurm_name: str, k8s_name: str, *, state: tuple[str, ...] = ("IDLE",),
                 reason: str = "", lock: str | None = "false", taint: bool = False,
                 cpus: int = 32, alloc_cpus: int = 0, memory_mib: int = 262144,
                 alloc_memory_mib: int = 0, gpus: int = 8, gpus_used: int = 0,
                 gres_type: str = "h100", cordoned: bool = False, k8s_cpus: int = 33,
                 k8s_requested_cpus: int = 1) -> None:
        """A Slurm node, its slurmd Pod (``lock`` None: no annotation) and Kubernetes Node
        (``taint``: with the lock taint)."""
        self.state.slurm_nodes[slurm_name] = {
            "name": slurm_name, "state": list(state), "reason": reason, "cpus": cpus,
            "alloc_cpus": alloc_cpus, "real_memory": memory_mib,
            "alloc_memory": alloc_memory_mib,
            "gres": f"gpu:{gres_type}:{gpus}" if gpus else "",
            "gres_used": f"gpu:{gres_type}:{gpus_used}(IDX:N/A)" if gpus else "",
            "partitions": ["batch"]}
        annotations = {} if lock is None else {LOCK_KEY: lock}
        self.slurmd_pods[f"slurm/slurmd-{slurm_name}"] = {
            "metadata": {"name": f"slurmd-{slurm_name}", "namespace": "slurm",
                         "annotations": annotations},
            "spec": {"hostname": slurm_name, "nodeName": k8s_name}}
        spec: dict[str, Any] = {"unschedulable": cordoned}
        if taint:
            spec["taints"] = [dict(LOCK_TAINT_SPEC)]
        self.node_objects[k8s_name] = {
            "metadata": {"name": k8s_name, "labels": {}}, "spec": spec,
            "status": {"allocatable": {"cpu": str(k8s_cpus), "memory": f"{memory_mib + 1024}Mi",
                                       "nvidia.com/gpu": str(gpus), "pods": "110"}}}
        self.requests[k8s_name] = {"cpu": 1000 * k8s_requested_cpus, "memory": 2**30,
                                   "pods": 1}

    def add_pod(self, namespace: str, name: str, *, created: float, phase: str = "Pending",
                job_id: int | None = None, job_state: str = "", pending_reason: str = "",
                slurm_node: str = "", k8s_node: str = "", bound_after: float | None = None,
                rejected: str = "", last_event: str = "",
                annotations: Mapping[str, str] | None = None, account: str = "",
                qos: str = "", read: bool = True) -> PodRecord:
        """A Pod record, the Pod object in the informer cache and, with ``job_id``, its job:
        submitted with ``account`` and ``qos`` (if given) and, if ``read``, Slurm's record of it
        (:func:`job_record`; not ``read``: a job just submitted, its record never read)."""
        uid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"pod/{namespace}/{name}"))
        rec = PodRecord(namespace, name, uid, created, phase=phase, job_id=job_id,
                        job_state=job_state, pending_reason=pending_reason,
                        slurm_node=slurm_node, k8s_node=k8s_node,
                        bound_at=None if bound_after is None else created + bound_after,
                        rejected=rejected, last_event=last_event)
        rec.history.append(Transition(created, "seen"))
        if job_id is not None:
            rec.history.append(Transition(created + 0.05, "JobSubmitted",
                                          f"Slurm job {job_id} submitted"))
            description: dict[str, Any] = {
                "name": f"pod:{namespace}/{name}", "nodes": "1", "cpus_per_task": 2,
                "extra": f"sunk-pod={namespace}/{name}"}
            if account:
                description["account"] = account
            if qos:
                description["qos"] = qos
            rec.job_description = description
            state = job_state or "PENDING"
            self.jobs[job_id] = Job(
                job_id=job_id, name=f"pod:{namespace}/{name}", state=state,
                extra=f"sunk-pod={namespace}/{name} uid={uid}", nodes=slurm_node,
                reason=pending_reason,
                raw=job_record(job_id, state, pending_reason, slurm_node, account=account,
                               qos=qos) if read else {})
        if rec.bound_at is not None:
            rec.history.append(Transition(rec.bound_at, "Scheduled", f"bound to {k8s_node}"))
        if rejected:
            rec.history.append(Transition(created + 0.01, rejected.split(":", 1)[0], rejected))
        self.state.keep(rec)
        self.pod_objects[rec.key] = {
            "metadata": {"name": name, "namespace": namespace, "uid": uid,
                         "labels": {"app": name.rsplit("-", 1)[0]},
                         "annotations": dict(annotations or {})},
            "spec": {"schedulerName": self.settings.scheduler_name, "nodeName": k8s_node}}
        return rec

    def add_gang(self, namespace: str, name: str, size: int | None, *, created: float,
                 members: Sequence[tuple[str, int, str, str]] = (), job_id: int | None = None,
                 job_state: str = "", waiting: str = "", problem: str = "", account: str = "",
                 qos: str = "") -> GangRecord:
        """A gang (``name`` as ``source:name``) with its members as ``(Pod name, rank, Slurm
        node, Kubernetes Node)``, in the order given (not necessarily by rank): each gets a Pod
        record too, and ``state.gang_of`` names the gang. With ``job_id``, the gang's one job,
        on its members' Slurm nodes, with Slurm's record of it (under ``account`` and ``qos``,
        if given)."""
        gang = GangRecord(namespace, name, size, job_id=job_id, job_state=job_state,
                          waiting=waiting, problem=problem)
        gang.history.append(Transition(created, "seen"))
        for pod, rank, slurm_node, k8s_node in members:
            running = bool(k8s_node) and job_state == "RUNNING"
            rec = self.add_pod(namespace, pod, created=created,
                               phase="Running" if running else "Pending",
                               slurm_node=slurm_node, k8s_node=k8s_node,
                               bound_after=2.0 if k8s_node else None,
                               rejected=problem, last_event=problem)
            rec.job_id, rec.job_state = job_id, job_state
            gang.members.append(GangMember(rec.key, rank, slurm_node, k8s_node, rec.phase))
            self.state.gang_of[rec.key] = gang.key
        if job_id is not None:
            gang.history.append(Transition(created + 0.1, "JobSubmitted",
                                           f"Slurm job {job_id} for {len(members)} nodes"))
            nodes = ",".join(sorted({m.slurm_node for m in gang.members if m.slurm_node}))
            state, reason = job_state or "PENDING", "" if nodes else "Resources"
            self.jobs[job_id] = Job(job_id=job_id, name=f"gang:{gang.key}", state=state,
                                    extra="", nodes=nodes, reason=reason,
                                    raw=job_record(job_id, state, reason, nodes,
                                                   account=account, qos=qos))
        if waiting:
            gang.history.append(Transition(created + 0.2, "waiting", waiting))
        self.state.gangs[gang.key] = gang
        return gang


def job_record(job_id: int, state: str, reason: str, nodes: str, *, account: str = "",
               qos: str = "") -> dict[str, Any]:
    """Slurm's record of a job as slurmrestd gives it (the fields a job keeps of it)."""
    raw: dict[str, Any] = {"job_id": job_id, "job_state": [state], "state_reason": reason,
                           "nodes": nodes}
    if account:
        raw["account"] = account
    if qos:
        raw["qos"] = qos
    return raw


#: The accounts and QOS of the sample's jobs, by namespace and by index.
SAMPLE_ACCOUNTS: dict[str, str] = {"research": "research", "inference": "serving",
                                   "training": "research", "batch-eval": "eval",
                                   "default": "general"}
SAMPLE_QOS = ("normal", "normal", "high", "low")


def sample(pods: int = 1000, nodes: int = 100, *, gangs: int = 0, seed: int = 1,
           now: float | None = None) -> StaticScheduler:
    """A healthy, busy cluster: ``nodes`` GPU nodes (a few drained, locked or down) and ``pods``
    Pods in every state, spread over a handful of namespaces; and ``gangs`` gangs of 2 to 8
    Pods more (running, waiting for Slurm, waiting for members, or rejected)."""
    rng = random.Random(seed)
    now = time.time() if now is None else now
    s = StaticScheduler()
    s.state.kube_healthy = s.state.slurm_healthy = True
    s.state.started = now - 7200
    s.trends = sample_trends(now, seed=seed)
    busy: list[tuple[str, str]] = []  # where the sample's bound Pods run
    for i in range(nodes):
        gres = "h100" if i % 2 == 0 else "a100"
        slurm_name, k8s_name = f"{gres}-{i:03d}", f"gpu-node-{i:03d}"
        used = rng.choice((0, 0, 2, 4, 8))
        if i % 17 == 5:
            s.add_node(slurm_name, k8s_name, state=("IDLE", "DRAIN"), gres_type=gres,
                       reason="k8s: node cordoned by maintenance-operator", cordoned=True)
        elif i % 23 == 7:
            s.add_node(slurm_name, k8s_name, state=("DOWN", "NOT_RESPONDING"), gres_type=gres,
                       reason="Not responding")
        elif used:
            busy.append((slurm_name, k8s_name))
            s.add_node(slurm_name, k8s_name, state=("ALLOCATED" if used == 8 else "MIXED",),
                       gres_type=gres, lock="locked_strict" if i % 3 else "locked",
                       taint=True, alloc_cpus=used * 4, alloc_memory_mib=used * 32768,
                       gpus_used=used)
        else:
            s.add_node(slurm_name, k8s_name, gres_type=gres)
    namespaces = ["research", "inference", "training", "batch-eval", "default"]
    job_id = 1000
    for i in range(pods):
        ns = namespaces[i % len(namespaces)]
        name = f"worker-{i:05d}"
        created = now - rng.uniform(5, 86400)
        kind = rng.random()
        slurm_name, k8s_name = busy[rng.randrange(len(busy))] if busy else ("", "")
        job_id += 1
        account, qos = SAMPLE_ACCOUNTS[ns], SAMPLE_QOS[i % len(SAMPLE_QOS)]
        if kind < 0.15:  # a fifth of them just submitted: Slurm's record not read yet
            s.add_pod(ns, name, created=created, job_id=job_id, job_state="PENDING",
                      pending_reason=rng.choice(("Resources", "Priority", "QOSMaxGRESPerUser")),
                      last_event=f"JobSubmitted: Slurm job {job_id} submitted",
                      account=account, qos=qos, read=kind >= 0.03)
        elif kind < 0.18:
            s.add_pod(ns, name, created=created,
                      rejected="InvalidAnnotation: annotation sunk.coreweave.com/timeout must "
                               "be a number of minutes from 1 to 4294967293, got \"soon\"",
                      last_event="InvalidAnnotation: annotation sunk.coreweave.com/timeout "
                                 "must be a number of minutes")
        elif kind < 0.22:
            s.add_pod(ns, name, created=created, phase="Pending", job_id=job_id,
                      job_state="RUNNING", slurm_node=slurm_name, k8s_node=k8s_name,
                      bound_after=rng.uniform(0.3, 5),
                      last_event=f"Scheduled: Successfully assigned {ns}/{name} to {k8s_name}",
                      account=account, qos=qos)
        elif kind < 0.95:
            s.add_pod(ns, name, created=created, phase="Running", job_id=job_id,
                      job_state="RUNNING", slurm_node=slurm_name, k8s_node=k8s_name,
                      bound_after=rng.uniform(0.3, 5),
                      last_event=f"Scheduled: Successfully assigned {ns}/{name} to {k8s_name}",
                      account=account, qos=qos)
        else:
            s.add_pod(ns, name, created=created, phase="Succeeded", job_id=job_id,
                      job_state="COMPLETED", slurm_node=slurm_name, k8s_node=k8s_name,
                      bound_after=rng.uniform(0.3, 5),
                      last_event="SlurmJobEnded: job completed; deleting the Pod",
                      account=account, qos=qos)
    sources = ("job", "label", "podgroup", "lws")
    for i in range(gangs):
        ns = namespaces[i % len(namespaces)]
        source = sources[i % len(sources)]
        name = f"{source}:train-{i}" if source != "lws" else f"lws:serve-{i}-0"
        size = rng.choice((2, 4, 8))
        ranks = list(range(size))
        job_id += 1
        account, qos = SAMPLE_ACCOUNTS[ns], SAMPLE_QOS[i % len(SAMPLE_QOS)]
        kind = i % 4
        if kind == 0 and len(busy) >= size:  # running
            placed = rng.sample(busy, size)
            s.add_gang(ns, name, size, created=now - rng.uniform(60, 7200), job_id=job_id,
                       job_state="RUNNING", account=account, qos=qos, members=[
                           (f"{name.split(':')[1]}-{r}", r, *placed[r]) for r in ranks])
        elif kind == 1:  # its job waits for nodes
            s.add_gang(ns, name, size, created=now - rng.uniform(5, 600), job_id=job_id,
                       job_state="PENDING", account=account, qos=qos,
                       waiting=f"job {job_id} pending (Resources): waiting for {size} nodes",
                       members=[(f"{name.split(':')[1]}-{r}", r, "", "") for r in ranks])
        elif kind == 2:  # not every member exists yet
            have = ranks[: size // 2]
            s.add_gang(ns, name, size, created=now - rng.uniform(5, 600),
                       waiting=f"{len(have)} of {size} members; nothing is submitted until "
                               "all exist",
                       members=[(f"{name.split(':')[1]}-{r}", r, "", "") for r in have])
        else:  # can never run
            s.add_gang(ns, name, None, created=now - rng.uniform(5, 600),
                       problem="members disagree on the gang's size: 2, 3",
                       waiting="members disagree on the gang's size: 2, 3",
                       members=[(f"{name.split(':')[1]}-{r}", r, "", "") for r in ranks[:2]])
    return s


def sample_trends(now: float, *, seed: int = 1, minutes: float = 60) -> TrendRecorder:
    """The last ``minutes`` of a busy scheduler, one point every 10 s: a few Pods bound per
    interval, latency around a second with a slowdown a third of the way in, and intervals in
    which nothing was bound (latency unknown)."""
    rng = random.Random(seed)
    recorder = TrendRecorder(reader=Reading)
    count = int(minutes * 60 / recorder.interval)
    for i in range(count):
        at = now - (count - 1 - i) * recorder.interval
        slow = 3.0 if count // 3 <= i < count // 3 + 12 else 1.0
        bound = 0 if i % 17 == 3 else rng.randint(2, 12)
        p50 = rng.uniform(0.6, 1.2) * slow
        latency = (Latency(bound, p50 * 1.1, p50, p50 * rng.uniform(2, 4)) if bound
                   else Latency())
        recorder.points.append(TrendPoint(at=at, seconds=recorder.interval, bound=bound,
                                          submitted=bound + rng.randint(0, 2),
                                          rejected=rng.choice((0, 0, 0, 1)),
                                          latency=latency, gang_latency=Latency()))
    return recorder


def broken_policies(generation: int = 3) -> StaticPolicies:
    """A policy store whose last reload failed (for previews and tests)."""
    error = PolicyLoadError([PolicyIssue("expression does not compile: found '<'",
                                         Origin("30-gpus.yaml", 1), "gpus-per-pod",
                                         "spec.validations[0].expression")])
    return StaticPolicies(generation=generation, error=error, error_at=time.time())


def main(argv: list[str] | None = None) -> None:
    """``python -m tests.unit.web.sample``: the dashboard on sample data, to work on its look."""
    parser = argparse.ArgumentParser(prog="python -m tests.unit.web.sample",
                                     description=main.__doc__)
    parser.add_argument("--bind", default="127.0.0.1:8099")
    parser.add_argument("--pods", type=int, default=60)
    parser.add_argument("--nodes", type=int, default=12)
    parser.add_argument("--gangs", type=int, default=6)
    parser.add_argument("--broken-policies", action="store_true")
    args = parser.parse_args(argv)
    scheduler = sample(args.pods, args.nodes, gangs=args.gangs)
    if args.broken_policies:
        scheduler.policies = broken_policies()
    print(f"sample dashboard on http://{args.bind}/", flush=True)
    asyncio.run(serve(create_app(scheduler), args.bind))


if __name__ == "__main__":
    main()
