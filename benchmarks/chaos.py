"""A soak on the test bed: steady ordinary work while parts of the bed are killed at random
moments, with the invariants of :mod:`benchmarks.invariants` checked all the time.

    python -m benchmarks.chaos --minutes 12 --seed 7

The work: a Pod created about every second (1 to 8 CPUs), each deleted again after a random
while (5 to 90 s). The faults, one at a time, at random moments: SIGKILL of slurmctld,
slurmrestd, kube-apiserver or the scheduler, started again 2 to 30 s later (the scheduler at
once, as its supervisor would, and checked ready within 30 s). ``--slurmctld-crashes`` of them
at least are slurmctld's: a slurmctld that saved its state late comes back without its newest
jobs and gives their ids again. Twice a second a look at both sides is checked; a violation that
lasts past its grace is reported at once, with the faults around it. Then the work stops, every
Pod is deleted, and the bed must settle: no job of the soak's Pods, no lock taint.

The same seed gives the same work and the same faults, at the same moments after the start; what
Slurm and Kubernetes do in between is theirs. The report goes to
``benchmarks/results/chaos.json`` (``--json``) and a summary to standard output.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import signal
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from benchmarks import bed, invariants, results
from benchmarks import report as report_module
from benchmarks.invariants import JobLook, PodLook
from sunk.plans.placement import LOCK_TAINT
from testbed import cluster
from testbed.errors import TestbedError
from testbed.scheduler import RunningScheduler, start_scheduler

NAME = "sunk-chaos"
NAMESPACE = "chaos"
FAULTS = ("slurmctld", "slurmrestd", "kube-apiserver", "scheduler")
#: The placeholder's KillWait on the bed, and what is added to it before a job whose Pod is
#: gone counts as left behind.
KILL_WAIT_MARGIN = 30.0
#: Once the faults stop: how long the bed may take to have no job, no lock and no taint left.
SETTLE = 300.0


@dataclass
class Plan:
    """The seed's work and faults: when (seconds after the start) and what."""

    creates: list[tuple[float, str, int, float]]  # (at, name, cpus, lifetime)
    faults: list[tuple[float, str, float]]  # (at, part, down for)


def plan(seed: int, minutes: float, *, slurmctld_crashes: int,
         parts: tuple[str, ...] = FAULTS) -> Plan:
    """The work and the faults a seed gives (pure: the same seed, the same plan); faults only
    of ``parts``."""
    rng = random.Random(seed)
    length = minutes * 60
    creates, at, n = [], 0.0, 0
    while at < length:
        creates.append((round(at, 2), f"p{n:05d}", rng.choice((1, 2, 4, 8)),
                        round(rng.uniform(5, 90), 1)))
        at += rng.expovariate(1.0)
        n += 1
    count = max(slurmctld_crashes, round(length / 55))
    killed = [*(["slurmctld"] * slurmctld_crashes),
              *(rng.choice(parts) for _ in range(count - slurmctld_crashes))]
    rng.shuffle(killed)
    gap = length / (len(killed) + 1)
    faults = [(round(gap * (i + 1) + rng.uniform(-gap / 3, gap / 3), 1), part,
               round(rng.uniform(2, 30), 1)) for i, part in enumerate(killed)]
    return Plan(creates, faults)


