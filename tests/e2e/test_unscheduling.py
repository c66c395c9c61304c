"""Pod and job end together, from either side, and Slurm never reuses a node a Pod still holds."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from sunk.kube import Client
from testbed import cluster
from tests.e2e.conftest import RunningScheduler
from tests.e2e.helpers import (
    call_api,
    create,
    eventually,
    get_pod,
    job,
    pod_manifest,
    quiet,
    release,
    wait_bound,
)

JOB_ID = "sunk.coreweave.com/job-id"
HOLD = "sunk.test/hold"


async def node_state(slurm: httpx.AsyncClient, node: str) -> list[str]:
    r = await slurm.get(f"/slurm/v0.0.42/node/{node}")
    state: list[str] = r.json()["nodes"][0]["state"]
    return state


async def delete(kube: Client, namespace: str, name: str) -> None:
    async with call_api(kube, "DELETE", namespace=namespace, url=f"pods/{name}"):
        pass


async def held_pod(kube: Client, slurm: httpx.AsyncClient, namespace: str,
                   scheduler: RunningScheduler, name: str) -> tuple[str, str]:
    """A whole-node Pod whose object outlives its deletion (our finalizer), once bound: its
    job id and Slurm node."""
    manifest = pod_manifest(name, namespace, scheduler.name, cpu="32")
    manifest["metadata"]["finalizers"] = [HOLD]
    await create(kube, manifest)
    pod = await wait_bound(kube, namespace, name)
    job_id = pod["metadata"]["annotations"][JOB_ID]
    return job_id, str((await job(slurm, job_id))["nodes"])


async def gone(kube: Client, namespace: str, name: str) -> bool:
    return await get_pod(kube, namespace, name) is None


async def release_then_the_next_job_runs(kube: Client, slurm: httpx.AsyncClient,
                                         namespace: str, name: str, waiting: str) -> None:
    """Let the held Pod's object go: the job waiting for its node then runs, within seconds."""
    await release(kube, namespace, name)

    async def next_job_runs() -> bool:
        return bool((await job(slurm, waiting))["job_state"] == ["RUNNING"])

    await eventually(next_job_runs, within=15)
    assert await get_pod(kube, namespace, name) is None


async def test_deleting_a_running_pod_ends_its_job_and_frees_the_node_only_once_it_is_gone(
        kube: Client, slurm: httpx.AsyncClient, namespace: str,
        scheduler: RunningScheduler, testbed: cluster.Testbed) -> None:
    job_id, node = await held_pod(kube, slurm, namespace, scheduler, "held")
    await delete(kube, namespace, "held")

    async def cancelled() -> bool:
        return "CANCELLED" in (await job(slurm, job_id))["job_state"]

    await eventually(cancelled)
    # A Slurm job that wants exactly that node must wait while the Pod object exists.
    waiting = testbed.slurm("sbatch", "--parsable", f"--nodelist={node}", "--exclusive",
                            "--chdir=/tmp", "--output=/dev/null", "--wrap=sleep 300").strip()
    try:
        await asyncio.sleep(3)
        assert await get_pod(kube, namespace, "held") is not None
        assert "COMPLETING" in (await job(slurm, job_id))["job_state"]
        assert "COMPLETING" in await node_state(slurm, node)
        assert (await job(slurm, waiting))["job_state"] == ["PENDING"]
        await release_then_the_next_job_runs(kube, slurm, namespace, "held", waiting)
    finally:
        testbed.slurm("scancel", waiting)


async def _started_job(slurm: httpx.AsyncClient, namespace: str, name: str,
                       newer_than: int) -> tuple[str, str]:
    """The Pod's job id and node, as soon as its placeholder script has written ``: started``
    (read from Slurm as fast as slurmrestd answers: the Pod is bound about then)."""
    async with asyncio.timeout(60):
        job_id = None
        while job_id is None:
            listed = (await slurm.get("/slurm/v0.0.42/jobs/state/")).json()["jobs"]
            for listed_id in sorted(int(j["job_id"]) for j in listed):
                if listed_id > newer_than and (await job(slurm, listed_id))["name"] == (
                        f"pod:{namespace}/{name}"):
                    job_id = str(listed_id)
                    break
        while True:
            found = await job(slurm, job_id)
            if found["job_state"][0] == "RUNNING" and ": started" in (found.get("extra") or ""):
                return job_id, str(found["nodes"])


async def _newest_job(slurm: httpx.AsyncClient) -> int:
    listed = (await slurm.get("/slurm/v0.0.42/jobs/state/")).json()["jobs"]
    return max((int(j["job_id"]) for j in listed), default=0)


@pytest.mark.parametrize("after_ms", [0, 10, 50, 100, 500])
@pytest.mark.parametrize("ended_by", ["pod-deleted", "scancel"])
async def test_a_job_ended_right_after_it_started_holds_its_node_while_its_pod_exists(
        kube: Client, slurm: httpx.AsyncClient, namespace: str,
        scheduler: RunningScheduler, testbed: cluster.Testbed, after_ms: int,
        ended_by: str) -> None:
    """The job ends ``after_ms`` after its script said it started (its Pod bound, or about to
    be, its started hook maybe still in flight): while the Pod object exists (held by a
    finalizer), the job stays COMPLETING and Slurm gives its node to nobody else."""
    await quiet(slurm, testbed)
    newest = await _newest_job(slurm)
    manifest = pod_manifest("early", namespace, scheduler.name, cpu="32")
    manifest["metadata"]["finalizers"] = [HOLD]
    await create(kube, manifest)
    job_id, node = await _started_job(slurm, namespace, "early", newest)
    await asyncio.sleep(after_ms / 1000)
    if ended_by == "scancel":
        await slurm.delete(f"/slurm/v0.0.42/job/{job_id}")
    else:
        await delete(kube, namespace, "early")

    async def cancelled() -> bool:
        return "CANCELLED" in (await job(slurm, job_id))["job_state"]

    await eventually(cancelled, within=15)
    waiting = testbed.slurm("sbatch", "--parsable", f"--nodelist={node}", "--exclusive",
                            "--chdir=/tmp", "--output=/dev/null", "--wrap=sleep 300").strip()
    try:
        held_until = time.monotonic() + 2
        while time.monotonic() < held_until:  # not one look: the job must not end meanwhile
            assert await get_pod(kube, namespace, "early") is not None
            state = (await job(slurm, job_id))["job_state"]
            assert "COMPLETING" in state, f"job {job_id} let go of {node} while its Pod exists"
            assert (await job(slurm, waiting))["job_state"] == ["PENDING"]
            await asyncio.sleep(0.25)
        await release_then_the_next_job_runs(kube, slurm, namespace, "early", waiting)
    finally:
        testbed.slurm("scancel", waiting)
        if await get_pod(kube, namespace, "early") is not None:  # a failed assertion's
            await release(kube, namespace, "early")


@pytest.mark.parametrize("user", [None, "1001"], ids=["as-root", "as-a-pod-user"])
async def test_scancel_deletes_the_pod_quickly_and_the_job_ends_before_kill_wait(
        kube: Client, slurm: httpx.AsyncClient, namespace: str,
        scheduler: RunningScheduler, testbed: cluster.Testbed, user: str | None) -> None:
    """Also as the Slurm user a Pod names: its placeholder job must reach the hook API too."""
    await quiet(slurm, testbed)
    grace = 2
    annotations = {"sunk.coreweave.com/user-id": user} if user else {}
    await create(kube, pod_manifest("victim", namespace, scheduler.name, cpu="32", grace=grace,
                                    annotations=annotations))
    pod = await wait_bound(kube, namespace, "victim")
    job_id = pod["metadata"]["annotations"][JOB_ID]
    node = (await job(slurm, job_id))["nodes"]
    started = time.monotonic()
    testbed.slurm("scancel", job_id)
    await eventually(lambda: gone(kube, namespace, "victim"), within=10)
    pod_gone_after = time.monotonic() - started

    async def node_free() -> bool:
        return await node_state(slurm, node) == ["IDLE"]

    await eventually(node_free, within=testbed.kill_wait)
    freed_after = time.monotonic() - started
    assert pod_gone_after < grace + 3, "deleted at once, honouring its grace period"
    assert freed_after < testbed.kill_wait / 2, "the job must end by the handshake, not KillWait"


