"""A short chaos soak on the real bed (``python -m benchmarks.chaos`` runs the long one): the
soak's mix of work (single Pods, GPU Pods, gangs from each source, Pods deleted mid-bind, sbatch
jobs, scancels, cordons)
while parts of the bed fail at random moments of a fixed seed; no invariant may fail for longer
than its grace, and the bed must settle after. And the soak's checker, on the same bed, seeing
violations made on purpose, and catching a build of sunk broken on purpose: a checker that cannot
fail proves nothing."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx

from benchmarks import chaos, chaoslook, invariants
from benchmarks.chaosfaults import FAULTS
from benchmarks.chaosobjects import GANG_SOURCES
from sunk.kube import Client
from testbed import cluster
from testbed.scheduler import start_scheduler
from tests.e2e.conftest import RunningScheduler, hook_port_lent
from tests.e2e.helpers import call_api, create, eventually, job, pod_manifest, quiet

#: The CI soak's faults: all but the scheduler's SIGKILL (the session's scheduler must stay).
CI_FAULTS = tuple(kind for kind in FAULTS if kind != "kill scheduler")
#: On PYTHONPATH, it makes the scheduler a build that never takes a lock away.
NEVER_UNLOCKS = Path(__file__).parent / "broken"


async def test_the_checker_sees_a_pod_bound_without_a_job_of_its_own(
        kube: Client, slurm: httpx.AsyncClient, namespace: str,
        scheduler: RunningScheduler, testbed: cluster.Testbed) -> None:
    """A Pod naming sunk but bound by hand (no job of Slurm's counts it): what a scheduler that
    lost track of a job would leave; and one that names no scheduler that runs, waiting with
    nothing to say why."""
    manifest = pod_manifest("by-hand", namespace, scheduler.name)
    manifest["spec"]["nodeName"] = "kwok-node-000"
    await create(kube, manifest)
    await create(kube, pod_manifest("mute", namespace, "no-such-scheduler"))
    async with chaos.clients(testbed) as (kube_http, slurm_http):
        seen = await chaoslook.fetch(kube_http, slurm_http, namespace)
    assert seen is not None
    found = [(v.invariant, v.subject) for v in invariants.check(seen)
             if v.subject in ("by-hand", "mute")]  # the bed's own state is another test's
    assert sorted(found) == [
        ("bound-pod-has-one-job", "by-hand"), ("no-pod-waits-unexplained", "mute")]
    assert {n.name for n in seen.nodes} >= {"kwok-node-000"}
    assert all(n.cpu_m > 0 and n.slurm_name for n in seen.nodes), "the Nodes' side is read"
    for name in ("by-hand", "mute"):
        async with call_api(kube, "DELETE", namespace=namespace, url=f"pods/{name}"):
            pass


async def test_a_short_soak_with_random_faults_breaks_no_invariant(
        slurm: httpx.AsyncClient, scheduler: RunningScheduler,
        testbed: cluster.Testbed) -> None:
    await quiet(slurm, testbed)
    with cluster.patient_prolog(testbed):
        report = await chaos.soak(testbed, scheduler, minutes=3, seed=12, slurmctld_crashes=1,
                                  parts=CI_FAULTS, per_minute=2.5)
    assert report["scheduler"] is scheduler, "not a fault of this soak's"
    assert report["faults"] >= 6 and report["faults_by_kind"].get("kill slurmctld", 0) >= 1
    assert report["pods_created"] >= 120 and report["work"].get("gang", 0) >= 2
    assert report["work"].get("gpu-pod", 0) >= 5, report["work"]
    assert len(set(report["work"]) & set(GANG_SOURCES)) >= 3, report["work"]
    assert report["violations"] == [], report["violations"]
    assert report["still_seen_at_end"] == [], report["still_seen_at_end"]
    assert report["settled"], "a job, a Pod or a lock taint was left"


async def test_the_checker_catches_a_build_that_never_unlocks_and_the_real_one_puts_it_right(
        slurm: httpx.AsyncClient, scheduler: RunningScheduler,
        testbed: cluster.Testbed) -> None:
    """A plain Slurm job locks its node through the prolog; the broken build never unlocks it.
    The checker, looking as the soak does with the soak's graces, reports the lock left once it
    outlasts its grace; the real build, back on the hook port, then takes it away."""
    await quiet(slurm, testbed)
    node = testbed.nodes[1]
    tracker = invariants.Tracker(invariants.graces(testbed.kill_wait, chaos.KILL_WAIT_MARGIN))
    subject = f"node {node.k8s_name}"
    with hook_port_lent(scheduler, testbed):
        broken = start_scheduler(testbed, name="sunk-never-unlocks",
                                 hooks_port=testbed.ports["hooks"],
                                 env={"PYTHONPATH": str(NEVER_UNLOCKS)})
        try:
            job_id = testbed.slurm("sbatch", "--parsable", f"--nodelist={node.slurm_name}",
                                   "--chdir=/tmp", "--output=/dev/null", "--wrap=sleep 1").strip()
            await eventually(lambda: ended(slurm, job_id), within=60)
            started, reported = time.monotonic(), list[dict[str, object]]()
            async with chaos.clients(testbed) as (kube_http, slurm_http):
                while not reported and time.monotonic() - started < 120:
                    seen = await chaoslook.fetch(kube_http, slurm_http, "default")
                    if seen is not None:
                        reported = [v for v in tracker.look(time.monotonic() - started,
                                                            invariants.check(seen))
                                    if v["subject"] == subject]
                    await asyncio.sleep(1)
        finally:
            broken.stop()
    assert [v["invariant"] for v in reported] == ["no-lock-nothing-needs"], tracker.reported
    assert "runs nothing" in str(reported[0]["seen"])
    async with chaos.clients(testbed) as (kube_http, slurm_http):
        async def unlocked() -> bool:
            seen = await chaoslook.fetch(kube_http, slurm_http, "default")
            return seen is not None and not [v for v in invariants.check(seen)
                                             if v.subject == subject]

        await eventually(unlocked, within=60)


async def ended(slurm: httpx.AsyncClient, job_id: str) -> bool:
    return bool((await job(slurm, job_id))["job_state"] == ["COMPLETED"])
