"""A soak on the test bed: a steady mix of work while parts of the bed fail at random moments,
with the invariants of :mod:`benchmarks.invariants` checked all the time.

    python -m benchmarks.chaos --minutes 12 --seed 7

The work (:mod:`benchmarks.chaoswork`): single Pods created and deleted, Pods claiming GPUs,
gangs of 2 to 8 from each source sunk reads (sunk's label, some heterogeneous; JobSet;
LeaderWorkerSet; Kubernetes' PodGroup; a batch Job asking for a gang; scheduler-plugins'
PodGroup), Pods deleted while sunk places them, plain sbatch jobs that lock their node, scancels
of the soak's placeholder jobs, Nodes cordoned and uncordoned, edits of the policy ConfigMap the
scheduler reads. The faults (:mod:`benchmarks.chaosfaults`), one at a time: SIGKILL of the
scheduler, slurmctld, slurmrestd, kube-apiserver, etcd, a slurmd or kwok, and SIGSTOP/SIGCONT
of the scheduler or slurmctld, short and long. ``--slurmctld-crashes`` of them at least are
slurmctld's SIGKILLs: a slurmctld that saved its state late comes back without its newest jobs
and gives their ids again. Looks at both sides, half a second apart, are checked; a violation
that lasts past its grace (time while a part is down not counted) is reported at once, with the
faults around it. Then the work stops, every Pod and owner of Pods is deleted, cordons lifted,
sbatch jobs cancelled, and the bed must settle: no job of the soak's, no lock, no taint, no drain
of sunk's.

The same seed gives the same work and the same faults, at the same moments after the start; what
Slurm and Kubernetes do in between is theirs. The report goes to
``benchmarks/results/chaos.json`` (``--json``) and a summary to standard output.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from benchmarks import bed, chaoslook, chaosreport, invariants, results
from benchmarks.chaosfaults import FAULTS, PER_MINUTE, Fault, Injector, plan_faults
from benchmarks.chaosobjects import policy_sets
from benchmarks.chaoswork import POLICY_CONFIGMAP, RATES, Work, Worker, plan_work
from testbed import cluster
from testbed.errors import TestbedError
from testbed.scheduler import RunningScheduler

NAME = "sunk-chaos"
NAMESPACE = "chaos"
#: What is added to the placeholder's KillWait before a job whose Pod is gone counts as left
#: behind.
KILL_WAIT_MARGIN = 30.0
#: Once the faults stop: how long the bed may take to have no job, no lock and no taint left.
SETTLE = 300.0
#: How soon a scheduler started again must be ready.
READY_WITHIN = 30.0
#: The long soak's scheduler reads its policies from a ConfigMap the work edits.
EXTRA = [f"--policies-configmap={NAMESPACE}/{POLICY_CONFIGMAP}"]


@dataclass
class Plan:
    """The seed's work and faults: when (seconds after the start) and what."""

    work: list[Work]
    faults: list[Fault]


def plan(seed: int, minutes: float, *, slurmctld_crashes: int,
         parts: tuple[str, ...] = FAULTS, nodes: int = 8,
         per_minute: float = PER_MINUTE, rates: dict[str, float] = RATES) -> Plan:
    """The work and the faults a seed gives (pure: the same seed, the same plan); faults only
    of the kinds in ``parts``, ``per_minute`` of them."""
    return Plan(plan_work(seed, minutes, nodes=nodes, rates=rates),
                plan_faults(seed, minutes, slurmctld_crashes=slurmctld_crashes, kinds=parts,
                            nodes=nodes, per_minute=per_minute))


