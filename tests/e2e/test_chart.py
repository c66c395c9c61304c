"""The Helm chart on the test bed: ``helm install`` into the real API server, then the scheduler
run as the chart's Deployment would run it (its arguments, its ServiceAccount's token against the
real RBAC), two replicas electing a leader.

The test bed has no kubelet that could run the Deployment, so its two replicas run here as
processes, with the Deployment's own arguments (bind addresses and the mounted token files
rewritten to local ones), each with ``POD_NAME`` naming a stand-in Pod object. The leader
serves the hook API on the port the test bed's Slurm scripts call.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from sunk.kube import Client, connect
from testbed import cluster, pki, procs
from testbed.scheduler import GPU_TYPES, REPO
from testbed.topology import SLURM_NAMESPACE
from tests.e2e.helpers import (
    call_api,
    call_json,
    close_api,
    create,
    events_for,
    eventually,
    get_pod,
    helm,
    pod_manifest,
    remove_namespace,
    wait_bound,
)

CHART = REPO / "charts" / "sunk"
RELEASE = "sunk"
JOB_ID = "sunk.coreweave.com/job-id"
REJECTED = "sunk.coreweave.com/rejected"
LEADER = "sunk.coreweave.com/leader"
#: Short lease timings, so a hand-over takes seconds here (the chart's defaults are 15/10/2 s).
LEASE = {"leaseDuration": "5s", "renewDeadline": "3s", "retryPeriod": "1s"}
DENY_LABEL = "sunk-test/deny"
DENY_POLICY = f"""\
apiVersion: sunk.coreweave.com/v1alpha1
kind: SchedulingPolicy
metadata:
  name: deny-labelled
spec:
  validations:
    - expression: "!has(object.metadata.labels) || !('{DENY_LABEL}' in object.metadata.labels)"
      reason: DeniedByChartTest
      message: this Pod carries {DENY_LABEL}
"""


@dataclass
class Replica:
    """One replica of the chart's Deployment, run as a local process."""

    pod: str
    process: subprocess.Popen[bytes]
    log: Path
    health: int

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.alive():
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@dataclass
class Release:
    namespace: str
    watched: tuple[str, str]
    unwatched: str
    scheduler: str
    args: list[str]
    kubeconfig: Path
    secrets: dict[str, Path]
    workdir: Path
    replicas: dict[str, Replica] = field(default_factory=dict)
    logs: list[Path] = field(default_factory=list)

    def start(self, pod: str, testbed: cluster.Testbed) -> Replica:
        """Start the replica standing for Pod ``pod`` (a restart gets a new process)."""
        health, metrics, dashboard = procs.free_ports(3)
        local = {"--health-probe-bind-address": f"127.0.0.1:{health}",
                 "--metrics-bind-address": f"127.0.0.1:{metrics}",
                 "--dashboard-bind-address": f"127.0.0.1:{dashboard}",
                 "--hooks-api-bind-address": f"127.0.0.1:{testbed.ports['hooks']}",
                 "--hooks-token-file": str(self.secrets["hooks"]),
                 "--slurm-auth-token-file": str(self.secrets["slurm"])}
        args = [f"{flag}={local[flag]}" if (flag := a.split("=", 1)[0]) in local else a
                for a in self.args]
        log = self.workdir / f"{pod}-{len(self.logs)}.log"
        self.logs.append(log)
        env = {**os.environ, "POD_NAME": pod, "POD_NAMESPACE": self.namespace}
        with log.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "sunk", *args, f"--kubeconfig={self.kubeconfig}",
                 "--slurm-poll-interval=0.5s"],
                stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env=env)
        replica = Replica(pod, process, log, health)
        self.replicas[pod] = replica
        return replica


async def wait_ready(replica: Replica, within: float = 60) -> str:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        assert replica.alive(), replica.log.read_text()[-3000:]
        try:
            async with httpx.AsyncClient() as client:
                r = await client.get(f"http://127.0.0.1:{replica.health}/readyz", timeout=1)
            if r.status_code == 200:
                return r.text
        except httpx.HTTPError:
            pass
        await asyncio.sleep(0.2)
    raise AssertionError(f"{replica.pod} not ready in {within}s:\n"
                         + replica.log.read_text()[-3000:])


async def lease_holder(kube: Client, namespace: str) -> str:
    lease = await call_json(kube, "GET", f"leases/{RELEASE}", namespace=namespace,
                       version="coordination.k8s.io/v1")
    return str(lease["spec"].get("holderIdentity") or "")