async def test_a_pod_whose_deletion_hangs_drains_the_node_before_kill_wait(
        kube: Client, slurm: httpx.AsyncClient, namespace: str,
        scheduler: RunningScheduler, testbed: cluster.Testbed) -> None:
    job_id, node = await held_pod(kube, slurm, namespace, scheduler, "stuck")
    try:
        started = time.monotonic()
        testbed.slurm("scancel", job_id)

        async def drained() -> dict[str, Any] | None:
            r = await slurm.get(f"/slurm/v0.0.42/node/{node}")
            info: dict[str, Any] = r.json()["nodes"][0]
            return info if "DRAIN" in info["state"] else None

        info = await eventually(drained, within=testbed.kill_wait + 5)
        drained_after = time.monotonic() - started
        assert drained_after < testbed.kill_wait
        assert f"{namespace}/stuck" in info["reason"]

        async def killed() -> bool:
            return "COMPLETING" not in (await job(slurm, job_id))["job_state"]

        await eventually(killed, within=testbed.kill_wait + 30)
        assert time.monotonic() - started >= testbed.kill_wait - 1
    finally:
        await release(kube, namespace, "stuck")
        testbed.slurm("scontrol", "update", f"nodename={node}", "state=resume")


async def test_deleting_a_pod_whose_job_is_pending_cancels_the_job(
        kube: Client, slurm: httpx.AsyncClient, namespace: str,
        scheduler: RunningScheduler, testbed: cluster.Testbed) -> None:
    node = testbed.nodes[0].slurm_name
    busy = testbed.slurm("sbatch", "--parsable", f"--nodelist={node}", "--exclusive",
                         "--chdir=/tmp", "--output=/dev/null", "--wrap=sleep 300").strip()
    try:
        await _delete_while_pending(kube, slurm, namespace, scheduler, node)
    finally:
        testbed.slurm("scancel", busy)


async def _delete_while_pending(kube: Client, slurm: httpx.AsyncClient,
                                namespace: str, scheduler: RunningScheduler, node: str) -> None:
    # The only node the Pod may have is busy: its job stays pending.
    await create(kube, pod_manifest("waits", namespace, scheduler.name, annotations={
        "sunk.coreweave.com/required-nodes": node}))

    async def submitted() -> str | None:
        pod = await get_pod(kube, namespace, "waits")
        annotations: dict[str, str] = (pod or {}).get("metadata", {}).get("annotations", {})
        return annotations.get(JOB_ID)

    job_id = await eventually(submitted)
    assert (await job(slurm, job_id))["job_state"] == ["PENDING"]
    await delete(kube, namespace, "waits")

    async def cancelled() -> bool:
        return bool((await job(slurm, job_id))["job_state"] == ["CANCELLED"])

    await eventually(cancelled, within=10)
    jobs = (await slurm.get("/slurm/v0.0.42/jobs/")).json()["jobs"]
    alive = [j["job_id"] for j in jobs if j["name"] == f"pod:{namespace}/waits"
             and j["job_state"][0] not in ("CANCELLED", "COMPLETED")]
    assert alive == []


