"""Gangs on the real bed: a group of Pods becomes one multi-node Slurm job, all or nothing.

Each source (sunk's label, a batch Job, a PodGroup) binds a gang of 4 only once 4 nodes are
free, rank r on the r-th node of the job. A member lost before or after the start, a job
cancelled or preempted, a scheduler killed half way, a prolog failing on one node: each ends
with no orphan job, no half-bound gang and no lock left behind.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from sunk.kube import Client
from sunk.slurm.text import expand_hostlist
from testbed import cluster
from testbed.scheduler import start_scheduler
from testbed.topology import SLURM_NAMESPACE, TestbedNode
from tests.e2e.conftest import RunningScheduler
from tests.e2e.helpers import (
    call_api,
    create,
    events_for,
    eventually,
    get_pod,
    pod_manifest,
    quiet,
)
from tests.e2e.test_locking import precious_pod

PREFIX = "sunk.coreweave.com/"
SIZE = 4


def member(name: str, namespace: str, scheduler: str, gang: str, size: str = str(SIZE),
           **annotations: str) -> dict[str, Any]:
    manifest = pod_manifest(name, namespace, scheduler, cpu="2", memory="1Gi",
                            annotations={f"{PREFIX}gang-size": size, **annotations})
    manifest["metadata"]["labels"] = {f"{PREFIX}gang": gang}
    return manifest


def block(testbed: cluster.Testbed, nodes: list[TestbedNode]) -> str:
    """A Slurm job of someone else's holding ``nodes`` whole (until it is cancelled)."""
    names = ",".join(n.slurm_name for n in nodes)
    return testbed.slurm("sbatch", "--parsable", f"--nodelist={names}", f"--nodes={len(nodes)}",
                         "--exclusive", "--chdir=/tmp", "--output=/dev/null",
                         "--job-name=gang-blocker", "--wrap=sleep 600").strip()


async def end_gang(kube: Client, slurm: httpx.AsyncClient, namespace: str, names: list[str],
                   job_name: str) -> None:
    """Delete the gang's Pods and wait until its job has ended (its scheduler still running)."""
    for pod in names:
        async with call_api(kube, "DELETE", namespace=namespace, url=f"pods/{pod}",
                            params={"gracePeriodSeconds": "0"}, raise_for_status=False):
            pass

    async def ended() -> bool:
        return not await live_jobs(slurm, job_name)

    await eventually(ended, within=60)


async def jobs_named(slurm: httpx.AsyncClient, name: str) -> list[dict[str, Any]]:
    listed = (await slurm.get("/slurm/v0.0.42/jobs/")).json()["jobs"]
    return [j for j in listed if j["name"] == name]


async def live_jobs(slurm: httpx.AsyncClient, name: str) -> list[dict[str, Any]]:
    return [j for j in await jobs_named(slurm, name)
            if j["job_state"][0] in ("PENDING", "RUNNING", "CONFIGURING")]


async def pods_of(kube: Client, namespace: str, names: list[str]) -> list[dict[str, Any] | None]:
    return [await get_pod(kube, namespace, n) for n in names]


async def assert_none_bound_for(kube: Client, namespace: str, names: list[str],
                                seconds: float) -> None:
    """Checked for a while, not once: nothing of the gang binds."""
    loop = asyncio.get_running_loop()
    until = loop.time() + seconds
    while loop.time() < until:
        for pod in await pods_of(kube, namespace, names):
            assert pod is not None and not pod["spec"].get("nodeName"), (
                f"{pod and pod['metadata']['name']} bound while the gang was not whole")
        await asyncio.sleep(0.5)


async def wait_all_bound(kube: Client, namespace: str, names: list[str],
                         within: float = 90) -> list[dict[str, Any]]:
    async def bound() -> list[dict[str, Any]] | None:
        pods = await pods_of(kube, namespace, names)
        if all(p is not None and p["spec"].get("nodeName") for p in pods):
            return [p for p in pods if p is not None]
        return None

    return await eventually(bound, within)


async def assert_ranked(testbed: cluster.Testbed, slurm: httpx.AsyncClient,
                        pods: list[dict[str, Any]], job_name: str) -> dict[str, Any]:
    """Rank r (the list's order) runs on the r-th node of the job, and says so."""
    job = max(await jobs_named(slurm, job_name), key=lambda j: j["job_id"])
    k8s = {n.slurm_name: n.k8s_name for n in testbed.nodes}
    if job["job_state"][0] == "RUNNING":
        nodes = expand_hostlist(job["nodes"])
    else:  # an ended job's record keeps only its batch host: Slurm's order (slurmrestd
        # lists a job's nodes in node-table order) is the bed's
        order = [n.slurm_name for n in testbed.nodes]
        nodes = sorted((p["metadata"]["annotations"][f"{PREFIX}gang-node"] for p in pods),
                       key=order.index)
    assert len(nodes) == len(pods) == len(set(nodes))
    for rank, (pod, node) in enumerate(zip(pods, nodes, strict=True)):
        annotations = pod["metadata"]["annotations"]
        assert annotations[f"{PREFIX}gang-rank"] == str(rank)
        assert annotations[f"{PREFIX}gang-node"] == node
        assert annotations[f"{PREFIX}job-id"] == str(job["job_id"])
        assert pod["spec"]["nodeName"] == k8s[node], (pod["metadata"]["name"], rank, node)
    return job


async def by_completion_index(kube: Client, namespace: str) -> list[str] | None:
    """The names of a Job's Pods in the namespace, by completion index, once all SIZE exist."""
    async with call_api(kube, "GET", namespace=namespace, url="pods") as r:
        pods = r.json()["items"]
    ranked = sorted(pods, key=lambda p: int(p["metadata"]["labels"][
        "batch.kubernetes.io/job-completion-index"]))
    return [p["metadata"]["name"] for p in ranked] if len(ranked) == SIZE else None


async def gone(kube: Client, namespace: str, names: list[str], within: float = 60) -> None:
    async def all_gone() -> bool:
        return all(p is None for p in await pods_of(kube, namespace, names))

    await eventually(all_gone, within)


async def no_live_job(slurm: httpx.AsyncClient, name: str, within: float = 60) -> None:
    async def none() -> bool:
        return not await live_jobs(slurm, name)

    await eventually(none, within)


async def gang_of_four_waits_for_four_free_nodes(
        kube: Client, slurm: httpx.AsyncClient, testbed: cluster.Testbed, namespace: str,
        names: list[str], job_name: str, make: Any,
        while_pending: Any = None) -> dict[str, Any]:
    """With all but 3 nodes busy the gang's job waits and no member binds; freed, all 4 bind
    in rank order. ``make`` creates the gang's objects; ``while_pending`` checks more while
    the job waits."""
    await quiet(slurm, testbed)
    blocker = block(testbed, testbed.nodes[3:])
    try:
        await make()
        await eventually(lambda: live_jobs(slurm, job_name), within=30)
        await assert_none_bound_for(kube, namespace, names, 10)
        (pending,) = await live_jobs(slurm, job_name)
        assert pending["job_state"][0] == "PENDING"
        assert pending["node_count"]["number"] == SIZE
        if while_pending is not None:
            await while_pending()
        testbed.slurm("scancel", blocker)
        pods = await wait_all_bound(kube, namespace, names)
        return await assert_ranked(testbed, slurm, pods, job_name)
    finally:
        testbed.slurm("scancel", blocker)


async def test_a_labelled_gang_binds_only_when_four_nodes_are_free_in_rank_order(
        kube: Client, slurm: httpx.AsyncClient, namespace: str, scheduler: RunningScheduler,
        testbed: cluster.Testbed) -> None:
    names = [f"w{i}" for i in range(SIZE)]

    async def make() -> None:
        # ranks given out of name order: rank follows gang-index, not the name
        for i, name in enumerate(names):
            await create(kube, member(name, namespace, scheduler.name, "train",
                                      **{f"{PREFIX}gang-index": str((i + 1) % SIZE)}))

    job = await gang_of_four_waits_for_four_free_nodes(
        kube, slurm, testbed, namespace, names[-1:] + names[:-1], f"gang:{namespace}/label:train",
        make)
    assert "members=" in job["extra"]