@dataclass
class Soak:
    tb: cluster.Testbed
    kube: httpx.AsyncClient
    slurm: httpx.AsyncClient
    worker: Worker
    injector: Injector
    tracker: invariants.Tracker
    namespace: str = NAMESPACE
    started: float = field(default_factory=time.monotonic)
    looks: int = 0
    unreadable_looks: int = 0
    #: Every Pod of the soak's seen by a look (its uid): those the work made, and those its
    #: Jobs, JobSets and LeaderWorkerSets made.
    pods_seen: set[str] = field(default_factory=set)

    def now(self) -> float:
        return round(time.monotonic() - self.started, 1)

    async def check(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.look()
            await asyncio.sleep(0.5)

    async def look(self) -> None:
        """One look at both sides, its violations told to the tracker."""
        down = self.injector.down_now
        seen = await chaoslook.fetch(self.kube, self.slurm, self.namespace)
        down = down or self.injector.down_now
        self.looks += 1
        if seen is None:
            self.unreadable_looks += 1
            return
        self.pods_seen.update(p.uid for p in seen.pods)
        for entry in self.tracker.look(self.now(), invariants.check(seen), down=down):
            entry["faults_around"] = [f for f in self.injector.log
                                      if abs(f["at"] - float(str(entry["since"]))) < 60]
            print(f"[chaos] VIOLATION {entry}", flush=True)

    async def still_seen(self) -> list[dict[str, object]]:
        """The violations a last look, taken once the checker has stopped, still shows: the
        checker's own last look may be older than the one that found the bed settled."""
        await self.look()
        return self.tracker.lasting(self.now())

    async def settled(self) -> bool:
        look = await chaoslook.fetch(self.kube, self.slurm, self.namespace)
        if look is None:
            return False
        busy = [j for j in look.jobs if j.state in invariants.ACTIVE or j.completing]
        marked = [n for n in look.nodes if n.tainted or n.lock != "false" or (
            "DRAIN" in n.slurm_states and n.slurm_reason.startswith(("k8s:", "sunk:")))]
        return not look.pods and not busy and not marked

    async def drain(self) -> bool:
        """The work over: every Pod deleted, cordons lifted, sbatch jobs cancelled; whether the
        bed then settles within SETTLE seconds."""
        print(f"[chaos] {self.now():7.1f}s  work and faults done; deleting every Pod",
              flush=True)
        await self.worker.undo()
        await self.kube.request("DELETE", f"/api/v1/namespaces/{self.namespace}/pods")
        for _ in range(int(SETTLE / 2)):  # a look every 2 s, for SETTLE seconds at most
            if await self.settled():
                return True
            await asyncio.sleep(2)
        return False


async def make_namespace(kube: httpx.AsyncClient) -> None:
    """The soak's namespace (there already, from a soak before: kept)."""
    await kube.post("/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace",
                                                "metadata": {"name": NAMESPACE}})


async def make_policy_configmap(tb: cluster.Testbed) -> str:
    """The policy ConfigMap, with the default policies, before the scheduler that reads it
    starts; its ``namespace/name``."""
    async with bed.kube_client(tb) as kube:
        await make_namespace(kube)
        path = f"/api/v1/namespaces/{NAMESPACE}/configmaps"
        await kube.delete(f"{path}/{POLICY_CONFIGMAP}")
        r = await kube.post(path, json={"apiVersion": "v1", "kind": "ConfigMap",
                                        "metadata": {"name": POLICY_CONFIGMAP},
                                        "data": policy_sets()[0]})
        r.raise_for_status()
    return f"{NAMESPACE}/{POLICY_CONFIGMAP}"


@contextlib.asynccontextmanager
async def clients(tb: cluster.Testbed) -> AsyncIterator[tuple[httpx.AsyncClient,
                                                              httpx.AsyncClient]]:
    """The API server's and slurmrestd's clients a soak looks through."""
    async with bed.kube_client(tb) as kube, httpx.AsyncClient(
            base_url=tb.slurmrestd_url, headers=tb.slurm_headers(), timeout=30) as slurm:
        yield kube, slurm


async def soak(tb: cluster.Testbed, running: RunningScheduler, *, minutes: float, seed: int,
               slurmctld_crashes: int, parts: tuple[str, ...] = FAULTS,
               per_minute: float = PER_MINUTE, policy_configmap: str | None = None,
               extra: list[str] | None = None, two_replicas_at: float | None = None
               ) -> dict[str, Any]:
    """One soak with ``running`` (on the bed's hook port; restarted when a fault kills it,
    and stopped at the end); its report. ``policy_configmap``: the name of the ConfigMap of
    the soak's namespace the scheduler reads its policies from (made by
    :func:`make_policy_configmap`), if it does; the work edits it. ``extra``: the scheduler's
    flags beyond the bed's, for its restarts. ``two_replicas_at``: when (a share of the run)
    the scheduler becomes two replicas with leader election."""
    rates = RATES if policy_configmap else {k: v for k, v in RATES.items()
                                            if k != "policy-edit"}
    the_plan = plan(seed, minutes, slurmctld_crashes=slurmctld_crashes, parts=parts,
                    nodes=tb.node_count, per_minute=per_minute, rates=rates)
    async with clients(tb) as (kube, slurm):
        await make_namespace(kube)
        started = time.monotonic()
        worker = Worker(tb, kube, slurm, NAMESPACE, running.name, started=started,
                        policy_configmap=policy_configmap,
                        workload_version={"1.36": "v1alpha2"}.get(tb.kubernetes, "v1beta1"))
        await worker.prepare()
        the_soak = Soak(tb, kube, slurm, worker,
                        Injector(tb, running, running.name, started=started,
                                 extra=list(extra or [])),
                        invariants.Tracker(invariants.graces(tb.kill_wait, KILL_WAIT_MARGIN)),
                        started=started)
        stop = asyncio.Event()
        checker = asyncio.create_task(the_soak.check(stop))
        injector = the_soak.injector
        two = [] if two_replicas_at is None else [injector.two_replicas(two_replicas_at * 60 *
                                                                        minutes)]
        settled: bool | None = None
        try:
            await asyncio.gather(the_soak.worker.run(the_plan.work),
                                 injector.run(the_plan.faults), *two)
            settled = await the_soak.drain()
        finally:
            stop.set()
            await checker
            injector.resume_all()
            await injector.close()
            if settled is None and injector.replicas is not None:
                injector.replicas.stop()  # cut short: nothing of the soak's may run on
        lasting = await the_soak.still_seen()
    return figures(the_soak, seed=seed, minutes=minutes, settled=settled, lasting=lasting)