@dataclass
class Soak:
    tb: cluster.Testbed
    scheduler: RunningScheduler
    name: str
    kube: httpx.AsyncClient
    slurm: httpx.AsyncClient
    namespace: str = NAMESPACE
    started: float = field(default_factory=time.monotonic)
    created: int = 0
    deleted: int = 0
    faults: list[dict[str, Any]] = field(default_factory=list)
    looks: int = 0
    unreadable_looks: int = 0
    scheduler_ready_after: list[float] = field(default_factory=list)

    def now(self) -> float:
        return round(time.monotonic() - self.started, 1)

    # -- the work ------------------------------------------------------------------------------
    async def work(self, creates: list[tuple[float, str, int, float]]) -> None:
        async with asyncio.TaskGroup() as group:
            for at, name, cpus, lifetime in creates:
                await asyncio.sleep(max(0.0, at - (time.monotonic() - self.started)))
                if await self._create(name, cpus):
                    group.create_task(self._delete_after(name, lifetime))

    async def _create(self, name: str, cpus: int) -> bool:
        manifest = {"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": name, "namespace": self.namespace},
                    "spec": {"schedulerName": self.name, "terminationGracePeriodSeconds": 1,
                             "containers": [{"name": "c", "image": "busybox", "resources": {
                                 "requests": {"cpu": str(cpus), "memory": "1Gi"}}}]}}
        try:
            r = await self.kube.post(f"/api/v1/namespaces/{self.namespace}/pods",
                                     json=manifest)
        except httpx.HTTPError:
            return False  # the API server is down: this Pod is not made (the work goes on)
        self.created += r.status_code == 201
        return r.status_code == 201

    async def _delete_after(self, name: str, lifetime: float) -> None:
        await asyncio.sleep(lifetime)
        while True:
            try:
                r = await self.kube.delete(f"/api/v1/namespaces/{self.namespace}/pods/{name}")
                self.deleted += r.status_code == 200
                return
            except httpx.HTTPError:
                await asyncio.sleep(2)  # the API server is down: delete it once it is back

    # -- the faults ----------------------------------------------------------------------------
    async def inject(self, faults: list[tuple[float, str, float]]) -> None:
        for at, part, down in faults:
            await asyncio.sleep(max(0.0, at - (time.monotonic() - self.started)))
            began = self.now()
            print(f"[chaos] {began:7.1f}s  SIGKILL {part}, back in {down:.0f}s", flush=True)
            if part == "scheduler":
                self.scheduler.stop(signal.SIGKILL)
                await asyncio.to_thread(self._restart_scheduler)
            else:
                await asyncio.to_thread(cluster.kill_part, self.tb, part, signal.SIGKILL)
                await asyncio.sleep(down)
                await asyncio.to_thread(cluster.start_part, self.tb, part)
            self.faults.append({"part": part, "at": began, "back_at": self.now()})

    def _restart_scheduler(self) -> None:
        """As a supervisor would: at once, and it must be ready within 30 s."""
        restarted = time.monotonic()
        self.scheduler = start_scheduler(self.tb, name=self.name,
                                         hooks_port=self.tb.ports["hooks"], log_name=self.name)
        self.scheduler_ready_after.append(round(time.monotonic() - restarted, 1))

    # -- the checker ---------------------------------------------------------------------------
    async def look(self) -> tuple[list[PodLook], list[JobLook], dict[str, str]] | None:
        """Both sides, as they are now (None: one of them did not answer)."""
        try:
            pods_r, jobs_r, slurmd_r = await asyncio.gather(
                self.kube.get(f"/api/v1/namespaces/{self.namespace}/pods"),
                self.slurm.get("/slurm/v0.0.42/jobs/"),
                self.kube.get("/api/v1/namespaces/slurm/pods"))
            if not (pods_r.is_success and jobs_r.is_success and slurmd_r.is_success):
                return None
            jobs_body = jobs_r.json()
        except (httpx.HTTPError, ValueError):
            return None
        if jobs_body.get("errors"):
            return None
        pods = [PodLook(p["metadata"]["name"], p["metadata"]["uid"],
                        p["spec"].get("nodeName") or "",
                        bool(p["metadata"].get("deletionTimestamp")))
                for p in pods_r.json()["items"]]
        jobs = [JobLook(int(j["job_id"]), j["job_state"][0], _uid(j.get("extra") or ""),
                        str(j.get("nodes") or ""), "COMPLETING" in j["job_state"])
                for j in jobs_body.get("jobs") or [] if j.get("name", "").startswith(
                    f"pod:{self.namespace}/")]
        host_of = {p["spec"].get("hostname", ""): p["spec"].get("nodeName", "")
                   for p in slurmd_r.json()["items"]}
        return pods, jobs, host_of

    async def check(self, tracker: invariants.Tracker, stop: asyncio.Event) -> None:
        while not stop.is_set():
            seen = await self.look()
            self.looks += 1
            if seen is None:
                self.unreadable_looks += 1
            else:
                for entry in tracker.look(self.now(), invariants.violations(*seen)):
                    entry["faults_around"] = [f for f in self.faults
                                              if abs(f["at"] - float(str(entry["since"]))) < 60]
                    print(f"[chaos] VIOLATION {entry}", flush=True)
            await asyncio.sleep(0.5)

    async def settled(self) -> bool:
        seen = await self.look()
        if seen is None:
            return False
        pods, jobs, _ = seen
        nodes = (await self.kube.get("/api/v1/nodes")).json()["items"]
        tainted = [n["metadata"]["name"] for n in nodes
                   if any(t.get("key") == LOCK_TAINT
                          for t in (n.get("spec") or {}).get("taints") or [])]
        busy = [j for j in jobs if j.state in invariants.ACTIVE or j.completing]
        return not pods and not busy and not tainted


@contextlib.asynccontextmanager
async def clients(tb: cluster.Testbed) -> AsyncIterator[tuple[httpx.AsyncClient,
                                                              httpx.AsyncClient]]:
    """The API server's and slurmrestd's clients a soak looks through."""
    async with bed.kube_client(tb) as kube, httpx.AsyncClient(
            base_url=tb.slurmrestd_url, headers=tb.slurm_headers(), timeout=30) as slurm:
        yield kube, slurm


def _uid(extra: str) -> str:
    for part in extra.split():
        if part.startswith("uid="):
            return part[4:]
    return ""