async def test_an_indexed_job_is_one_gang_ranked_by_completion_index(
        kube: Client, slurm: httpx.AsyncClient, namespace: str, scheduler: RunningScheduler,
        testbed: cluster.Testbed) -> None:
    template = pod_manifest("x", namespace, scheduler.name, cpu="2")["spec"]
    template["restartPolicy"] = "Never"
    batch_job = {"apiVersion": "batch/v1", "kind": "Job",
                 "metadata": {"name": "train", "namespace": namespace},
                 "spec": {"parallelism": SIZE, "completions": SIZE,
                          "completionMode": "Indexed", "backoffLimit": 0,
                          "template": {"spec": template}}}

    async def make() -> None:
        await kube.request("POST", "jobs", namespace=namespace, version="batch/v1",
                           json=batch_job)

    await quiet(slurm, testbed)
    blocker = block(testbed, testbed.nodes[3:])
    try:
        await make()
        names = await eventually(lambda: by_completion_index(kube, namespace), within=30)
        await eventually(lambda: live_jobs(slurm, f"gang:{namespace}/job:train"), within=30)
        await assert_none_bound_for(kube, namespace, names, 10)
        testbed.slurm("scancel", blocker)
        pods = await wait_all_bound(kube, namespace, names)
        await assert_ranked(testbed, slurm, pods, f"gang:{namespace}/job:train")
    finally:
        testbed.slurm("scancel", blocker)
    # The bed's kubelet (kwok) completes a Job's Pods at once: every member succeeded, so the
    # gang's job ends, and the members stay (a Pod that ended holds nothing).
    await no_live_job(slurm, f"gang:{namespace}/job:train")
    for pod in await pods_of(kube, namespace, names):
        assert pod is not None and pod["status"]["phase"] == "Succeeded"

    async def job_complete() -> bool:
        body = await kube.request("GET", "jobs/train", namespace=namespace, version="batch/v1")
        return bool((body.get("status") or {}).get("succeeded") == SIZE)

    await eventually(job_complete, within=30)


async def test_a_job_that_does_not_run_all_at_once_is_scheduled_pod_by_pod(
        kube: Client, slurm: httpx.AsyncClient, namespace: str, scheduler: RunningScheduler,
        testbed: cluster.Testbed) -> None:
    await quiet(slurm, testbed)
    template = pod_manifest("x", namespace, scheduler.name, cpu="1")["spec"]
    template["restartPolicy"] = "Never"
    await kube.request("POST", "jobs", namespace=namespace, version="batch/v1", json={
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "drip",
                                                              "namespace": namespace},
        "spec": {"parallelism": 2, "completions": 5, "template": {"spec": template}}})

    async def two_bound() -> bool:
        async with call_api(kube, "GET", namespace=namespace, url="pods") as r:
            return sum(1 for p in r.json()["items"] if p["spec"].get("nodeName")) == 2

    await eventually(two_bound, within=60)
    assert not await jobs_named(slurm, f"gang:{namespace}/job:drip")


async def test_a_podgroup_is_one_gang_of_min_member(
        kube: Client, slurm: httpx.AsyncClient, namespace: str, scheduler: RunningScheduler,
        testbed: cluster.Testbed) -> None:
    names = [f"pg-{i}" for i in range(SIZE)]

    async def make() -> None:
        await kube.request("POST", "podgroups", namespace=namespace,
                           version="scheduling.x-k8s.io/v1alpha1", json={
                               "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                               "metadata": {"name": "pg", "namespace": namespace},
                               "spec": {"minMember": SIZE}})
        for name in names:
            manifest = pod_manifest(name, namespace, scheduler.name, cpu="2")
            manifest["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": "pg"}
            await create(kube, manifest)

    async def status() -> dict[str, Any]:
        group = await kube.request("GET", "podgroups/pg", namespace=namespace,
                                   version="scheduling.x-k8s.io/v1alpha1")
        return dict(group.get("status") or {})

    async def scheduling() -> None:  # `kubectl get podgroups` shows where the gang is
        shown = await eventually(lambda: _phase(status(), "Scheduling"), within=10)
        assert (shown["running"], shown["succeeded"], shown["failed"]) == (0, 0, 0)
        assert shown["scheduleStartTime"].endswith("Z")

    await gang_of_four_waits_for_four_free_nodes(
        kube, slurm, testbed, namespace, names, f"gang:{namespace}/podgroup:pg", make,
        while_pending=scheduling)
    running = await eventually(lambda: _phase(status(), "Running"), within=30)
    assert running["running"] == SIZE


