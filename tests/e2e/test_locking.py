"""Node locking: a Slurm job starts only on a Node cleared of Kubernetes work."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx

from sunk.kube import Client
from testbed import cluster
from testbed.topology import SLURM_NAMESPACE, TestbedNode
from tests.e2e.conftest import RunningScheduler
from tests.e2e.helpers import call_api, create, eventually, get_pod, pod_manifest, quiet, wait_bound

LOCK = "sunk.coreweave.com/lock"


async def slurmd_pod(kube: Client, node: TestbedNode) -> dict[str, Any]:
    pod = await get_pod(kube, SLURM_NAMESPACE, node.slurmd_pod)
    assert pod is not None
    return pod


async def lock_state(kube: Client, node: TestbedNode) -> str:
    pod = await slurmd_pod(kube, node)
    return str(pod["metadata"].get("annotations", {}).get(LOCK, "false"))


async def node_taints(kube: Client, node: TestbedNode) -> list[str]:
    async with call_api(kube, "GET", url=f"nodes/{node.k8s_name}") as r:
        return [t["key"] for t in r.json()["spec"].get("taints") or []]


def logged_at(log: Path, text: str, offset: int = 0) -> float | None:
    """When the scheduler's log first says ``text`` past byte ``offset`` (epoch seconds; its
    lines carry local time to the millisecond), or None."""
    with log.open("rb") as f:
        f.seek(offset)
        lines = f.read().decode(errors="replace").splitlines()
    for line in lines:
        if text in line:
            stamp, millis = line[:23].split(",")
            return time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S")) + int(millis) / 1000
    return None


class LockWatcher:
    """Records every lock state a node's slurmd Pod goes through, with the time it was seen.
    A watch, not polling: a state may last only milliseconds and must still be seen."""

    def __init__(self, kube: Client, node: TestbedNode) -> None:
        self.kube, self.node = kube, node
        self.seen: list[tuple[float, str]] = []
        self.watching = asyncio.Event()
        self._task = asyncio.create_task(self._run())

    def _saw(self, pod: dict[str, Any]) -> None:
        state = str(pod["metadata"].get("annotations", {}).get(LOCK, "false"))
        if not self.seen or self.seen[-1][1] != state:
            self.seen.append((time.time(), state))

    async def _run(self) -> None:
        """Watch until stopped, from the Pod as it is now (no resourceVersion: the watch opens
        with the Pod's current state; one from the Pod's own version is refused, 410 Gone,
        when that version is older than a restarted API server's watch cache). A watch the
        API server ends is opened again."""
        while True:
            params = {"watch": "true", "fieldSelector": f"metadata.name={self.node.slurmd_pod}"}
            async with self.kube.watch_lines("pods", namespace=SLURM_NAMESPACE,
                                             params=params) as lines:
                self.watching.set()
                async for line in lines:
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event.get("type") == "ERROR":
                        break
                    self._saw(event["object"])

    def states(self) -> list[str]:
        return [s for _, s in self.seen]

    def first(self, state: str) -> float:
        return next(t for t, s in self.seen if s == state)

    async def stop(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


def plain_pod(name: str, namespace: str, node: TestbedNode, **meta: Any) -> dict[str, Any]:
    """A Pod placed by hand (as the default scheduler would), that Slurm does not know of."""
    manifest = pod_manifest(name, namespace, "default-scheduler", grace=1,
                            nodeName=node.k8s_name)
    manifest["metadata"].update(meta)
    return manifest


async def precious_pod(kube: Client, namespace: str, node: TestbedNode) -> None:
    """A Pod on ``node`` that may not be evicted. No disruption controller runs here, so the
    API server refuses (429) every eviction of a running Pod that a PodDisruptionBudget
    selects, as a budget allowing no disruption does: a lock of that node never completes.
    Returns once kwok has the Pod running: the API server evicts a Pending Pod whatever its
    budget says, so a lock taken before that would clear the node after all."""

    async def unlocked() -> bool:  # else it is evicted at once, to finish an earlier lock
        found = await kube.request("GET", f"nodes/{node.k8s_name}")
        return not any(t["key"] == LOCK for t in found["spec"].get("taints") or [])

    await eventually(unlocked, within=30)
    await create(kube, plain_pod("precious", namespace, node, labels={"app": "precious"}))

    async def running() -> bool:
        pod = await get_pod(kube, namespace, "precious")
        status = (pod or {}).get("status") or {}
        ready = any(c["type"] == "Ready" and c["status"] == "True"
                    for c in status.get("conditions") or [])
        return status.get("phase") == "Running" and ready

    await eventually(running, within=30)
    pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
           "metadata": {"name": "precious", "namespace": namespace},
           "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "precious"}}}}
    async with call_api(kube, "POST", version="policy/v1", namespace=namespace,
                        url="poddisruptionbudgets", json=pdb):
        pass


def sbatch(testbed: cluster.Testbed, node: TestbedNode, script: str) -> str:
    return testbed.slurm("sbatch", "--parsable", f"--nodelist={node.slurm_name}",
                         "--chdir=/tmp", "--output=/dev/null", "--cpus-per-task=1",
                         f"--wrap={script}").strip()


async def job_state(slurm: httpx.AsyncClient, job_id: str) -> str:
    r = await slurm.get(f"/slurm/v0.0.42/job/{job_id}")
    return str(r.json()["jobs"][0]["job_state"][0])


async def test_a_slurm_job_starts_only_after_the_node_is_cleared_then_it_is_unlocked(
        kube: Client, slurm: httpx.AsyncClient, namespace: str,
        scheduler: RunningScheduler, testbed: cluster.Testbed) -> None:
    node = testbed.nodes[1]
    await quiet(slurm, testbed, [node.slurm_name])

    async def unlocked_at_start() -> bool:
        return await lock_state(kube, node) == "false"

    await eventually(unlocked_at_start, within=15)
    await create(kube, plain_pod("web", namespace, node))
    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet",
          "metadata": {"name": "logs", "namespace": namespace},
          "spec": {"selector": {"matchLabels": {"app": "logs"}}, "template": {
              "metadata": {"labels": {"app": "logs"}},
              "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}
    async with call_api(kube, "POST", version="apps/v1", namespace=namespace,
                        url="daemonsets", json=ds) as r:
        ds_uid = r.json()["metadata"]["uid"]
    await create(kube, plain_pod("logs-agent", namespace, node, ownerReferences=[{
        "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "logs", "uid": ds_uid,
        "controller": True}]))
    tolerant = plain_pod("tolerant", namespace, node)
    tolerant["spec"]["tolerations"] = [{"key": LOCK, "operator": "Exists"}]
    await create(kube, tolerant)

    async def all_running() -> bool:
        pods = [await get_pod(kube, namespace, n) for n in ("web", "logs-agent", "tolerant")]
        return all(p and p["status"].get("phase") == "Running" for p in pods)

    await eventually(all_running)
    watcher = LockWatcher(kube, node)
    await asyncio.wait_for(watcher.watching.wait(), 10)
    logged = scheduler.log.stat().st_size
    try:
        marker = f"/tmp/sunk-lock-test-{namespace}"
        job_id = sbatch(testbed, node, f"date +%s.%N > {marker}; sleep 3")

        async def script_started() -> float | None:
            try:
                return float(Path(f"{testbed.chroot}{marker}").read_text())
            except (OSError, ValueError):
                return None

        started = await eventually(script_started, within=30)
        web = await get_pod(kube, namespace, "web")
        # A normal lock answers once the eviction is accepted (docs: normal vs strict locks).
        assert web is None or web["metadata"].get("deletionTimestamp"), "not evicted"

        async def seen_locked() -> bool:  # the watch may bring a write a moment after it
            return "locked" in watcher.states()

        await eventually(seen_locked, within=10)
        assert watcher.states()[:3] == ["false", "pending", "locked"], watcher.seen
        # when the scheduler had written "locked" (it logs once the API server took it)
        locked = logged_at(scheduler.log, f"({node.slurm_name}): lock pending -> locked", logged)
        assert locked is not None and locked <= started + 0.05, (
            f"the script started at {started:.3f}, before the lock ({locked})")
        assert LOCK in await node_taints(kube, node)
        for stays in ("logs-agent", "tolerant"):
            pod = await get_pod(kube, namespace, stays)
            assert pod is not None and not pod["metadata"].get("deletionTimestamp"), stays

        async def finished() -> bool:
            return await job_state(slurm, job_id) == "COMPLETED"

        await eventually(finished, within=30)

        async def unlocked() -> bool:
            return (await lock_state(kube, node) == "false"
                    and LOCK not in await node_taints(kube, node))

        await eventually(unlocked, within=30)
        for stays in ("logs-agent", "tolerant"):
            assert await get_pod(kube, namespace, stays) is not None, stays
    finally:
        await watcher.stop()


async def test_a_placeholder_job_takes_a_strict_lock(
        kube: Client, namespace: str, scheduler: RunningScheduler,
        testbed: cluster.Testbed) -> None:
    node = testbed.nodes[2]
    await create(kube, pod_manifest("served", namespace, scheduler.name, annotations={
        "sunk.coreweave.com/required-nodes": node.slurm_name}))
    await wait_bound(kube, namespace, "served")
    assert await lock_state(kube, node) == "locked_strict"
    assert LOCK in await node_taints(kube, node)


async def test_a_pod_that_may_not_be_evicted_fails_the_prolog_and_drains_the_node(
        kube: Client, slurm: httpx.AsyncClient, namespace: str,
        scheduler: RunningScheduler, testbed: cluster.Testbed) -> None:
    """No disruption controller runs here, so the API server refuses (429) every eviction of
    a Pod that a PodDisruptionBudget selects, as a budget allowing no disruption does."""
    node = testbed.nodes[3]
    await precious_pod(kube, namespace, node)
    job_id = sbatch(testbed, node, "sleep 30")
    try:
        async def drained_on_kubernetes_side() -> dict[str, str] | None:
            annotations: dict[str, str] = (await slurmd_pod(kube, node))["metadata"].get(
                "annotations", {})
            return annotations if annotations.get("sunk.coreweave.com/slurm-state") else None

        shown = await eventually(drained_on_kubernetes_side, within=cluster.LOCK_TIMEOUT + 30)
        assert shown["sunk.coreweave.com/slurm-state"] == "drain"
        assert "rolog" in shown["sunk.coreweave.com/slurm-reason"]  # Slurm: "Prolog error"
        assert await get_pod(kube, namespace, "precious") is not None
        async with call_api(kube, "GET", url=f"nodes/{node.k8s_name}") as r:
            on_node = r.json()["metadata"]["annotations"]
        assert on_node["sunk.coreweave.com/slurm-state"] == "drain"
        async with call_api(kube, "GET", namespace=namespace, url="events", params={
                "fieldSelector": "involvedObject.name=precious"}) as r:
            reasons = {e["reason"] for e in r.json()["items"]}
        assert "EvictionRefused" in reasons
    finally:
        testbed.slurm("scancel", job_id)
        testbed.slurm("scontrol", "update", f"nodename={node.slurm_name}", "state=resume")


async def test_a_placeholder_held_after_its_prolog_failed_is_replaced_and_its_pod_bound_elsewhere(
        kube: Client, slurm: httpx.AsyncClient, namespace: str,
        scheduler: RunningScheduler, testbed: cluster.Testbed) -> None:
    """Slurm drains a node whose prolog failed and requeues the job held: nothing would ever
    release it. The Pod gets a new job, which runs on another node, and the held one goes."""
    await quiet(slurm, testbed)
    failing, other = testbed.nodes[2], testbed.nodes[0]
    await precious_pod(kube, namespace, failing)
    # The other node is busy, so Slurm's first choice is the node whose prolog will fail.
    busy = testbed.slurm("sbatch", "--parsable", f"--nodelist={other.slurm_name}",
                         "--exclusive", "--chdir=/tmp", "--output=/dev/null",
                         "--wrap=sleep 300").strip()
    try:
        affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{
                "key": "kubernetes.io/hostname", "operator": "In",
                "values": [failing.k8s_name, other.k8s_name]}]}]}}}
        await create(kube, pod_manifest("retried", namespace, scheduler.name,
                                        affinity=affinity))

        async def first_job() -> str | None:
            pod = await get_pod(kube, namespace, "retried")
            return ((pod or {}).get("metadata", {}).get("annotations") or {}).get(
                "sunk.coreweave.com/job-id")

        held = await eventually(first_job, within=30)

        async def replaced() -> str | None:
            now = await first_job()
            return now if now and now != held else None

        await eventually(replaced, within=cluster.LOCK_TIMEOUT + 60)
        assert await job_state(slurm, held) in ("CANCELLED", "COMPLETED"), (
            "the held job does not linger")
        async with call_api(kube, "GET", namespace=namespace, url="events", params={
                "fieldSelector": "involvedObject.name=retried"}) as r:
            lost = [e["message"] for e in r.json()["items"] if e["reason"] == "SlurmJobLost"]
        assert lost and "held by Slurm after its launch failed" in lost[0]
        testbed.slurm("scancel", busy)
        pod = await wait_bound(kube, namespace, "retried", within=60)
        assert pod["spec"]["nodeName"] == other.k8s_name
    finally:
        testbed.slurm("scancel", busy)
        testbed.slurm("scontrol", "update", f"nodename={failing.slurm_name}", "state=resume")


async def test_cordon_drains_the_slurm_node_and_uncordon_lifts_only_that_drain(
        slurm: httpx.AsyncClient, scheduler: RunningScheduler,
        testbed: cluster.Testbed) -> None:
    node, admin_node = testbed.nodes[0], testbed.nodes[1]

    async def slurm_node(name: str) -> dict[str, Any]:
        r = await slurm.get(f"/slurm/v0.0.42/node/{name}")
        info: dict[str, Any] = r.json()["nodes"][0]
        return info

    testbed.slurm("scontrol", "update", f"nodename={admin_node.slurm_name}", "state=drain",
                  "reason=admin: disk check")
    try:
        testbed.kubectl("cordon", node.k8s_name)

        async def drained() -> dict[str, Any] | None:
            info = await slurm_node(node.slurm_name)
            return info if "DRAIN" in info["state"] else None

        info = await eventually(drained, within=15)
        assert info["reason"].startswith("k8s:")
        testbed.kubectl("uncordon", node.k8s_name)

        async def resumed() -> bool:
            return "DRAIN" not in (await slurm_node(node.slurm_name))["state"]

        await eventually(resumed, within=15)
        await asyncio.sleep(3)
        admin = await slurm_node(admin_node.slurm_name)
        assert "DRAIN" in admin["state"] and admin["reason"] == "admin: disk check"
    finally:
        testbed.kubectl("uncordon", node.k8s_name)
        testbed.slurm("scontrol", "update", f"nodename={admin_node.slurm_name}",
                      "state=resume")


async def test_the_prolog_is_refused_without_the_token(
        scheduler: RunningScheduler, testbed: cluster.Testbed) -> None:
    Path(f"{testbed.chroot}/tmp/wrong-hooks.env").write_text(
        f"SUNK_HOOK_URL={testbed.hook_url}\nSUNK_HOOK_TOKEN=wrong\nSUNK_LOCK_TIMEOUT=10\n")
    cmd = testbed.chroot_cmd("SLURM_JOB_ID=4242", f"SLURMD_NODENAME={testbed.nodes[0].slurm_name}",
                             "SUNK_HOOKS_ENV=/tmp/wrong-hooks.env", "/opt/sunk/scripts/prolog.sh")
    proc = await asyncio.create_subprocess_exec(*cmd, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(proc.communicate(), 20)
    assert proc.returncode == 1
    assert b"refused our token" in err and b"401" in err
    async with httpx.AsyncClient() as client:
        r = await client.post(f"{testbed.hook_url}/hooks/v1/nodes/h100-000/lock",
                              json={"job_id": 1})
    assert r.status_code == 401
