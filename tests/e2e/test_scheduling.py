"""Pods placed by Slurm, end to end: real API server, real Slurm, the real scheduler process."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import httpx
import pytest

from sunk.kube import Client
from sunk.slurm.text import expand_hostlist
from testbed import cluster, errors
from testbed.topology import SLURM_NAMESPACE
from tests.e2e.conftest import RunningScheduler, start_scheduler
from tests.e2e.helpers import (
    create,
    events_for,
    eventually,
    get_pod,
    kube_list,
    pod_manifest,
    quiet,
    wait_bound,
)
from tests.e2e.helpers import job as slurm_job

JOB_ID = "sunk.coreweave.com/job-id"


async def job_of(slurm: httpx.AsyncClient, pod: dict[str, Any]) -> dict[str, Any]:
    job_id = pod["metadata"]["annotations"][JOB_ID]
    r = await slurm.get(f"/slurm/v0.0.42/job/{job_id}")
    job: dict[str, Any] = r.json()["jobs"][0]
    return job


async def k8s_node_of(kube: Client, slurm_node: str) -> str:
    pods = await kube_list(kube, "pods", namespace=SLURM_NAMESPACE,
                           label_selector="app.kubernetes.io/name=slurmd")
    return str(next(p["spec"]["nodeName"] for p in pods if p["spec"]["hostname"] == slurm_node))


async def test_cpu_and_gpu_pods_get_matching_jobs_and_run_where_slurm_put_them(
        kube: Client, slurm: httpx.AsyncClient, namespace: str,
        scheduler: RunningScheduler) -> None:
    await create(kube, pod_manifest("cpu", namespace, scheduler.name, cpu="3", memory="3Gi"))
    await create(kube, pod_manifest("gpu", namespace, scheduler.name, cpu="4", memory="8Gi",
                                    gpus=2))
    for name in ("cpu", "gpu"):
        pod = await wait_bound(kube, namespace, name)
        job = await job_of(slurm, pod)
        assert job["job_state"][0] == "RUNNING"  # a flag (CONFIGURING) may still follow
        assert job["extra"].endswith(": started")
        assert pod["spec"]["nodeName"] == await k8s_node_of(kube, job["nodes"])
        assert job["name"] == f"pod:{namespace}/{name}"

        async def running(name: str = name) -> bool:
            p = await get_pod(kube, namespace, name)
            return p is not None and p["status"].get("phase") == "Running"

        await eventually(running)
    cpu_job = await job_of(slurm, await wait_bound(kube, namespace, "cpu"))
    assert cpu_job["cpus"]["number"] == 3
    assert cpu_job["memory_per_node"]["number"] == 3 * 1024
    assert cpu_job["tres_per_node"] == ""
    gpu_job = await job_of(slurm, await wait_bound(kube, namespace, "gpu"))
    assert gpu_job["cpus"]["number"] == 4
    assert gpu_job["memory_per_node"]["number"] == 8 * 1024
    assert gpu_job["tres_per_node"] == "gres/gpu:2"
    pod = await wait_bound(kube, namespace, "gpu")

    async def scheduled_event() -> list[str]:
        return [e["message"] for e in await events_for(kube, namespace, "gpu")
                if e["reason"] == "Scheduled"]

    [message] = await eventually(scheduled_event)
    assert f"job {pod['metadata']['annotations'][JOB_ID]}" in message


# annotation (without prefix), value, job field, expected value read back from slurmrestd
ANNOTATIONS: list[tuple[str, str, str, Any]] = [
    ("account", "root", "account", "root"),
    ("comment", "A Kubernetes job", "comment", "A Kubernetes job"),
    ("constraints", "a100", "features", "a100"),
    ("exclusive", "none", "shared", ["none"]),
    ("exclusive", "user", "shared", ["user"]),
    ("exclusive", "ok", "shared", ["oversubscribe"]),
    ("exclusive", "true", "shared", ["none"]),
    ("excluded-nodes", "h100-000,a100-001", "excluded_nodes", "a100-001,h100-000"),
    ("required-nodes", "a100-003", "required_nodes", "a100-003"),
    ("partition", "high", "partition", "high"),
    ("prefer", "h100", "prefer", "h100"),
    ("priority", "100", "priority", 100),
    ("qos", "normal", "qos", "normal"),
    ("reservation", "sunk-e2e", "resv_name", "sunk-e2e"),
    ("user-id", "1001", "user_id", 1001),
    ("current-working-dir", "/var/tmp", "current_working_directory", "/var/tmp"),
    ("timeout", "7", "time_limit", 7),
]


async def test_every_annotation_reaches_its_job_field(
        kube: Client, slurm: httpx.AsyncClient, namespace: str,
        scheduler: RunningScheduler, testbed: cluster.Testbed) -> None:
    testbed.slurm("scontrol", "create", "reservation", "ReservationName=sunk-e2e",
                  "Nodes=h100-002", "StartTime=now", "Duration=10", "Users=root")
    # Without slurmdbd (`up --no-accounting`) Slurm forgets a job's QOS once the job starts:
    # keep the QOS Pod's job pending, behind a job that holds the only node it may have.
    blocker = testbed.slurm("sbatch", "--parsable", "--nodelist=a100-003", "--exclusive",
                            "--chdir=/tmp", "--output=/dev/null", "--wrap=sleep 300").strip()
    blocker_h100 = testbed.slurm("sbatch", "--parsable", "--nodelist=h100-000", "--exclusive",
                                 "--chdir=/tmp", "--output=/dev/null", "--wrap=sleep 300").strip()
    try:
        async def blocking() -> bool:  # not pending behind what an earlier test left there
            states = [(await slurm_job(slurm, j))["job_state"] for j in (blocker, blocker_h100)]
            return all(state == ["RUNNING"] for state in states)

        await eventually(blocking, within=60)
        names = []
        for i, (key, value, _, _) in enumerate(ANNOTATIONS):
            names.append(f"a{i}-{key}")
            annotations = {f"sunk.coreweave.com/{key}": value}
            if key == "qos":
                annotations["sunk.coreweave.com/required-nodes"] = "a100-003"
            if key == "prefer":  # a running job's prefer moves into its features: keep it
                annotations["sunk.coreweave.com/required-nodes"] = "h100-000"  # pending
            await create(kube, pod_manifest(names[-1], namespace, scheduler.name, cpu="1",
                                             annotations=annotations))
        # user-id without group-id: the group is the user's; with both: the group given.
        await create(kube, pod_manifest(
            "both-ids", namespace, scheduler.name,
            annotations={"sunk.coreweave.com/user-id": "1001",
                         "sunk.coreweave.com/group-id": "1002"}))
        wrong = []
        for name, (key, value, field, expected) in zip(names, ANNOTATIONS, strict=True):
            async def submitted(name: str = name) -> dict[str, Any] | None:
                pod = await get_pod(kube, namespace, name)
                return pod if pod and JOB_ID in pod["metadata"].get("annotations", {}) else None

            record = await job_of(slurm, await eventually(submitted))
            got = record[field]
            if isinstance(got, dict) and "number" in got:
                got = got["number"]
            if key == "excluded-nodes":  # ours plus any the scheduler excluded for placement
                got = ",".join(n for n in expand_hostlist(got) if n in ("h100-000", "a100-001"))
            if got != expected:
                wrong.append(f"{key}={value!r}: job {field} is {got!r}, expected {expected!r}")
            if key == "user-id":
                assert record["group_id"] == 1001, "group-id defaults to user-id"
        assert not wrong, "\n".join(wrong)
        both = await eventually(lambda: get_pod(kube, namespace, "both-ids"))
        both_job = await eventually(
            lambda: _job_when_submitted(kube, slurm, namespace, "both-ids"))
        assert (both_job["user_id"], both_job["group_id"]) == (1001, 1002), both
    finally:
        testbed.slurm("scancel", blocker, blocker_h100)
        testbed.slurm("scancel", "--reservation=sunk-e2e")

        async def reservation_deleted() -> bool:
            try:
                testbed.slurm("scontrol", "delete", "ReservationName=sunk-e2e")
            except errors.TestbedError:
                return False  # still in use until its job has ended
            return True

        await eventually(reservation_deleted)


async def _job_when_submitted(kube: Client, slurm: httpx.AsyncClient, namespace: str,
                              name: str) -> dict[str, Any] | None:
    pod = await get_pod(kube, namespace, name)
    if pod is None or JOB_ID not in pod["metadata"].get("annotations", {}):
        return None
    return await job_of(slurm, pod)


@pytest.mark.parametrize(("name", "changes", "reason"), [
    ("bad-priority", {"annotations": {"sunk.coreweave.com/priority": "abc"}},
     "InvalidAnnotation"),
    ("zero-cpu", {"cpu": "0"}, "MissingResourceRequests"),
    ("long-grace", {"grace": 25}, "TerminationGracePeriodTooLong"),
    ("maybe-exclusive", {"annotations": {"sunk.coreweave.com/exclusive": "maybe"}},
     "InvalidAnnotation"),
])
async def test_invalid_pods_get_an_event_and_no_job(
        kube: Client, slurm: httpx.AsyncClient, namespace: str,
        scheduler: RunningScheduler, name: str, changes: dict[str, Any], reason: str) -> None:
    await create(kube, pod_manifest(name, namespace, scheduler.name, **changes))

    async def rejected() -> list[dict[str, Any]]:
        return [e for e in await events_for(kube, namespace, name) if e["type"] == "Warning"]

    events = await eventually(rejected)
    assert events[0]["reason"] == reason, events[0]

    async def says_why() -> dict[str, Any] | None:  # where kubectl and autoscalers look
        pod = await get_pod(kube, namespace, name) or {}
        return next((c for c in pod.get("status", {}).get("conditions", [])
                     if c["type"] == "PodScheduled" and c["status"] == "False"), None)

    condition = await eventually(says_why, within=10)
    assert condition["reason"] == "Unschedulable", condition
    assert condition["message"].startswith(f"{reason}: "), condition
    pod = await get_pod(kube, namespace, name)
    assert pod is not None
    assert JOB_ID not in pod["metadata"].get("annotations", {})
    assert not pod["spec"].get("nodeName")
    r = await slurm.get("/slurm/v0.0.42/jobs/")
    assert f"pod:{namespace}/{name}" not in {j["name"] for j in r.json()["jobs"]}


async def test_node_affinity_and_taints_narrow_where_slurm_may_place(
        kube: Client, slurm: httpx.AsyncClient, namespace: str,
        scheduler: RunningScheduler, testbed: cluster.Testbed) -> None:
    # Six GPU Pods must fit on the one A100 node left: jobs that earlier tests left ending
    # there (their Pods go with their namespaces) must be gone first.
    await quiet(slurm, testbed)
    a100 = [n for n in testbed.nodes if n.gpu_model == "A100_PCIE_80GB"]
    tainted = a100[0].k8s_name
    testbed.kubectl("taint", "node", tainted, "dedicated=infra:NoSchedule")
    try:
        affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{
                "key": "gpu.nvidia.com/model", "operator": "In",
                "values": ["A100_PCIE_80GB"]}]}]}}}
        for i in range(6):
            await create(kube, pod_manifest(f"a100-{i}", namespace, scheduler.name, cpu="1",
                                            gpus=1, affinity=affinity))
        allowed = {n.k8s_name for n in a100} - {tainted}
        for i in range(6):
            pod = await wait_bound(kube, namespace, f"a100-{i}")
            assert pod["spec"]["nodeName"] in allowed
    finally:
        testbed.kubectl("taint", "node", tainted, "dedicated-")


async def test_a_job_left_by_a_crashed_scheduler_is_adopted_not_submitted_again(
        kube: Client, slurm: httpx.AsyncClient, namespace: str,
        testbed: cluster.Testbed) -> None:
    """The window between submitting and annotating: a job naming the Pod exists in Slurm but
    the Pod does not know it. A (re)started scheduler must adopt it."""
    name = "sunk-adopt"
    await create(kube, pod_manifest("orphan", namespace, name))
    pod = await get_pod(kube, namespace, "orphan")
    assert pod is not None
    uid = pod["metadata"]["uid"]
    extra = f"sunk-pod={namespace}/orphan uid={uid} scheduler={name}"
    job = {"name": f"pod:{namespace}/orphan", "extra": extra, "current_working_directory": "/tmp",
           "script": "#!/bin/sh\nexec /opt/sunk/scripts/placeholder.sh\n", "minimum_cpus": 1,
           "environment": ["PATH=/usr/bin:/bin", f"SUNK_JOB_EXTRA={extra}"]}
    # First a job that copies the extra but lacks the scheduler's stamp (anyone's job could):
    # it must not be taken for the Pod's. Then the job as the scheduler submits it.
    impostor = (await slurm.post("/slurm/v0.0.42/job/submit",
                                 json={"job": {**job, "name": "impostor"}})).json()["job_id"]
    stamped = {**job, "admin_comment": f"sunk-pod-uid={uid} scheduler={name}"}
    r = await slurm.post("/slurm/v0.0.42/job/submit", json={"job": stamped})
    job_id = r.json()["job_id"]
    running = start_scheduler(testbed, name=name)
    try:
        pod = await wait_bound(kube, namespace, "orphan")
        assert pod["metadata"]["annotations"][JOB_ID] == str(job_id)
        jobs = (await slurm.get("/slurm/v0.0.42/jobs/")).json()["jobs"]
        assert [j["job_id"] for j in jobs if j["name"] == f"pod:{namespace}/orphan"] == [job_id]
        assert "claims to be" in running.log.read_text()
    finally:
        running.stop()
        testbed.slurm("scancel", str(impostor))


async def test_kill_9_right_after_submit_then_restart_gives_one_job_and_a_bound_pod(
        kube: Client, slurm: httpx.AsyncClient, namespace: str,
        testbed: cluster.Testbed) -> None:
    name = "sunk-crash"
    running = start_scheduler(testbed, name=name)
    try:
        await create(kube, pod_manifest("victim", namespace, name))

        async def submitted() -> bool:
            jobs = (await slurm.get("/slurm/v0.0.42/jobs/")).json()["jobs"]
            return any(j["name"] == f"pod:{namespace}/victim" for j in jobs)

        await eventually(submitted)
        running.stop(signal.SIGKILL)
    finally:
        running.stop()
    restarted = start_scheduler(testbed, name=name, log_name=f"{name}-restarted")
    try:
        pod = await wait_bound(kube, namespace, "victim")
        await asyncio.sleep(2)  # time for a second submission, if the scheduler were to make one
        jobs = (await slurm.get("/slurm/v0.0.42/jobs/")).json()["jobs"]
        ours = [j["job_id"] for j in jobs if j["name"] == f"pod:{namespace}/victim"]
        assert ours == [int(pod["metadata"]["annotations"][JOB_ID])]
    finally:
        restarted.stop()