async def _phase(status: Any, phase: str) -> dict[str, Any] | None:
    shown: dict[str, Any] = await status
    return shown if shown.get("phase") == phase else None


async def test_a_leaderworkerset_group_is_one_gang_with_the_leader_at_rank_0(
        kube: Client, slurm: httpx.AsyncClient, namespace: str, scheduler: RunningScheduler,
        testbed: cluster.Testbed) -> None:
    version = "leaderworkerset.x-k8s.io/v1"
    spec = pod_manifest("x", namespace, scheduler.name, cpu="2")["spec"]
    names = ["infer-0", "infer-0-1", "infer-0-2", "infer-0-3"]  # worker index 0 (leader) .. 3

    async def make() -> None:
        await kube.request("POST", "leaderworkersets", namespace=namespace, version=version,
                           json={"apiVersion": version, "kind": "LeaderWorkerSet",
                                 "metadata": {"name": "infer", "namespace": namespace},
                                 "spec": {"replicas": 1, "leaderWorkerTemplate": {
                                     "size": SIZE, "leaderTemplate": {"spec": spec},
                                     "workerTemplate": {"spec": spec}}}})

    await gang_of_four_waits_for_four_free_nodes(
        kube, slurm, testbed, namespace, names, f"gang:{namespace}/lws:infer-0", make)


async def test_a_member_deleted_before_the_start_cancels_the_job_and_the_whole_gang_resubmits(
        kube: Client, slurm: httpx.AsyncClient, namespace: str, scheduler: RunningScheduler,
        testbed: cluster.Testbed) -> None:
    await quiet(slurm, testbed)
    job_name = f"gang:{namespace}/label:pre"
    names = [f"m{i}" for i in range(SIZE)]
    blocker = block(testbed, testbed.nodes[3:])
    try:
        for name in names:
            await create(kube, member(name, namespace, scheduler.name, "pre"))
        (first,) = await eventually(lambda: live_jobs(slurm, job_name), within=30)
        async with call_api(kube, "DELETE", namespace=namespace, url="pods/m2",
                            params={"gracePeriodSeconds": "0"}):
            pass
        await no_live_job(slurm, job_name, within=30)
        await assert_none_bound_for(kube, namespace, [n for n in names if n != "m2"], 3)
        await create(kube, member("m2", namespace, scheduler.name, "pre"))
        (second,) = await eventually(lambda: live_jobs(slurm, job_name), within=30)
        assert second["job_id"] != first["job_id"]
        testbed.slurm("scancel", blocker)
        pods = await wait_all_bound(kube, namespace, names)
        await assert_ranked(testbed, slurm, pods, job_name)
    finally:
        testbed.slurm("scancel", blocker)


async def started_gang(kube: Client, slurm: httpx.AsyncClient, testbed: cluster.Testbed,
                       namespace: str, scheduler: str, gang: str,
                       **extra: str) -> tuple[list[str], str, dict[str, Any]]:
    await quiet(slurm, testbed)
    names = [f"{gang}-{i}" for i in range(SIZE)]
    for name in names:
        await create(kube, member(name, namespace, scheduler, gang, **extra))
    job_name = f"gang:{namespace}/label:{gang}"
    await wait_all_bound(kube, namespace, names)
    (job,) = await live_jobs(slurm, job_name)
    return names, job_name, job


async def assert_clean(kube: Client, slurm: httpx.AsyncClient, testbed: cluster.Testbed,
                       namespace: str, names: list[str], job_name: str) -> None:
    """No orphan job, no member left, and every node unlocked and idle again."""
    await gone(kube, namespace, names)
    await no_live_job(slurm, job_name)

    async def unlocked() -> bool:
        async with call_api(kube, "GET", url="nodes") as r:
            return not any(t.get("key") == f"{PREFIX}lock" for n in r.json()["items"]
                           for t in (n["spec"].get("taints") or []))

    await eventually(unlocked, within=60)
    await quiet(slurm, testbed)