async def test_a_high_priority_pod_preempts_slurm_batch_jobs_on_a_full_cluster(
        kube: Client, slurm: httpx.AsyncClient, namespace: str,
        scheduler: RunningScheduler, testbed: cluster.Testbed) -> None:
    await quiet(slurm, testbed)
    batch = []
    for _ in testbed.nodes:
        out = testbed.slurm("sbatch", "--parsable", "--partition=batch", "--exclusive",
                            "--chdir=/tmp", "--output=/dev/null", "--wrap=sleep 600")
        batch.append(out.strip())
    try:
        async def all_running() -> bool:
            states = [(await job(slurm, j))["job_state"] for j in batch]
            return all(state == ["RUNNING"] for state in states)

        await eventually(all_running)
        await create(kube, pod_manifest(
            "urgent", namespace, scheduler.name, cpu="8",
            annotations={"sunk.coreweave.com/partition": "high"}))
        pod = await wait_bound(kube, namespace, "urgent", within=60)
        states = [(await job(slurm, j))["job_state"][0] for j in batch]
        assert "PREEMPTED" in states or "CANCELLED" in states, states
        assert pod["spec"]["nodeName"]
    finally:
        testbed.slurm("scancel", *batch)


async def test_a_high_priority_slurm_job_preempts_a_pod_which_is_then_deleted(
        kube: Client, slurm: httpx.AsyncClient, namespace: str,
        scheduler: RunningScheduler, testbed: cluster.Testbed) -> None:
    await quiet(slurm, testbed)
    names = [f"low-{i}" for i in range(testbed.node_count)]
    for name in names:
        await create(kube, pod_manifest(name, namespace, scheduler.name, cpu="32"))
    for name in names:
        await wait_bound(kube, namespace, name)
    urgent = testbed.slurm("sbatch", "--parsable", "--partition=high", "--exclusive",
                           "--chdir=/tmp", "--output=/dev/null", "--wrap=sleep 600").strip()
    try:
        async def one_pod_gone() -> list[str]:
            return [n for n in names if await get_pod(kube, namespace, n) is None]

        deleted = await eventually(one_pod_gone, within=30)
        assert len(deleted) == 1

        async def urgent_runs() -> bool:
            return bool((await job(slurm, urgent))["job_state"] == ["RUNNING"])

        await eventually(urgent_runs, within=30)
    finally:
        testbed.slurm("scancel", urgent)


async def test_the_hook_api_refuses_bad_calls_and_survives_a_flood(
        kube: Client, namespace: str, scheduler: RunningScheduler,
        testbed: cluster.Testbed) -> None:
    url = testbed.hook_url + "/hooks/v1/jobs"
    auth = {"Authorization": f"Bearer {testbed.hook_token}"}
    async with httpx.AsyncClient(timeout=30) as client:
        no_token = await client.post(f"{url}/1/terminating", json={"node": "h100-000"})
        wrong = await client.post(f"{url}/1/terminating", json={"node": "h100-000"},
                                  headers={"Authorization": "Bearer nope"})
        bad_body = await client.post(f"{url}/1/terminating", json={"node": "a b;rm"},
                                     headers=auth)
        not_json = await client.post(f"{url}/1/terminating", content=b"{", headers=auth)
        bad_id = await client.get(f"{url}/abc/pod", headers=auth)
        unknown = await client.get(f"{url}/999999/pod", headers=auth)
        assert no_token.status_code == 401 and wrong.status_code == 401
        assert bad_body.status_code == 400 and "node" in bad_body.text
        assert not_json.status_code == 400
        assert bad_id.status_code in (400, 404)
        assert unknown.status_code == 404 and "no such job" in unknown.json()["detail"]

        async def call(i: int) -> int:
            r = await client.get(f"{url}/{1_000_000 + i}/pod", headers=auth)
            return r.status_code

        flood = asyncio.gather(*(call(i) for i in range(1000)))
        await create(kube, pod_manifest("during-flood", namespace, scheduler.name))
        codes = await flood
    assert set(codes) <= {404, 429}
    await wait_bound(kube, namespace, "during-flood", within=30)