def figures(soak: Soak, *, seed: int, minutes: float, settled: bool,
            lasting: list[dict[str, object]]) -> dict[str, Any]:
    kinds: dict[str, int] = {}
    for fault in soak.injector.log:
        kinds[fault["kind"]] = kinds.get(fault["kind"], 0) + 1
    slow = [{"invariant": "scheduler-ready", "subject": "scheduler", "since": None,
             "lasted": s, "seen": f"ready {s} s after its restart"}
            for s in soak.injector.ready_after if s > READY_WITHIN]
    return {"seed": seed, "minutes": minutes, "pods_created": soak.worker.created,
            "pods_seen": len(soak.pods_seen),
            "pods_deleted_by_the_work": soak.worker.deleted, "work": soak.worker.done,
            "faults": len(soak.injector.log), "faults_by_kind": kinds,
            "fault_log": soak.injector.log, "looks": soak.looks,
            "unreadable_looks": soak.unreadable_looks,
            "scheduler_ready_after_restart_s": soak.injector.ready_after,
            "invariants": {k: v[0] for k, v in invariants.INVARIANTS.items()} | {
                "scheduler-ready": "the scheduler, killed, is started again by its supervisor "
                                   "and ready within 30 s"},
            "violations": soak.tracker.reported + slow, "still_seen_at_end": lasting,
            "two_replicas_from_s": soak.injector.replicas_at,
            "settled": settled, "scheduler": soak.injector.running()}


async def run(tb: cluster.Testbed, running: RunningScheduler, args: argparse.Namespace
              ) -> dict[str, Any]:
    found = await soak(tb, running, minutes=args.minutes, seed=args.seed,
                       slurmctld_crashes=args.slurmctld_crashes,
                       per_minute=args.faults_per_minute,
                       policy_configmap=POLICY_CONFIGMAP, extra=EXTRA,
                       two_replicas_at=args.two_replicas_at if args.two_replicas_at < 1 else None)
    found.pop("scheduler").stop()  # the one running now (a fault may have replaced it)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.chaos", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=12.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--slurmctld-crashes", type=int, default=5)
    parser.add_argument("--faults-per-minute", type=float, default=PER_MINUTE)
    parser.add_argument("--two-replicas-at", type=float, default=0.5,
                        help="when, as a share of the run, the scheduler becomes two replicas "
                        "with leader election (0.5; 1: never)")
    parser.add_argument("--nodes", type=int, default=8, help="test bed nodes (8)")
    parser.add_argument("--json", default=None, help="where the report goes "
                        "(default benchmarks/results/chaos.json)")
    args = parser.parse_args(argv)
    try:
        found = bed.on_bed(args.nodes, NAME, lambda tb, running: run(tb, running, args),
                           extra=EXTRA,
                           before=lambda tb: asyncio.run(make_policy_configmap(tb)))
    except TestbedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    record = results.record("chaos", figures=found, bed={"nodes": args.nodes},
                            argv=sys.argv[1:] if argv is None else argv)
    results.save(record, args.json)
    print(chaosreport.summary(found))
    bad = len(found["violations"]) + len(found["still_seen_at_end"])
    return 1 if bad or not found["settled"] else 0


if __name__ == "__main__":
    sys.exit(main())