async def test_a_member_deleted_after_the_start_ends_the_job_and_the_rest_of_the_gang(
        kube: Client, slurm: httpx.AsyncClient, namespace: str, scheduler: RunningScheduler,
        testbed: cluster.Testbed) -> None:
    names, job_name, _ = await started_gang(kube, slurm, testbed, namespace, scheduler.name,
                                            "post")
    async with call_api(kube, "DELETE", namespace=namespace, url=f"pods/{names[1]}"):
        pass
    await assert_clean(kube, slurm, testbed, namespace, names, job_name)


async def test_scancel_of_the_gangs_job_deletes_every_member(
        kube: Client, slurm: httpx.AsyncClient, namespace: str, scheduler: RunningScheduler,
        testbed: cluster.Testbed) -> None:
    names, job_name, job = await started_gang(kube, slurm, testbed, namespace, scheduler.name,
                                              "cancelled")
    testbed.slurm("scancel", str(job["job_id"]))
    await assert_clean(kube, slurm, testbed, namespace, names, job_name)
    reasons = {e["reason"] for e in await events_for(kube, namespace, names[0])}
    assert "SlurmJobTerminating" in reasons or "SlurmJobEnded" in reasons


async def test_a_higher_priority_job_preempting_the_gang_deletes_every_member(
        kube: Client, slurm: httpx.AsyncClient, namespace: str, scheduler: RunningScheduler,
        testbed: cluster.Testbed) -> None:
    names, job_name, job = await started_gang(kube, slurm, testbed, namespace, scheduler.name,
                                              "preempted")
    await preempted_on(kube, slurm, testbed, namespace, names, job_name,
                       expand_hostlist(job["nodes"])[0])


async def preempted_on(kube: Client, slurm: httpx.AsyncClient, testbed: cluster.Testbed,
                       namespace: str, names: list[str], job_name: str, node: str) -> None:
    """A job of the high-priority partition on ``node`` preempts the gang's: it ends clean."""
    urgent = testbed.slurm("sbatch", "--parsable", "--partition=high", f"--nodelist={node}",
                           "--exclusive", "--chdir=/tmp", "--output=/dev/null",
                           "--wrap=sleep 5").strip()
    try:
        await assert_clean(kube, slurm, testbed, namespace, names, job_name)
    finally:
        testbed.slurm("scancel", urgent)


async def test_kill_9_between_submit_and_the_last_bind_resumes_the_same_gang(
        kube: Client, slurm: httpx.AsyncClient, namespace: str,
        testbed: cluster.Testbed) -> None:
    await quiet(slurm, testbed)
    name = "sunk-gang-crash"
    names = [f"c{i}" for i in range(SIZE)]
    job_name = f"gang:{namespace}/label:crash"
    blocker = block(testbed, testbed.nodes[3:])
    running = start_scheduler(testbed, name=name)
    try:
        for pod in names:
            await create(kube, member(pod, namespace, name, "crash"))
        (submitted,) = await eventually(lambda: live_jobs(slurm, job_name), within=30)
        running.stop(signal.SIGKILL)
        testbed.slurm("scancel", blocker)

        async def started() -> bool:
            jobs = await live_jobs(slurm, job_name)
            return bool(jobs) and (jobs[0].get("extra") or "").endswith(": started")

        await eventually(started, within=60)
    finally:
        running.stop()
        testbed.slurm("scancel", blocker)
    restarted = start_scheduler(testbed, name=name, log_name=f"{name}-restarted")
    try:
        pods = await wait_all_bound(kube, namespace, names)
        job = await assert_ranked(testbed, slurm, pods, job_name)
        assert job["job_id"] == submitted["job_id"]
        assert [j["job_id"] for j in await jobs_named(slurm, job_name)] == [job["job_id"]]
    finally:
        # This scheduler alone owns the job: end it before stopping, or it holds the second
        # block (the session's scheduler leaves another scheduler's job alone) into later tests.
        await end_gang(kube, slurm, namespace, names, job_name)
        restarted.stop()


