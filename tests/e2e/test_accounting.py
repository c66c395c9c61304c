"""Slurm accounting (slurmdbd on MariaDB, the bed's default): Slurm itself checks a Pod's
account and QOS, QOS preemption works both ways, and Slurm's records name the Pod."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from sunk.kube import Client
from testbed import cluster
from tests.e2e.conftest import RunningScheduler
from tests.e2e.helpers import (
    create,
    events_for,
    eventually,
    get_pod,
    job,
    pod_manifest,
    quiet,
    release,
    wait_bound,
)

PREFIX = "sunk.coreweave.com/"
JOB_ID = PREFIX + "job-id"
REJECTED = PREFIX + "rejected"
HOLD = "sunk.test/hold"


@pytest.fixture(autouse=True)
def _accounting(testbed: cluster.Testbed) -> None:
    if not testbed.accounting:
        pytest.skip("the test bed runs without accounting (up --no-accounting)")


async def reasons(kube: Client, namespace: str, name: str) -> list[tuple[str, str]]:
    return [(e["reason"], e["message"]) for e in await events_for(kube, namespace, name)]


@pytest.mark.parametrize(("annotation", "slurm_says"), [
    ("account", "Invalid account or account/partition combination specified"),
    ("qos", "Invalid qos specification"),
])
async def test_an_unknown_account_or_qos_is_refused_by_slurm_once_with_its_own_words(
        kube: Client, slurm: httpx.AsyncClient, namespace: str, scheduler: RunningScheduler,
        annotation: str, slurm_says: str) -> None:
    name = f"unknown-{annotation}"
    await create(kube, pod_manifest(name, namespace, scheduler.name,
                                    annotations={PREFIX + annotation: "nosuch"}))

    async def refused() -> list[str]:
        return [m for r, m in await reasons(kube, namespace, name) if r == "SlurmRefused"]

    [message] = await eventually(refused)
    assert slurm_says in message, message
    await asyncio.sleep(5)  # a retry loop would have submitted again (and told) by now
    seen = await reasons(kube, namespace, name)
    assert [r for r, _ in seen].count("SlurmRefused") == 1, seen
    assert "SubmitFailed" not in [r for r, _ in seen], seen
    pod = await get_pod(kube, namespace, name)
    assert pod is not None and not pod["spec"].get("nodeName")
    assert pod["metadata"]["annotations"][REJECTED] == "SlurmRefused"
    assert JOB_ID not in pod["metadata"]["annotations"]


async def test_a_known_account_and_qos_reach_sacct_the_event_and_the_dashboard(
        kube: Client, slurm: httpx.AsyncClient, namespace: str, scheduler: RunningScheduler,
        testbed: cluster.Testbed) -> None:
    """Accounting keeps a running job's QOS (without it Slurm forgets it at start), so an
    operator sees under what each Pod runs, and sacct accounts for Pods by namespace/name."""
    await create(kube, pod_manifest("accounted", namespace, scheduler.name, annotations={
        PREFIX + "account": "research", PREFIX + "qos": "low"}))
    pod = await wait_bound(kube, namespace, "accounted")
    job_id = pod["metadata"]["annotations"][JOB_ID]
    running = await job(slurm, job_id)
    assert (running["account"], running["qos"]) == ("research", "low")

    async def scheduled() -> list[str]:
        return [m for r, m in await reasons(kube, namespace, "accounted") if r == "Scheduled"]

    [message] = await eventually(scheduled)
    assert f"job {job_id}, account research, QOS low" in message, message
    async with httpx.AsyncClient(base_url=scheduler.url("dashboard")) as dashboard:
        shown = (await dashboard.get(f"/api/v1/pods/{namespace}/accounted")).json()["pod"]
    assert (shown["account"], shown["qos"]) == ("research", "low"), shown

    def sacct() -> list[list[str]]:
        out = testbed.slurm("sacct", "-n", "-X", "-P", "-j", job_id,
                            "-o", "JobID,JobName%80,Account,QOS")
        return [line.split("|") for line in out.splitlines() if line]

    async def recorded() -> list[list[str]]:  # slurmdbd is told asynchronously
        return await asyncio.to_thread(sacct)

    assert await eventually(recorded) == [
        [job_id, f"pod:{namespace}/accounted", "research", "low"]]


async def test_a_high_qos_slurm_job_preempts_a_low_qos_pod_and_waits_until_it_is_gone(
        kube: Client, slurm: httpx.AsyncClient, namespace: str, scheduler: RunningScheduler,
        testbed: cluster.Testbed) -> None:
    await quiet(slurm, testbed)
    names = [f"low-{i}" for i in range(testbed.node_count)]
    for name in names:  # whole nodes; the finalizer keeps the object after its deletion
        manifest = pod_manifest(name, namespace, scheduler.name, cpu="32",
                                annotations={PREFIX + "qos": "low"})
        manifest["metadata"]["finalizers"] = [HOLD]
        await create(kube, manifest)
    try:
        for name in names:
            await wait_bound(kube, namespace, name)
        urgent = testbed.slurm("sbatch", "--parsable", "--qos=high", "--exclusive",
                               "--chdir=/tmp", "--output=/dev/null", "--wrap=sleep 600").strip()
        try:
            async def deleting() -> list[str]:
                return [n for n in names if (p := await get_pod(kube, namespace, n))
                        and p["metadata"].get("deletionTimestamp")]

            [victim] = await eventually(deleting, within=30)
            for _ in range(10):  # the Pod still holds the node: the Slurm job must wait
                assert (await job(slurm, urgent))["job_state"] != ["RUNNING"]
                await asyncio.sleep(0.5)
            await release(kube, namespace, victim)

            async def urgent_runs() -> bool:
                return bool((await job(slurm, urgent))["job_state"] == ["RUNNING"])

            await eventually(urgent_runs, within=30)
            assert await get_pod(kube, namespace, victim) is None
            others = [n for n in names if n != victim]
            for name in others:  # only the one Pod made room
                pod = await get_pod(kube, namespace, name)
                assert pod is not None and not pod["metadata"].get("deletionTimestamp"), name
        finally:
            testbed.slurm("scancel", urgent)
    finally:
        for name in names:
            if await get_pod(kube, namespace, name) is not None:
                await release(kube, namespace, name)


async def test_a_high_qos_pod_preempts_low_qos_slurm_jobs(
        kube: Client, slurm: httpx.AsyncClient, namespace: str, scheduler: RunningScheduler,
        testbed: cluster.Testbed) -> None:
    await quiet(slurm, testbed)
    batch = [testbed.slurm("sbatch", "--parsable", "--qos=low", "--exclusive", "--chdir=/tmp",
                           "--output=/dev/null", "--wrap=sleep 600").strip()
             for _ in testbed.nodes]
    try:
        async def all_running() -> bool:
            states = [(await job(slurm, j))["job_state"] for j in batch]
            return all(state == ["RUNNING"] for state in states)

        await eventually(all_running)
        await create(kube, pod_manifest("urgent", namespace, scheduler.name, cpu="8",
                                        annotations={PREFIX + "qos": "high"}))
        pod = await wait_bound(kube, namespace, "urgent", within=60)
        states = [(await job(slurm, j))["job_state"][0] for j in batch]
        assert sum(s in ("PREEMPTED", "CANCELLED") for s in states) == 1, states
        assert (await job(slurm, pod["metadata"]["annotations"][JOB_ID]))["qos"] == "high"
    finally:
        testbed.slurm("scancel", *batch)