async def soak(tb: cluster.Testbed, running: RunningScheduler, *, minutes: float, seed: int,
               slurmctld_crashes: int, parts: tuple[str, ...] = FAULTS) -> dict[str, Any]:
    """One soak with ``running`` (on the bed's hook port; restarted when a fault kills it,
    and stopped at the end); its report."""
    the_plan = plan(seed, minutes, slurmctld_crashes=slurmctld_crashes, parts=parts)
    async with clients(tb) as (kube, slurm):
        await kube.post("/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace",
                                                    "metadata": {"name": NAMESPACE}})
        soak = Soak(tb, running, running.name, kube, slurm)
        tracker = invariants.Tracker({"bound-pod-has-one-job":
                                      invariants.INVARIANTS["bound-pod-has-one-job"][1],
                                      "no-job-without-pod": tb.kill_wait + KILL_WAIT_MARGIN})
        stop = asyncio.Event()
        checker = asyncio.create_task(soak.check(tracker, stop))
        try:
            await asyncio.gather(soak.work(the_plan.creates), soak.inject(the_plan.faults))
            print(f"[chaos] {soak.now():7.1f}s  work and faults done; deleting every Pod",
                  flush=True)
            await kube.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods")
            settled = False
            for _ in range(int(SETTLE / 2)):  # a look every 2 s, for SETTLE seconds at most
                if settled := await soak.settled():
                    break
                await asyncio.sleep(2)
        finally:
            stop.set()
            await checker
        lasting = tracker.lasting(soak.now())
    kinds: dict[str, int] = {}
    for fault in soak.faults:
        kinds[fault["part"]] = kinds.get(fault["part"], 0) + 1
    return {"seed": seed, "minutes": minutes, "pods_created": soak.created,
            "pods_deleted_by_the_work": soak.deleted, "faults": len(soak.faults),
            "faults_by_part": kinds, "fault_log": soak.faults, "looks": soak.looks,
            "unreadable_looks": soak.unreadable_looks,
            "scheduler_ready_after_restart_s": soak.scheduler_ready_after,
            "invariants": {k: v[0] for k, v in invariants.INVARIANTS.items()},
            "violations": tracker.reported, "still_seen_at_end": lasting,
            "settled": settled, "scheduler": soak.scheduler}


async def run(tb: cluster.Testbed, running: RunningScheduler, args: argparse.Namespace
              ) -> dict[str, Any]:
    figures = await soak(tb, running, minutes=args.minutes, seed=args.seed,
                         slurmctld_crashes=args.slurmctld_crashes)
    figures.pop("scheduler").stop()  # the one running now (a fault may have replaced it)
    return figures


def render(rec: results.Record) -> str:
    """The soak's record for docs/benchmarks.md: the work, the faults, each invariant and
    what broke it."""
    f = rec["figures"]
    parts = ", ".join(f"{part} {n}" for part, n in sorted(f["faults_by_part"].items()))
    restarts = f["scheduler_ready_after_restart_s"]
    lines = [
        f"- {f['minutes']:g} minutes, seed {f['seed']}: {f['pods_created']} Pods created, "
        f"{f['faults']} faults ({parts})",
        f"- {f['looks']} looks at both sides ({f['unreadable_looks']} while a part was "
        "down and did not answer)",
    ]
    if restarts:
        lines.append(f"- scheduler ready after its restarts: {', '.join(map(str, restarts))} s")
    lines.append(f"- settled afterwards (no Pod, no job, no lock taint left): "
                 f"{'yes' if f['settled'] else 'no'}")
    lines += ["", "| invariant | violations |", "|---|---|"]
    for name, words in f["invariants"].items():
        broken = [v for v in f["violations"] + f["still_seen_at_end"]
                  if v["invariant"] == name]
        lines.append(f"| {words} | {len(broken) or 'none'} |")
    for v in f["violations"] + f["still_seen_at_end"]:
        lines.append(f"\n- at {v['since']} s, for {v['lasted']} s: {v['subject']}: {v['seen']}")
    return "\n".join(lines)


report_module.register("chaos", render)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.chaos", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=12.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--slurmctld-crashes", type=int, default=5)
    parser.add_argument("--nodes", type=int, default=8, help="test bed nodes (8)")
    parser.add_argument("--json", default=None, help="where the report goes "
                        "(default benchmarks/results/chaos.json)")
    args = parser.parse_args(argv)
    try:
        figures = bed.on_bed(args.nodes, NAME, lambda tb, running: run(tb, running, args))
    except TestbedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    record = results.record("chaos", figures=figures, bed={"nodes": args.nodes},
                            argv=sys.argv[1:] if argv is None else argv)
    results.save(record, args.json)
    bad = len(figures["violations"]) + len(figures["still_seen_at_end"])
    print(f"[chaos] {figures['pods_created']} Pods, {figures['faults']} faults "
          f"{figures['faults_by_part']}, {figures['looks']} looks "
          f"({figures['unreadable_looks']} while a part was down); violations: "
          f"{len(figures['violations'])}, still seen at the end: "
          f"{len(figures['still_seen_at_end'])}; settled: {figures['settled']}")
    return 1 if bad or not figures["settled"] else 0


if __name__ == "__main__":
    sys.exit(main())