async def test_bad_gangs_get_an_event_and_no_job(
        kube: Client, slurm: httpx.AsyncClient, namespace: str, scheduler: RunningScheduler,
        testbed: cluster.Testbed) -> None:
    cases = {"zero": ["0"], "letters": ["abc"], "disagree": ["2", "3"],
             "crowd": ["2", "2", "2"]}
    for gang, sizes in cases.items():
        for i, size in enumerate(sizes):
            await create(kube, member(f"{gang}-{i}", namespace, scheduler.name, gang, size))
    await kube.request("POST", "podgroups", namespace=namespace,
                       version="scheduling.x-k8s.io/v1alpha1", json={
                           "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                           "metadata": {"name": "small", "namespace": namespace},
                           "spec": {"minMember": 2}})
    for i in range(3):
        manifest = pod_manifest(f"small-{i}", namespace, scheduler.name)
        manifest["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": "small"}
        await create(kube, manifest)
    pods = [f"{g}-{i}" for g, sizes in cases.items() for i in range(len(sizes))]
    pods += [f"small-{i}" for i in range(3)]

    async def all_told() -> bool:
        for pod in pods:
            if "GangInvalid" not in {e["reason"] for e in await events_for(kube, namespace,
                                                                            pod)}:
                return False
        return True

    await eventually(all_told, within=30)

    async def no_job_holds_anything() -> bool:
        # Pods arrive one by one: a gang may be whole (2 of 2) for a moment before its third
        # Pod comes, and its job is then withdrawn before it runs.
        listed = (await slurm.get("/slurm/v0.0.42/jobs/")).json()["jobs"]
        return not [j for j in listed if j["name"].startswith(f"gang:{namespace}/")
                    and j["job_state"][0] in ("PENDING", "RUNNING", "CONFIGURING")]

    await eventually(no_job_holds_anything, within=30)
    await assert_none_bound_for(kube, namespace, pods, 5)


async def test_a_gang_short_of_members_is_told_so_and_nothing_is_submitted(
        kube: Client, slurm: httpx.AsyncClient, namespace: str,
        testbed: cluster.Testbed) -> None:
    name = "sunk-gang-short"
    running = start_scheduler(testbed, name=name, extra=["--gang-incomplete-timeout=3s"])
    try:
        names = [f"s{i}" for i in range(SIZE - 1)]
        for pod in names:
            await create(kube, member(pod, namespace, name, "short"))

        async def told() -> list[str] | None:
            messages = [e["message"] for pod in names
                        for e in await events_for(kube, namespace, pod)
                        if e["reason"] == "GangIncomplete"]
            return messages if len(messages) >= len(names) else None

        messages = await eventually(told, within=30)
        assert f"has {SIZE - 1} of {SIZE} members" in messages[0]
        assert not await jobs_named(slurm, f"gang:{namespace}/label:short")
        await assert_none_bound_for(kube, namespace, names, 2)
        for pod in names:  # still there: an incomplete gang is not deleted
            assert await get_pod(kube, namespace, pod) is not None
    finally:
        running.stop()


async def test_a_prolog_failing_on_one_node_has_the_held_job_replaced_and_the_gang_bound_elsewhere(
        kube: Client, slurm: httpx.AsyncClient, namespace: str, scheduler: RunningScheduler,
        testbed: cluster.Testbed) -> None:
    """The first block is busy, so the gang's job goes to the second, where one node's prolog
    fails (a Pod there may not be evicted): Slurm drains that node and holds the job. sunk
    cancels the held job and submits another, which runs in the first block once it is free."""
    assert len(testbed.nodes) >= 2 * SIZE, "the bed needs two blocks of 4 nodes"
    await quiet(slurm, testbed)
    first, second = testbed.nodes[:SIZE], testbed.nodes[SIZE:2 * SIZE]
    failing = second[0]
    await precious_pod(kube, namespace, failing)
    blocker = block(testbed, first)
    job_name = f"gang:{namespace}/label:held"
    names = [f"h{i}" for i in range(SIZE)]
    try:
        for pod in names:
            await create(kube, member(pod, namespace, scheduler.name, "held"))
        (held,) = await eventually(lambda: live_jobs(slurm, job_name), within=30)

        async def replaced() -> list[dict[str, Any]] | None:
            jobs = await live_jobs(slurm, job_name)
            return jobs if jobs and jobs[0]["job_id"] != held["job_id"] else None

        try:
            await eventually(replaced, within=cluster.LOCK_TIMEOUT + 60)
        except TimeoutError:
            # Seen twice in CI, never alone: say what Slurm and the Pods were doing.
            pods = [(p or {}).get("spec", {}).get("nodeName") for p in
                    await pods_of(kube, namespace, names)]
            raise AssertionError(
                f"job {held['job_id']} not replaced; members' nodes {pods}; failing node "
                f"{failing.slurm_name}\n"
                + testbed.slurm("scontrol", "show", "job", str(held["job_id"]))
                + testbed.slurm("squeue", "-o", "%i %j %T %r %N")
                + testbed.slurm("sinfo", "-N", "-o", "%N %T %E")) from None
        assert held["job_id"] not in [j["job_id"] for j in await live_jobs(slurm, job_name)]
        reasons = {e["reason"] for e in await events_for(kube, namespace, names[0])}
        assert "GangJobReplaced" in reasons
        testbed.slurm("scancel", blocker)
        pods = await wait_all_bound(kube, namespace, names)
        await assert_ranked(testbed, slurm, pods, job_name)
        assert {p["spec"]["nodeName"] for p in pods} == {n.k8s_name for n in first}
    finally:
        testbed.slurm("scancel", blocker)
        testbed.slurm("scontrol", "update", f"nodename={failing.slurm_name}", "state=resume")


