"""Small helpers for end-to-end tests against the real test bed."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx

from sunk.kube import Client, KubeError
from sunk.kube import close as close_api
from testbed import build, cluster
from testbed.errors import TestbedError

__all__ = ["close_api"]  # sunk.kube.close, under the name the tests use

T = TypeVar("T")


async def eventually(check: Callable[[], Awaitable[T | None]], within: float = 30) -> T:
    """Poll ``check`` (a real system's state: nothing to subscribe to) until it is truthy."""
    async with asyncio.timeout(within):
        while True:
            if result := await check():
                return result
            await asyncio.sleep(0.2)


@contextlib.asynccontextmanager
async def call_api(kube: Client, method: str = "GET", *, version: str = "v1",
                   namespace: str | None = None, url: str = "",
                   params: dict[str, str] | None = None, json: dict[str, Any] | None = None,
                   headers: dict[str, str] | None = None,
                   raise_for_status: bool = True) -> AsyncIterator[httpx.Response]:
    """One call and its whole answer, for tests that read status codes; an error answer raises
    KubeError unless ``raise_for_status`` is false."""
    answer = await kube.send(method, url, namespace=namespace, version=version, params=params,
                             json=json, headers=headers)
    if raise_for_status and answer.is_error:
        raise KubeError(f"{method} {url}: {answer.status} {answer.text}", status=answer.status)
    yield httpx.Response(answer.status, content=bytes(answer.body))  # its .json(), for tests


async def kube_list(kube: Client, kind: str, *, namespace: str | None = None,
                    label_selector: str | None = None) -> list[dict[str, Any]]:
    """Objects of ``kind`` (a plural: "pods") as plain dicts."""
    params = {"labelSelector": label_selector} if label_selector else None
    body = await kube.request("GET", kind, namespace=namespace, params=params)
    items: list[dict[str, Any]] = body["items"]
    return items


def pod_manifest(name: str, namespace: str, scheduler: str, *, cpu: str = "1",
                 memory: str = "1Gi", gpus: int = 0, annotations: dict[str, str] | None = None,
                 grace: int | None = 10, **spec: Any) -> dict[str, Any]:
    """A Pod for the scheduler under test, with the fields tests vary."""
    requests: dict[str, str] = {"cpu": cpu, "memory": memory}
    resources: dict[str, Any] = {"requests": requests}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    body: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [{"name": "main", "image": "busybox", "resources": resources}],
        **spec,
    }
    if grace is not None:
        body["terminationGracePeriodSeconds"] = grace
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace,
                         "annotations": annotations or {}},
            "spec": body}


async def create(kube: Client, manifest: dict[str, Any]) -> None:
    ns = manifest["metadata"]["namespace"]
    async with call_api(kube, "POST", namespace=ns, url="pods", json=manifest):
        pass


async def get_pod(kube: Client, namespace: str, name: str) -> dict[str, Any] | None:
    async with call_api(kube, "GET", namespace=namespace, url=f"pods/{name}",
                        raise_for_status=False) as r:
        if r.status_code == 404:
            return None
        body: dict[str, Any] = r.json()
        return body


async def wait_bound(kube: Client, namespace: str, name: str,
                     within: float = 60) -> dict[str, Any]:
    async def bound() -> dict[str, Any] | None:
        pod = await get_pod(kube, namespace, name)
        return pod if pod and pod["spec"].get("nodeName") else None

    return await eventually(bound, within)


async def job(slurm: httpx.AsyncClient, job_id: int | str) -> dict[str, Any]:
    """Slurm's record of one job, as slurmrestd has it now."""
    r = await slurm.get(f"/slurm/v0.0.42/job/{job_id}")
    found: dict[str, Any] = r.json()["jobs"][0]
    return found


async def release(kube: Client, namespace: str, name: str) -> None:
    """Remove a test's finalizers from a Pod, so its object can go."""
    async with call_api(kube, "PATCH", namespace=namespace, url=f"pods/{name}",
                        json={"metadata": {"finalizers": None}},
                        headers={"Content-Type": "application/merge-patch+json"}):
        pass


async def events_for(kube: Client, namespace: str, name: str) -> list[dict[str, Any]]:
    async with call_api(kube, "GET", namespace=namespace, url="events",
                        params={"fieldSelector": f"involvedObject.name={name}"}) as r:
        items: list[dict[str, Any]] = r.json()["items"]
        return items


async def quiet(slurm: httpx.AsyncClient, testbed: cluster.Testbed,
                nodes: list[str] | None = None) -> None:
    """Wait until ``nodes`` (default: all) run no job and are not drained: jobs that earlier
    tests left ending are gone. If they are not within 30 s, say what was left and clear it."""
    wanted = set(nodes or [n.slurm_name for n in testbed.nodes])

    async def idle() -> bool:
        listed = (await slurm.get("/slurm/v0.0.42/nodes/")).json()["nodes"]
        return all(n["state"] == ["IDLE"] for n in listed if n["name"] in wanted)

    try:
        await eventually(idle, within=30)
    except TimeoutError:
        print("left by earlier tests:\n" + testbed.slurm("squeue") + testbed.slurm("sinfo", "-N"))
        testbed.slurm("scancel", "--user=root")
        testbed.slurm("scancel", "--user=k8s-pods")
        for node in wanted:
            with contextlib.suppress(TestbedError):  # not drained: nothing to lift
                testbed.slurm("scontrol", "update", f"nodename={node}", "state=resume")
        await eventually(idle, within=30)


async def call_json(kube: Client, method: str, url: str, *, namespace: str | None = None,
                    version: str = "v1", **kwargs: Any) -> dict[str, Any]:
    """One call; its JSON answer (empty for none). An error answer raises KubeError."""
    async with call_api(kube, method, version=version, namespace=namespace, url=url,
                        **kwargs) as r:
        body: dict[str, Any] = r.json() if r.content else {}
        return body


#: What a test namespace may hold (Pods first: their jobs end with them).
NAMESPACED_KINDS = (("pods", "v1"), ("secrets", "v1"), ("configmaps", "v1"),
                    ("serviceaccounts", "v1"), ("leases", "coordination.k8s.io/v1"),
                    ("deployments", "apps/v1"), ("roles", "rbac.authorization.k8s.io/v1"),
                    ("rolebindings", "rbac.authorization.k8s.io/v1"))


async def remove_namespace(kube: Client, name: str) -> None:
    """Delete what is in it and finalize it: the test bed has no namespace controller, so
    objects left in a finalized namespace would come back with the next one of that name."""
    for kind, api_version in NAMESPACED_KINDS:
        async with call_api(kube, "DELETE", namespace=name, url=kind, version=api_version,
                            params={"gracePeriodSeconds": "0"}, raise_for_status=False):
            pass
    async with call_api(kube, "DELETE", url=f"namespaces/{name}", raise_for_status=False):
        pass
    async with call_api(kube, "PUT", url=f"namespaces/{name}/finalize", raise_for_status=False,
                        json={"apiVersion": "v1", "kind": "Namespace",
                              "metadata": {"name": name}, "spec": {"finalizers": []}}):
        pass


def helm_env(home: Path) -> dict[str, str]:
    """helm's configuration, cache and data under ``home`` (none of the machine's)."""
    return {"HELM_CONFIG_HOME": str(home / "config"), "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_DATA_HOME": str(home / "data")}


def helm(testbed: cluster.Testbed, home: Path, *args: str) -> str:
    """The test bed's helm against the test bed; its output, or an assertion naming why not."""
    done = subprocess.run([str(build.build_helm()), *args,
                           f"--kubeconfig={testbed.kubeconfig}"], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **helm_env(home)},
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout
