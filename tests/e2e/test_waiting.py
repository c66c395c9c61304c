"""A Pod whose job waits in Slurm's queue says why and until when, where Kubernetes users look:
its PodScheduled condition and nominated Node, end to end on the real bed."""

from __future__ import annotations

import functools
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from sunk.kube import Client
from testbed import cluster, errors, pki
from testbed.scheduler import start_scheduler
from tests.e2e.conftest import REPO, RunningScheduler
from tests.e2e.helpers import call_api, create, eventually, get_pod, pod_manifest, wait_bound
from tests.e2e.helpers import job as slurm_job

PREFIX = "sunk.coreweave.com/"
RESERVATION = "sunk-e2e-waiting"


def scheduled(pod: dict[str, Any] | None) -> dict[str, Any] | None:
    """The Pod's PodScheduled condition, if it has one."""
    conditions = ((pod or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == "PodScheduled"), None)


async def test_pods_waiting_in_slurm_say_why_and_until_when_and_are_then_scheduled(
        kube: Client, slurm: httpx.AsyncClient, namespace: str,
        scheduler: RunningScheduler, testbed: cluster.Testbed) -> None:
    """One Pod for each way a job waits: behind a busy node (Resources), behind a job of
    higher priority (Priority), for a reservation that begins in an hour (Reservation), over
    its QOS's per-user limit (QOS...), on a drained node (ReqNodeNotAvail). Each shows its
    reason within 5 s of its job's submission."""
    busy, reserved, held = (n.slurm_name for n in testbed.nodes[1:4])
    blocker = testbed.slurm("sbatch", "--parsable", f"--nodelist={busy}", "--exclusive",
                            "--time=10", "--chdir=/tmp", "--output=/dev/null",
                            "--wrap=sleep 600").strip()
    testbed.slurm("scontrol", "update", f"nodename={held}", "state=drain", "reason=e2e-held")
    testbed.slurm("scontrol", "create", "reservation", f"ReservationName={RESERVATION}",
                  f"Nodes={reserved}", "StartTime=now+1hour", "Duration=10", "Users=root")
    testbed.slurm("sacctmgr", "-i", "modify", "qos", "where", "name=low", "set",
                  "MaxTRESPerUser=cpu=1")
    try:
        async def blocking() -> bool:
            return bool((await slurm_job(slurm, blocker))["job_state"] == ["RUNNING"])

        await eventually(blocking, within=60)
        # name -> its annotations, and Slurm's reason for its job (for a busy required node,
        # Slurm says Resources, Priority or ReqNodeNotAvail, as its backfill goes)
        waiting: dict[str, tuple[dict[str, str], str]] = {
            "resources": ({"required-nodes": busy, "priority": "1000"}, "Resources"),
            "priority": ({"required-nodes": busy, "priority": "10"}, "Priority"),
            "reservation": ({"reservation": RESERVATION}, "Reservation"),
            "held": ({"required-nodes": held}, "ReqNodeNotAvail"),
        }
        await create(kube, pod_manifest("qos-first", namespace, scheduler.name, cpu="1",
                                        annotations={f"{PREFIX}qos": "low"}))
        await wait_bound(kube, namespace, "qos-first")
        waiting["qos-second"] = ({"qos": "low"}, "QOSMax")
        for name, (annotations, _) in waiting.items():
            await create(kube, pod_manifest(name, namespace, scheduler.name, cpu="1", annotations={
                PREFIX + key: value for key, value in annotations.items()}))
        async def says(name: str, words: str) -> dict[str, Any] | None:
            condition = scheduled(await get_pod(kube, namespace, name))
            return condition if condition and words in condition.get("message", "") else None

        late = []
        for name in waiting:
            async def submitted(name: str = name) -> float | None:
                pod = await get_pod(kube, namespace, name)
                has_job = pod and f"{PREFIX}job-id" in pod["metadata"].get("annotations", {})
                return time.monotonic() if has_job else None

            since = await eventually(submitted)
            first = await eventually(functools.partial(says, name, " is pending ("), within=30)
            if time.monotonic() - since > 5:
                late.append(f"{name}: {time.monotonic() - since:.1f} s")
            assert (first["status"], first["reason"]) == ("False", "Pending"), first
            assert first["message"].startswith("Slurm job "), first
        async def says_as_slurm(name: str) -> str | None:
            """Slurm's reason for the Pod's job, once the Pod's condition says it."""
            pod = await get_pod(kube, namespace, name) or {}
            job = await slurm_job(slurm, pod["metadata"]["annotations"][f"{PREFIX}job-id"])
            said = await says(name, f"({job['state_reason']})")
            return str(job["state_reason"]) if said else None

        for name, (_, reason) in waiting.items():  # as Slurm says it, once its backfill looked
            try:
                said = await eventually(functools.partial(says_as_slurm, name), within=75)
            except TimeoutError:
                shown = scheduled(await get_pod(kube, namespace, name))
                raise AssertionError(f"{name} never said what Slurm says: {shown}") from None
            assert said.startswith(reason) or (reason in ("Resources", "Priority") and said in (
                "Resources", "Priority", "ReqNodeNotAvail")), (name, said)
        assert not late, f"said why later than 5 s after the job id was written: {late}"

        # Slurm's backfill plans the Pod behind the 10-minute blocker: a start time, and the
        # busy node's Node nominated (`kubectl get pods -o wide` shows it)
        async def planned() -> dict[str, Any] | None:
            pod = await get_pod(kube, namespace, "resources")
            condition = scheduled(pod)
            return pod if condition and "expects it to start at" in condition["message"] and (
                pod and pod["status"].get("nominatedNodeName")) else None

        pod = await eventually(planned, within=90)
        busy_node = next(n.k8s_name for n in testbed.nodes if n.slurm_name == busy)
        assert pod["status"]["nominatedNodeName"] == busy_node
        assert f"on {busy_node}" in (scheduled(pod) or {})["message"]

        testbed.slurm("scancel", blocker)
        bound = await wait_bound(kube, namespace, "resources")
        assert (scheduled(bound) or {}).get("status") == "True"
        # the plan is carried out: the API server clears the nominated Node with the binding
        assert not bound["status"].get("nominatedNodeName")
    finally:
        testbed.slurm("scancel", blocker)
        testbed.slurm("scontrol", "update", f"nodename={held}", "state=resume")
        testbed.slurm("sacctmgr", "-i", "modify", "qos", "where", "name=low", "set",
                      "MaxTRESPerUser=cpu=-1")
        testbed.slurm("scancel", f"--reservation={RESERVATION}")

        async def reservation_deleted() -> bool:
            try:
                testbed.slurm("scontrol", "delete", f"ReservationName={RESERVATION}")
            except errors.TestbedError:
                return False  # still in use until its job has ended
            return True

        await eventually(reservation_deleted)