async def test_a_gang_lands_inside_one_topology_block(
        kube: Client, slurm: httpx.AsyncClient, namespace: str, scheduler: RunningScheduler,
        testbed: cluster.Testbed) -> None:
    """Blocks of 4 nodes (topology/block, from the Nodes' block label): with one node of the
    second block busy, a gang of 4 takes the whole first block, not 3 + 1 across both."""
    assert len(testbed.nodes) >= 2 * SIZE, "the bed needs two blocks of 4 nodes"
    await quiet(slurm, testbed)
    first, second = testbed.nodes[:SIZE], testbed.nodes[SIZE:2 * SIZE]
    blocker = block(testbed, second[:1])
    names = [f"b{i}" for i in range(SIZE)]
    try:
        for pod in names:
            await create(kube, member(pod, namespace, scheduler.name, "block",
                                      **{f"{PREFIX}segment": str(SIZE)}))
        pods = await wait_all_bound(kube, namespace, names)
        await assert_ranked(testbed, slurm, pods, f"gang:{namespace}/label:block")
        assert {p["spec"]["nodeName"] for p in pods} == {n.k8s_name for n in first}
    finally:
        testbed.slurm("scancel", blocker)
    # The segment reaches Slurm: 4 nodes in segments of 3 is a topology Slurm cannot give.
    for i in range(SIZE):
        await create(kube, member(f"s{i}", namespace, scheduler.name, "segments",
                                  **{f"{PREFIX}segment": "3"}))

    async def refused() -> list[str] | None:
        messages = [e["message"] for e in await events_for(kube, namespace, "s0")
                    if e["reason"] == "SlurmRefused"]
        return messages or None

    assert "topology" in (await eventually(refused, within=30))[0]


def test_the_topology_file_written_from_the_live_node_labels_is_the_one_slurm_runs_with(
        testbed: cluster.Testbed, tmp_path: Path) -> None:
    """sunk's topology command, pointed at the bed, writes the topology.conf the bed started
    Slurm with (from the block label the bed put on its Nodes)."""
    out = tmp_path / "topology.conf"
    done = subprocess.run(
        [sys.executable, "-m", "sunk.writetopology", f"--kubeconfig={testbed.kubeconfig}",
         f"--slurmd-namespace={SLURM_NAMESPACE}", f"--output={out}"],
        capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    running = Path(testbed.chroot, "run/slurm/etc/topology.conf").read_text()

    def parsed(text: str) -> set[tuple[str, frozenset[str]]]:
        """Each line's name and nodes (the order of nodes in a block does not matter)."""
        lines = [dict(f.split("=", 1) for f in line.split()) for line in text.splitlines()]
        return {(next(iter(d.items()))[0] + "=" + next(iter(d.values())),
                 frozenset(d.get("Nodes", "").split(","))) for d in lines}

    assert parsed(out.read_text()) == parsed(running)
    assert running.count("BlockName=") == len(testbed.nodes) // SIZE
