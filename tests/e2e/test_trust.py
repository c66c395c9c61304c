"""Trust boundaries, tried from outside as a hostile or careless user would: a Pod acts only on
its own job, a hook call only on its own job and only when Slurm agrees, and what Slurm or the
scheduler refuses reaches the Pod's author as an Event."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path

import httpx

from sunk.hooks.auth import HookKeys, job_owner
from sunk.kube import Client
from testbed import cluster
from tests.e2e.conftest import RunningScheduler
from tests.e2e.helpers import (
    call_api,
    create,
    events_for,
    eventually,
    get_pod,
    job,
    pod_manifest,
    quiet,
    wait_bound,
)

PREFIX = "sunk.coreweave.com/"
JOB_ID = PREFIX + "job-id"
POD_UID = PREFIX + "pod-uid"
REJECTED = PREFIX + "rejected"


async def delete(kube: Client, namespace: str, name: str) -> None:
    async with call_api(kube, "DELETE", namespace=namespace, url=f"pods/{name}"):
        pass


async def event_reasons(kube: Client, namespace: str, name: str) -> dict[str, str]:
    return {e["reason"]: e["message"] for e in await events_for(kube, namespace, name)}


async def wait_event(kube: Client, namespace: str, name: str, reason: str,
                     within: float = 30) -> str:
    async def seen() -> str | None:
        return (await event_reasons(kube, namespace, name)).get(reason)

    return await eventually(seen, within=within)


def sbatch(testbed: cluster.Testbed, script: str, *args: str, user: str | None = None) -> str:
    """Submit a plain Slurm batch job (not a Pod's): its id."""
    path = Path(testbed.chroot) / "tmp" / f"job-{abs(hash(script))}.sh"
    path.write_text(script)
    path.chmod(0o755)
    out = subprocess.run(testbed.chroot_cmd("sbatch", "--parsable", "--chdir=/tmp",
                                            "--output=/dev/null", *args,
                                            f"/tmp/{path.name}", user=user),
                         capture_output=True, text=True, timeout=30, check=True)
    return out.stdout.strip().split(";")[0]


async def test_a_pod_naming_another_pods_job_gets_its_own_and_leaves_the_other_alone(
        kube: Client, slurm: httpx.AsyncClient, namespace: str, other_namespace: str,
        scheduler: RunningScheduler, testbed: cluster.Testbed) -> None:
    """Another namespace's job id, a copy of a running Pod (`kubectl get -o yaml`), and the id
    of a plain Slurm batch job: each Pod gets its own job; deleting them cancels none of the
    others, and the victim stays bound."""
    await quiet(slurm, testbed)
    await create(kube, pod_manifest("victim", namespace, scheduler.name))
    victim = await wait_bound(kube, namespace, "victim")
    victim_job = victim["metadata"]["annotations"][JOB_ID]
    batch = sbatch(testbed, "#!/bin/sh\nsleep 600\n", "--mem=100", "--cpus-per-task=1")
    try:
        copied = copy.deepcopy(victim)
        meta = copied["metadata"]
        for key in ("uid", "resourceVersion", "creationTimestamp", "managedFields"):
            meta.pop(key, None)
        meta.update(name="copy", namespace=other_namespace)
        copied["spec"].pop("nodeName")
        copied.pop("status", None)
        assert meta["annotations"][JOB_ID] == victim_job and POD_UID in meta["annotations"]
        await create(kube, copied)
        await create(kube, pod_manifest("forged", other_namespace, scheduler.name,
                                        annotations={JOB_ID: victim_job}))
        await create(kube, pod_manifest("forged-batch", other_namespace, scheduler.name,
                                        annotations={JOB_ID: batch, POD_UID: "x"}))
        own_jobs = set()
        for name in ("copy", "forged", "forged-batch"):
            pod = await wait_bound(kube, other_namespace, name)
            annotations = pod["metadata"]["annotations"]
            assert annotations[JOB_ID] not in (victim_job, batch)
            assert annotations[POD_UID] == pod["metadata"]["uid"]
            own_jobs.add(annotations[JOB_ID])
            message = await wait_event(kube, other_namespace, name, "IgnoredAnnotations")
            assert JOB_ID in message
        assert len(own_jobs) == 3
        for name in ("copy", "forged", "forged-batch"):
            await delete(kube, other_namespace, name)

        async def their_jobs_ended() -> bool:
            states = [(await job(slurm, j))["job_state"][0] for j in own_jobs]
            return all(state != "RUNNING" for state in states)

        await eventually(their_jobs_ended, within=30)
        assert (await job(slurm, victim_job))["job_state"] == ["RUNNING"]
        assert (await job(slurm, batch))["job_state"] == ["RUNNING"]
        still = await get_pod(kube, namespace, "victim")
        assert still is not None and not still["metadata"].get("deletionTimestamp")
    finally:
        testbed.slurm("scancel", batch)


async def test_a_copied_rejection_does_not_block_a_pod(
        kube: Client, namespace: str, scheduler: RunningScheduler) -> None:
    await create(kube, pod_manifest("was-rejected", namespace, scheduler.name, annotations={
        REJECTED: "PolicyDenied", POD_UID: "0b6e4bb4-0000-0000-0000-000000000000"}))
    pod = await wait_bound(kube, namespace, "was-rejected")
    assert REJECTED not in pod["metadata"]["annotations"]
    assert REJECTED in await wait_event(kube, namespace, "was-rejected", "IgnoredAnnotations")


async def test_hooks_act_only_for_their_own_job_and_only_when_slurm_agrees(
        kube: Client, slurm: httpx.AsyncClient, namespace: str,
        scheduler: RunningScheduler, testbed: cluster.Testbed) -> None:
    await quiet(slurm, testbed)
    node = testbed.nodes[0].slurm_name
    blocker = sbatch(testbed, "#!/bin/sh\nsleep 600\n", "--exclusive", f"--nodelist={node}",
                     "--mem=100")
    try:
        await create(kube, pod_manifest("running", namespace, scheduler.name))
        running = await wait_bound(kube, namespace, "running")
        await create(kube, pod_manifest("waiting", namespace, scheduler.name, annotations={
            PREFIX + "required-nodes": node}))

        async def waiting_job() -> str | None:
            pod = await get_pod(kube, namespace, "waiting")
            return ((pod or {}).get("metadata", {}).get("annotations") or {}).get(JOB_ID)

        waiting = await eventually(waiting_job)
        assert (await job(slurm, waiting))["job_state"] == ["PENDING"]
        keys = HookKeys(lambda: [testbed.hook_token])
        running_credential = keys.job_credential(
            job_owner(scheduler.name, running["metadata"]["uid"]))
        running_job = running["metadata"]["annotations"][JOB_ID]
        running_node = (await job(slurm, running_job))["nodes"]
        url = f"{testbed.hook_url}/hooks/v1"

        def auth(token: str) -> dict[str, str]:
            return {"Authorization": f"Bearer {token}"}

        async with httpx.AsyncClient(timeout=30) as client:
            secret = auth(testbed.hook_token)
            pending = await client.post(f"{url}/jobs/{waiting}/started", json={"node": node},
                                        headers=secret)
            assert pending.status_code == 409 and "pending" in pending.json()["detail"]
            others = await client.post(f"{url}/jobs/{waiting}/terminating",
                                       json={"node": node}, headers=auth(running_credential))
            assert others.status_code == 403
            elsewhere = await client.post(f"{url}/jobs/{running_job}/started",
                                          json={"node": node}, headers=auth(running_credential))
            assert elsewhere.status_code == 409 and running_node in elsewhere.json()["detail"]
            drain_other = await client.post(f"{url}/jobs/{running_job}/drain",
                                            json={"node": node},
                                            headers=auth(running_credential))
            assert drain_other.status_code == 409
            garbage = await client.post(f"{url}/jobs/{running_job}/terminating",
                                        json={"node": running_node},
                                        headers=auth("sunk-job.0000"))
            assert garbage.status_code == 403
            lock_by_job = await client.post(f"{url}/nodes/{node}/lock?wait=0",
                                            json={"job_id": int(running_job)},
                                            headers=auth(running_credential))
            assert lock_by_job.status_code == 403
            lock_pending = await client.post(f"{url}/nodes/{node}/lock?wait=0",
                                             json={"job_id": int(waiting)}, headers=secret)
            assert lock_pending.status_code == 409
        pod = await get_pod(kube, namespace, "waiting")
        assert pod is not None and not pod["spec"].get("nodeName"), "never bound while pending"
        assert (await job(slurm, running_job))["job_state"] == ["RUNNING"]
        assert "DRAIN" not in (await slurm.get(f"/slurm/v0.0.42/node/{node}")).json()[
            "nodes"][0]["state"]
    finally:
        testbed.slurm("scancel", blocker)


async def test_an_unprivileged_slurm_job_cannot_reach_the_node_secret_or_other_jobs(
        kube: Client, slurm: httpx.AsyncClient, namespace: str,
        scheduler: RunningScheduler, testbed: cluster.Testbed) -> None:
    """An ordinary sbatch job of an ordinary Slurm user tries what the reference product
    allowed: read the hook secret and have another user's Pod deleted."""
    await quiet(slurm, testbed)
    await create(kube, pod_manifest("victim", namespace, scheduler.name))
    victim = await wait_bound(kube, namespace, "victim")
    victim_job = victim["metadata"]["annotations"][JOB_ID]
    node = (await job(slurm, victim_job))["nodes"]
    out = Path(testbed.chroot) / "tmp" / f"attack-{victim_job}"
    script = f"""#!/bin/sh
cat /etc/slurm/sunk-hooks.token > /tmp/{out.name}.secret 2>&1
. /etc/slurm/sunk-hooks.env
for token in "${{SUNK_HOOK_TOKEN:-}}" "$(cat /etc/slurm/sunk-hooks.token 2>/dev/null)" \\
        "${{SUNK_JOB_TOKEN:-}}"; do
    curl -s -o /dev/null -w '%{{http_code}}\\n' -X POST -H "Authorization: Bearer $token" \\
        -H 'Content-Type: application/json' --data '{{"node":"{node}"}}' \\
        "$SUNK_HOOK_URL/hooks/v1/jobs/{victim_job}/terminating" >> /tmp/{out.name}.codes
done
"""
    attacker = sbatch(testbed, script, "--mem=100", "--cpus-per-task=1", user="k8s-pods")

    async def finished() -> bool:
        return (await job(slurm, attacker))["job_state"][0] in ("COMPLETED", "FAILED")

    await eventually(finished, within=60)
    secret = Path(f"{out}.secret").read_text()
    assert "Permission denied" in secret and testbed.hook_token not in secret
    codes = Path(f"{out}.codes").read_text().split()
    assert codes == ["401", "401", "401"], codes
    pod = await get_pod(kube, namespace, "victim")
    assert pod is not None and not pod["metadata"].get("deletionTimestamp")
    assert (await job(slurm, victim_job))["job_state"] == ["RUNNING"]


async def test_what_slurm_or_the_scheduler_refuses_reaches_the_pod(
        kube: Client, slurm: httpx.AsyncClient, namespace: str,
        scheduler: RunningScheduler, testbed: cluster.Testbed) -> None:
    node = testbed.nodes[0].slurm_name
    await create(kube, pod_manifest("conflict", namespace, scheduler.name, annotations={
        PREFIX + "required-nodes": node, PREFIX + "excluded-nodes": node}))
    await create(kube, pod_manifest("no-such-node", namespace, scheduler.name, annotations={
        PREFIX + "required-nodes": "nosuch-9"}))
    await create(kube, pod_manifest("typo", namespace, scheduler.name, annotations={
        PREFIX + "prioritty": "10"}))
    await create(kube, pod_manifest("no-such-user", namespace, scheduler.name, annotations={
        PREFIX + "user-id": "4242"}))
    conflict = await wait_event(kube, namespace, "conflict", "PlacementConflict")
    assert node in conflict and "excluded" in conflict
    refused = await wait_event(kube, namespace, "no-such-node", "SlurmRefused")
    assert "Invalid node name specified" in refused
    typo = await wait_event(kube, namespace, "typo", "UnknownAnnotation")
    assert f"did you mean {PREFIX}priority" in typo
    await wait_bound(kube, namespace, "typo")
    if testbed.accounting:  # slurmdbd knows no user 4242: Slurm refuses the job at submit
        unknown = await wait_event(kube, namespace, "no-such-user", "SlurmRefused")
        assert "Invalid account or account/partition combination specified" in unknown
    else:  # taken, then stuck: no slurmd can run a job as a user it does not know
        stuck = await wait_event(kube, namespace, "no-such-user", "SlurmJobStuck", within=90)
        assert "will not start by itself" in stuck
    for name, reason in (("conflict", "PlacementConflict"), ("no-such-node", "SlurmRefused")):
        pod = await get_pod(kube, namespace, name)
        assert pod is not None
        assert pod["metadata"]["annotations"][REJECTED] == reason
        assert JOB_ID not in pod["metadata"]["annotations"]
        reasons = await event_reasons(kube, namespace, name)
        assert "SubmitFailed" not in reasons, "refused once, not retried"