def kubectl_sunk(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The plugin as a user runs it (``kubectl sunk`` runs ``kubectl-sunk``)."""
    return subprocess.run([sys.executable, "-m", "sunk.kubectl", "--kubeconfig",
                           str(kubeconfig), *args], capture_output=True, text=True, timeout=60,
                          cwd=REPO)


async def user_kubeconfig(kube: Client, testbed: cluster.Testbed, namespace: str,
                          path: Path) -> Path:
    """A kubeconfig of a ServiceAccount that may read Pods and Events in ``namespace`` only."""
    account = "reader"
    async with call_api(kube, "POST", namespace=namespace, url="serviceaccounts",
                        json={"metadata": {"name": account}}):
        pass
    for kind, body in (
            ("roles", {"rules": [{"apiGroups": [""], "resources": ["pods", "events"],
                                  "verbs": ["get", "list"]}]}),
            ("rolebindings", {"roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                          "kind": "Role", "name": account},
                              "subjects": [{"kind": "ServiceAccount", "name": account,
                                            "namespace": namespace}]})):
        async with call_api(kube, "POST", version="rbac.authorization.k8s.io/v1",
                            namespace=namespace, url=kind,
                            json={"metadata": {"name": account}, **body}):
            pass
    async with call_api(kube, "POST", namespace=namespace,
                        url=f"serviceaccounts/{account}/token",
                        json={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                              "spec": {"expirationSeconds": 3600}}) as r:
        token = r.json()["status"]["token"]
    path.write_text(pki.kubeconfig(testbed.apiserver_url, testbed.pki,
                                   user=f"system:serviceaccount:{namespace}:{account}",
                                   token=token))
    return path


async def test_kubectl_sunk_tells_a_user_what_their_rbac_lets_them_read(
        kube: Client, namespace: str, other_namespace: str, scheduler: RunningScheduler,
        testbed: cluster.Testbed, tmp_path: Path) -> None:
    held = testbed.nodes[3]
    testbed.slurm("scontrol", "update", f"nodename={held.slurm_name}", "state=drain",
                  "reason=e2e-plugin")
    try:
        await create(kube, pod_manifest("held", namespace, scheduler.name, cpu="1", annotations={
            f"{PREFIX}required-nodes": held.slurm_name}))
        await create(kube, pod_manifest("elsewhere", other_namespace, scheduler.name, cpu="1"))
        await wait_bound(kube, other_namespace, "elsewhere")

        async def says_why() -> dict[str, Any] | None:
            condition = scheduled(await get_pod(kube, namespace, "held"))
            return condition if "(ReqNodeNotAvail)" in (condition or {}).get(
                "message", "") else None

        await eventually(says_why, within=45)
        admin = testbed.kubeconfig
        listed = kubectl_sunk(admin, "jobs", "-A")
        assert listed.returncode == 0, listed.stderr
        rows = {tuple(line.split()[:2]): line.split() for line in listed.stdout.splitlines()[1:]}
        assert rows[(namespace, "held")][3:5] == ["Pending", "ReqNodeNotAvail"], listed.stdout
        assert rows[(other_namespace, "elsewhere")][3] == "Bound"

        async def drain_shown() -> str | None:  # the syncer shows Slurm's drain on the Node
            nodes = kubectl_sunk(admin, "nodes")
            assert nodes.returncode == 0, nodes.stderr
            return nodes.stdout if any(
                line.split()[:1] == [held.k8s_name] and "e2e-plugin" in line
                for line in nodes.stdout.splitlines()) else None

        await eventually(drain_shown, within=30)

        user = await user_kubeconfig(kube, testbed, namespace, tmp_path / "user.kubeconfig")
        mine = kubectl_sunk(user, "jobs", "-n", namespace)
        assert mine.returncode == 0, mine.stderr
        assert [line.split()[1] for line in mine.stdout.splitlines()[1:]] == ["held"]
        for refused in (("jobs", "-n", other_namespace), ("jobs", "-A"), ("nodes",)):
            out = kubectl_sunk(user, *refused)
            assert (out.returncode, out.stdout) == (1, ""), (refused, out)
            assert "forbidden" in out.stderr, (refused, out.stderr)
        why = kubectl_sunk(user, "why", "held", "-n", namespace)
        assert why.returncode == 0, why.stderr
        assert "Why:        Slurm job " in why.stdout and "(ReqNodeNotAvail)" in why.stdout
    finally:
        testbed.slurm("scontrol", "update", f"nodename={held.slurm_name}", "state=resume")


async def test_a_scheduler_started_on_policies_that_do_not_load_runs_and_its_pods_wait(
        kube: Client, namespace: str, testbed: cluster.Testbed) -> None:
    """Its policy ConfigMap broken when it starts (an edit gone wrong, then a restart): it
    starts anyway and is ready (its hooks are what Slurm's jobs wait on), a new Pod and each
    member of a new gang wait saying why, never refused, and are scheduled once an edit puts
    a set in force."""
    name = "sunk-e2e-unloaded"
    async with call_api(kube, "POST", namespace=namespace, url="configmaps", json={
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "policies"},
            "data": {"10-broken.yaml": "kind: SchedulingPolicy\nspec: [\n"}}):
        pass
    running = start_scheduler(testbed, name=name,
                              extra=[f"--policies-configmap={namespace}/policies"])
    try:
        names = ["waits", "pair-0", "pair-1"]
        await create(kube, pod_manifest("waits", namespace, name))
        for member in names[1:]:
            manifest = pod_manifest(member, namespace, name, annotations={
                f"{PREFIX}gang-size": "2"})
            manifest["metadata"]["labels"] = {f"{PREFIX}gang": "pair"}
            await create(kube, manifest)

        for waiting in names:
            async def says_why(pod: str = waiting) -> dict[str, Any] | None:
                found = scheduled(await get_pod(kube, namespace, pod))
                return found if found and "no policy set is in force" in found.get(
                    "message", "") else None

            condition = await eventually(says_why, within=30)
            assert (condition["status"], condition["reason"]) == ("False", "SchedulerError")
            assert "invalid YAML" in condition["message"], condition["message"]
        async with httpx.AsyncClient(timeout=5) as probe:
            assert (await probe.get(running.url("health") + "/readyz")).status_code == 200
        good = {p.name: p.read_text() for p in sorted((REPO / "policies").glob("*.yaml"))}
        async with call_api(kube, "PATCH", namespace=namespace, url="configmaps/policies",
                            headers={"Content-Type": "application/merge-patch+json"},
                            json={"data": {**good, "10-broken.yaml": None}}):
            pass
        for waiting in names:
            await wait_bound(kube, namespace, waiting, within=60)
            pod = await get_pod(kube, namespace, waiting)
            assert PREFIX + "rejected" not in (pod or {})["metadata"].get("annotations", {})
    finally:
        running.stop()
