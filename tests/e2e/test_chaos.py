"""A short chaos soak on the real bed (``python -m benchmarks.chaos`` runs the long one): Pods
created and deleted all the time while slurmctld, slurmrestd and kube-apiserver are killed at
random moments of a fixed seed; no invariant may fail for longer than its grace, and the bed
must settle after. And the soak's checker, on the same bed, seeing a violation made on purpose:
a checker that cannot fail proves nothing."""

from __future__ import annotations

import httpx

from benchmarks import chaos, invariants
from sunk.kube import Client
from testbed import cluster
from tests.e2e.conftest import RunningScheduler
from tests.e2e.helpers import call_api, create, pod_manifest, quiet


async def test_the_checker_sees_a_pod_bound_without_a_job_of_its_own(
        kube: Client, slurm: httpx.AsyncClient, namespace: str,
        scheduler: RunningScheduler, testbed: cluster.Testbed) -> None:
    """A Pod naming sunk but bound by hand (no job of Slurm's counts it): what a scheduler that
    lost track of a job would leave."""
    manifest = pod_manifest("by-hand", namespace, scheduler.name)
    manifest["spec"]["nodeName"] = "kwok-node-000"
    await create(kube, manifest)
    async with chaos.clients(testbed) as (kube_http, slurm_http):
        soak = chaos.Soak(testbed, scheduler, scheduler.name, kube_http, slurm_http,
                          namespace=namespace)
        seen = await soak.look()
    assert seen is not None
    found = invariants.violations(*seen)
    assert [(v.invariant, v.subject) for v in found] == [("bound-pod-has-one-job", "by-hand")]
    async with call_api(kube, "DELETE", namespace=namespace, url="pods/by-hand"):
        pass


async def test_a_short_soak_with_random_faults_breaks_no_invariant(
        slurm: httpx.AsyncClient, scheduler: RunningScheduler,
        testbed: cluster.Testbed) -> None:
    await quiet(slurm, testbed)
    with cluster.patient_prolog(testbed):
        report = await chaos.soak(testbed, scheduler, minutes=3, seed=11, slurmctld_crashes=2,
                                  parts=("slurmctld", "slurmrestd", "kube-apiserver"))
    assert report["scheduler"] is scheduler, "not a fault of this soak's"
    assert report["faults"] >= 3 and report["faults_by_part"].get("slurmctld", 0) >= 2
    assert report["pods_created"] >= 120
    assert report["violations"] == [], report["violations"]
    assert report["still_seen_at_end"] == [], report["still_seen_at_end"]
    assert report["settled"], "a job, a Pod or a lock taint was left"