async def leader_pod(kube: Client, namespace: str) -> str:
    """The stand-in Pod whose replica holds the Lease (identities are <pod>_<random>)."""
    return (await lease_holder(kube, namespace)).rpartition("_")[0]


async def labelled_leaders(kube: Client, namespace: str) -> list[str]:
    body = await call_json(kube, "GET", "pods", namespace=namespace,
                      params={"labelSelector": f"{LEADER}=true"})
    return sorted(p["metadata"]["name"] for p in body["items"])


async def make_namespace(kube: Client, name: str) -> None:
    await call_json(kube, "POST", "namespaces",
               json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


async def our_jobs(slurm: httpx.AsyncClient, namespaces: tuple[str, ...]) -> list[dict[str, Any]]:
    """Every job (any state) of a Pod in ``namespaces``."""
    jobs: list[dict[str, Any]] = (await slurm.get("/slurm/v0.0.42/jobs/")).json()["jobs"]
    return [j for j in jobs if any(j["name"].startswith(f"pod:{ns}/") for ns in namespaces)]


@pytest.fixture(scope="module")
async def release(testbed: cluster.Testbed, kube: Client, slurm: httpx.AsyncClient,
                  tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Release]:
    if not procs.port_free(testbed.ports["hooks"]):
        pytest.fail("another scheduler serves the test bed's hook port; run test_chart.py "
                    "before the session's scheduler starts (conftest runs it first) or on its own")
    tag = secrets.token_hex(3)
    namespace, watched, unwatched = (f"sunk-{tag}", (f"t-{tag}-a", f"t-{tag}-b"),
                                     f"t-{tag}-u")
    workdir = tmp_path_factory.mktemp("chart")
    for ns in (namespace, *watched, unwatched):
        await make_namespace(kube, ns)
    values = {
        "scheduler": {"scope": {"type": "namespace", "namespaces": ",".join(watched)},
                      "replicas": 2, "leaderElection": LEASE,
                      "slurmd": {"namespace": SLURM_NAMESPACE},
                      "gpuTypes": dict(pair.split("=") for pair in GPU_TYPES.split(",")),
                      "hooks": {"token": testbed.hook_token}},
        "slurm": {"apiBase": testbed.slurmrestd_url, "killWait": testbed.kill_wait,
                  "auth": {"token": testbed.slurm_token}},
    }
    (workdir / "values.json").write_text(json.dumps(values))
    installed = False
    rel: Release | None = None
    try:
        helm(testbed, workdir, "install", RELEASE, str(CHART), "--namespace", namespace,
             "--values", str(workdir / "values.json"))
        installed = True
        deployment = await call_json(kube, "GET", f"deployments/{RELEASE}", namespace=namespace,
                                version="apps/v1")
        pod_spec = deployment["spec"]["template"]["spec"]
        # What the kubelet would mount: the Secrets' keys as files.
        files: dict[str, Path] = {}
        for volume in pod_spec["volumes"]:
            if "secret" not in volume:
                continue
            secret = await call_json(kube, "GET", f"secrets/{volume['secret']['secretName']}",
                                namespace=namespace)
            key = volume["secret"]["items"][0]["key"]
            path = workdir / f"{volume['name']}.token"
            path.write_bytes(base64.b64decode(secret["data"][key]))
            files[volume["name"].removesuffix("-token")] = path
        # The Deployment's ServiceAccount, and a token for it, as a Pod would get it.
        account = pod_spec["serviceAccountName"]
        minted = await call_json(kube, "POST", f"serviceaccounts/{account}/token",
                            namespace=namespace,
                            json={"apiVersion": "authentication.k8s.io/v1",
                                  "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}})
        kubeconfig = workdir / "serviceaccount.kubeconfig"
        kubeconfig.write_text(pki.kubeconfig(testbed.apiserver_url, testbed.pki,
                                             user=f"system:serviceaccount:{namespace}:{account}",
                                             token=minted["status"]["token"]))
        container = pod_spec["containers"][0]
        scheduler = next(a.split("=", 1)[1] for a in container["args"]
                         if a.startswith("--scheduler-name="))
        for pod in ("sunk-0", "sunk-1"):  # stand-ins for the Deployment's Pods
            await create(kube, {"apiVersion": "v1", "kind": "Pod",
                                "metadata": {"name": pod, "namespace": namespace,
                                             "labels": {"app.kubernetes.io/name":
                                                        "sunk-scheduler"}},
                                "spec": {"schedulerName": "nobody",
                                         "containers": [{"name": "c", "image": "sunk"}]}})
        rel = Release(namespace, watched, unwatched, scheduler, list(container["args"]),
                      kubeconfig, files, workdir)
        first = rel.start("sunk-0", testbed)
        await wait_ready(first)
        second = rel.start("sunk-1", testbed)
        await wait_ready(second)
        yield rel
    finally:
        if rel is not None:
            await _clean_up(rel, kube, slurm)
        if installed:
            helm(testbed, workdir, "uninstall", RELEASE, "--namespace", namespace)
        for ns in (namespace, *watched, unwatched):
            await remove_namespace(kube, ns)


async def _clean_up(rel: Release, kube: Client, slurm: httpx.AsyncClient) -> None:
    """Delete the test's Pods while the leader still runs (it cancels their jobs and answers
    the placeholder jobs' hook calls), wait until Slurm and the Nodes are clear, then stop."""
    try:
        if any(r.alive() for r in rel.replicas.values()):
            for ns in (*rel.watched, rel.unwatched):
                await call_json(kube, "DELETE", "pods", namespace=ns,
                           params={"gracePeriodSeconds": "0"})

            async def settled() -> bool:
                jobs = await our_jobs(slurm, rel.watched)
                if any(set(j["job_state"]) & {"PENDING", "RUNNING", "COMPLETING"}
                       for j in jobs):
                    return False
                nodes = (await call_json(kube, "GET", "nodes"))["items"]
                return not any(t["key"] == "sunk.coreweave.com/lock"
                               for n in nodes for t in n["spec"].get("taints") or [])

            await eventually(settled, within=60)
    finally:
        for replica in rel.replicas.values():
            replica.stop()


# -- the tests, in order: they share one installed release ----------------------------------------


async def test_two_replicas_of_the_installed_chart_elect_one_leader(
        release: Release, kube: Client) -> None:
    leader = await leader_pod(kube, release.namespace)
    assert leader in ("sunk-0", "sunk-1")
    assert release.scheduler == f"{release.namespace}-{RELEASE}"
    standby = next(r for pod, r in release.replicas.items() if pod != leader)
    assert await wait_ready(standby) == (
        f"standby: {await lease_holder(kube, release.namespace)} leads")

    async def labelled() -> bool:
        return await labelled_leaders(kube, release.namespace) == [leader]

    await eventually(labelled, within=10)


async def test_a_pod_in_a_watched_namespace_is_scheduled_and_one_elsewhere_is_ignored(
        release: Release, kube: Client, slurm: httpx.AsyncClient) -> None:
    for ns in (*release.watched, release.unwatched):
        await create(kube, pod_manifest("p", ns, release.scheduler))
    for ns in release.watched:
        pod = await wait_bound(kube, ns, "p", within=60)
        assert JOB_ID in pod["metadata"]["annotations"]
    await asyncio.sleep(2)  # time enough to have been seen, were it watched
    ignored = await get_pod(kube, release.unwatched, "p")
    assert ignored is not None and not ignored["spec"].get("nodeName")
    assert JOB_ID not in (ignored["metadata"].get("annotations") or {})
    assert not await our_jobs(slurm, (release.unwatched,))


async def test_editing_the_policies_configmap_changes_behaviour_without_a_restart(
        release: Release, kube: Client) -> None:
    ns = release.watched[0]
    pids = {pod: r.process.pid for pod, r in release.replicas.items()}
    url = f"configmaps/{RELEASE}-policies"
    merge = {"Content-Type": "application/merge-patch+json"}
    await call_json(kube, "PATCH", url, namespace=release.namespace, headers=merge,
               json={"data": {"50-deny-labelled.yaml": DENY_POLICY}})
    await asyncio.sleep(1)  # the watch delivers the edit at once; reloading is quick
    denied = pod_manifest("denied", ns, release.scheduler)
    denied["metadata"]["labels"] = {DENY_LABEL: "yes"}
    await create(kube, denied)

    async def rejected() -> str | None:
        pod = await get_pod(kube, ns, "denied")
        return ((pod or {}).get("metadata", {}).get("annotations") or {}).get(REJECTED)

    assert await eventually(rejected, within=30) == "DeniedByChartTest"
    async def denied_event() -> bool:  # Events are posted off the hot path, just after
        return "DeniedByChartTest" in {e["reason"] for e in await events_for(kube, ns, "denied")}

    await eventually(denied_event, within=10)
    # And back: the edit that removes the policy lets the same kind of Pod through.
    await call_json(kube, "PATCH", url, namespace=release.namespace, headers=merge,
               json={"data": {"50-deny-labelled.yaml": None}})
    await asyncio.sleep(1)
    allowed = pod_manifest("allowed", ns, release.scheduler)
    allowed["metadata"]["labels"] = {DENY_LABEL: "yes"}
    await create(kube, allowed)
    await wait_bound(kube, ns, "allowed", within=60)
    assert {pod: r.process.pid for pod, r in release.replicas.items()} == pids
    assert all(r.alive() for r in release.replicas.values())


FROZEN_LABEL = "sunk-test/frozen"
FROZEN_POLICY = f"""\
apiVersion: sunk.coreweave.com/v1alpha1
kind: SchedulingPolicy
metadata:
  name: frozen-namespace
spec:
  validations:
    - expression: >-
        namespaceObject == null || !has(namespaceObject.metadata.labels)
        || !('{FROZEN_LABEL}' in namespaceObject.metadata.labels)
      reason: NamespaceFrozen
      messageExpression: "'namespace ' + namespaceObject.metadata.name + ' is frozen'"
"""


async def test_policies_see_the_pods_namespace(release: Release, kube: Client) -> None:
    """namespaceObject is the Pod's Namespace as the API server has it (the chart grants
    reading Namespaces): a label on the Namespace, not on the Pod, decides."""
    ns = release.watched[1]
    url = f"configmaps/{RELEASE}-policies"
    merge = {"Content-Type": "application/merge-patch+json"}
    await call_json(kube, "PATCH", url, namespace=release.namespace, headers=merge,
               json={"data": {"50-frozen.yaml": FROZEN_POLICY}})
    await call_json(kube, "PATCH", f"namespaces/{ns}", headers=merge,
               json={"metadata": {"labels": {FROZEN_LABEL: "yes"}}})
    try:
        await asyncio.sleep(1)  # the policy and the Namespace's label reach the caches
        await create(kube, pod_manifest("frozen", ns, release.scheduler))

        async def rejected() -> str | None:
            pod = await get_pod(kube, ns, "frozen")
            return ((pod or {}).get("metadata", {}).get("annotations") or {}).get(REJECTED)

        assert await eventually(rejected, within=30) == "NamespaceFrozen"
        await call_json(kube, "PATCH", f"namespaces/{ns}", headers=merge,
                   json={"metadata": {"labels": {FROZEN_LABEL: None}}})
        await asyncio.sleep(1)
        await create(kube, pod_manifest("thawed", ns, release.scheduler))
        await wait_bound(kube, ns, "thawed", within=60)
    finally:
        await call_json(kube, "PATCH", url, namespace=release.namespace, headers=merge,
                   json={"data": {"50-frozen.yaml": None}})


async def test_killing_the_leader_hands_over_and_every_pod_gets_exactly_one_job(
        release: Release, kube: Client, slurm: httpx.AsyncClient,
        testbed: cluster.Testbed) -> None:
    old = await leader_pod(kube, release.namespace)
    new = next(pod for pod in release.replicas if pod != old)
    first, second = release.watched
    for i in range(4):
        await create(kube, pod_manifest(f"before-{i}", first, release.scheduler))

    async def submitting() -> bool:
        pods = [await get_pod(kube, first, f"before-{i}") for i in range(4)]
        return any(JOB_ID in ((p or {}).get("metadata", {}).get("annotations") or {})
                   for p in pods)

    await eventually(submitting, within=30)
    release.replicas[old].stop(signal.SIGKILL)  # mid-run: submissions and bindings under way
    killed = time.monotonic()
    for i in range(4):  # and more Pods while nobody leads
        await create(kube, pod_manifest(f"during-{i}", second, release.scheduler))

    async def taken_over() -> bool:
        return await leader_pod(kube, release.namespace) == new

    await eventually(taken_over, within=20)
    handover = time.monotonic() - killed
    assert handover < 5 + 1 + 3  # the lease duration, a retry, and slack for 2 busy cores
    names = [(first, f"before-{i}") for i in range(4)] + [(second, f"during-{i}")
                                                        for i in range(4)]
    bound = [await wait_bound(kube, ns, name, within=90) for ns, name in names]
    await asyncio.sleep(2)  # time for a second submission, if there were to be one
    jobs = await our_jobs(slurm, release.watched)
    by_name: dict[str, list[int]] = {}
    for job in jobs:
        by_name.setdefault(job["name"], []).append(job["job_id"])
    for (ns, name), pod in zip(names, bound, strict=True):
        assert by_name.get(f"pod:{ns}/{name}") == [int(pod["metadata"]["annotations"][JOB_ID])]

    async def relabelled() -> bool:
        # The killed replica's Pod keeps its stale label until it restarts (and drops it).
        return new in await labelled_leaders(kube, release.namespace)

    await eventually(relabelled, within=10)

    # A restart rejoins as a standby and drops the stale label; a graceful stop of the leader
    # releases the Lease, and the standby takes over within a retry period.
    restarted = release.start(old, testbed)
    assert (await wait_ready(restarted)).startswith("standby:")
    assert await labelled_leaders(kube, release.namespace) == [new]
    release.replicas[new].stop()
    stopped = time.monotonic()

    async def back() -> bool:
        return await leader_pod(kube, release.namespace) == old

    await eventually(back, within=10)
    assert time.monotonic() - stopped < 5  # well under the 5 s lease: it was released
    await wait_ready(restarted)

    async def moved() -> bool:
        return await labelled_leaders(kube, release.namespace) == [old]

    await eventually(moved, within=10)


async def test_no_api_call_was_refused_for_lack_of_permission(release: Release) -> None:
    # A status code as a word on its own (not the milliseconds of a timestamp, ",401").
    refused = re.compile(r"(?<![,.\d])\b(403|401)\b|forbidden|unauthorized", re.IGNORECASE)
    problems = [f"{log.name}: {line}" for log in release.logs
                for line in log.read_text(errors="replace").splitlines() if refused.search(line)]
    assert not problems, "\n".join(problems)
    assert all(log.stat().st_size > 0 for log in release.logs)


async def test_the_service_account_may_do_no_more(release: Release) -> None:
    """The token the replicas ran with really is the chart's, and really is limited."""
    api = await connect(release.kubeconfig)
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "x"},
               "target": {"apiVersion": "v1", "kind": "Node", "name": "kwok-node-000"}}
    try:
        for method, url, namespace, body in (
                ("GET", "secrets", release.namespace, None),
                ("POST", "pods/x/binding", release.unwatched, binding),
                ("DELETE", "pods/x", release.unwatched, None),
                ("GET", "configmaps", release.namespace, None)):
            async with call_api(api, method, url=url, namespace=namespace, json=body,
                                raise_for_status=False) as r:
                assert r.status_code == 403, (method, url, namespace, r.text)
        async with call_api(api, "GET", url=f"configmaps/{RELEASE}-policies",
                            namespace=release.namespace) as r:
            assert r.status_code == 200
    finally:
        await close_api(api)


async def test_the_installed_admission_policy_refuses_everyone_but_the_scheduler(
        release: Release, kube: Client) -> None:
    """helm install made the policy and its binding: the replicas wrote job ids and the leader
    label through it (the tests above, and no 403 in their logs); the admin may not."""
    account = f"system:serviceaccount:{release.namespace}:{RELEASE}"
    copied = "remove it from the Pod (copied from another Pod?)"

    async def attempt(namespace: str, notes: dict[str, str],
                      labels: dict[str, str]) -> tuple[int, str]:
        manifest = pod_manifest("copied", namespace, "nobody", annotations=notes)
        manifest["metadata"]["labels"] = labels
        async with call_api(kube, "POST", namespace=namespace, url="pods", json=manifest,
                            raise_for_status=False) as r:
            return r.status_code, str(r.json().get("message", ""))

    for namespace, notes, labels, key in (
            (release.watched[1], {JOB_ID: "1"}, {}, JOB_ID),
            (release.namespace, {}, {LEADER: "true"}, LEADER),
            (SLURM_NAMESPACE, {"sunk.coreweave.com/lock": "locked"}, {},
             "sunk.coreweave.com/lock")):
        code, message = await attempt(namespace, notes, labels)
        assert code == 403, message
        assert message.endswith(f"{key} is written only by the scheduler ({account}); {copied}")
    code, message = await attempt(release.unwatched, {JOB_ID: "1"}, {LEADER: "true"})
    assert code == 201, message  # outside the binding
