"""HTTP-level stand-ins (``httpx.MockTransport``) of the API server and slurmrestd, and the
cluster model built on them as :func:`sunk.wiring.assemble` builds it, without informers
running: tests fill the informers' caches and call the watch handlers themselves."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from sunk import kube
from sunk.apply.executor import Executor
from sunk.apply.ports import KubeAPI
from sunk.hooks.auth import HookKeys
from sunk.model.cluster import Cluster
from sunk.model.slurmwatch import SlurmWatch
from sunk.settings import Settings
from sunk.slurm.client import SlurmClient
from sunk.slurm.job import STARTED, Job, PodIdentity, admin_comment, job_extra
from tests.mock_http import MockHttp
from tests.unit.kube.fakes import FakeCredentials

NAME = "sunk-test"
#: What the executor puts in a job's environment for the hook API.
CREDENTIAL = HookKeys(lambda: ["s3cret"]).credentials_of(NAME)
PREFIX = "sunk.coreweave.com/"
SLURM = "/slurm/v0.0.42"
JOB_ID = f"{PREFIX}job-id"
POD_UID = f"{PREFIX}pod-uid"
REJECTED = f"{PREFIX}rejected"
POLICIES = Path(__file__).resolve().parents[3] / "policies"
Route = Callable[[httpx.Request], httpx.Response]
Obj = dict[str, Any]


@dataclass
class Server:
    """Answers by (method, path prefix), first match in insertion order, else
    :meth:`fallback`; records every request with its JSON body."""

    routes: dict[tuple[str, str], Route] = field(default_factory=dict)
    seen: list[tuple[str, str, Any]] = field(default_factory=list)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        self.seen.append((request.method, request.url.path, body))
        for (method, path), route in self.routes.items():
            if request.method == method and request.url.path.startswith(path):
                return route(request)
        return self.fallback(request)

    def fallback(self, request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={})

    def calls(self, method: str, path: str = "") -> list[Any]:
        return [b for m, p, b in self.seen if m == method and p.startswith(path)]

    def paths(self, method: str | None = None) -> list[str]:
        return [p for m, p, _ in self.seen if method is None or m == method]


def answer(status: int, body: Any = None) -> Route:
    return lambda r: httpx.Response(status, json=body if body is not None else {})


def down(text: str = "slurmctld down") -> Route:
    return lambda r: httpx.Response(503, text=text)


@dataclass
class SlurmServer(Server):
    """slurmrestd with a job table: ``GET /job/{id}`` (404 for a job it has not),
    ``GET /jobs/state/`` and ``GET /jobs/`` answer from :attr:`jobs` (raw records)."""

    jobs: dict[int, Obj] = field(default_factory=dict)

    def fallback(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if request.method == "GET" and path.startswith(f"{SLURM}/job/"):
            raw = self.jobs.get(int(path.rsplit("/", 1)[1]))
            if raw is None:
                return httpx.Response(404, json={"errors": [
                    {"error_number": 2017, "error": "Invalid job id specified"}]})
            return httpx.Response(200, json={"jobs": [raw]})
        if request.method == "GET" and path == f"{SLURM}/jobs/state/":
            return httpx.Response(200, json={"jobs": [
                {"job_id": i, "state": raw["job_state"]} for i, raw in self.jobs.items()]})
        if request.method == "GET" and path == f"{SLURM}/jobs/":
            return httpx.Response(200, json={"jobs": list(self.jobs.values())})
        return httpx.Response(200, json={})


# -- objects -------------------------------------------------------------------------------------

def who(uid: str = "aaaa-0001", name: str = "p", namespace: str = "ns",
        scheduler: str = NAME) -> PodIdentity:
    return PodIdentity(namespace, name, uid, scheduler)


def raw_job(job_id: int, owner: PodIdentity | None = None, *, state: str = "PENDING",
            nodes: str = "", started: bool = False, reason: str = "",
            stamped: bool = True) -> Obj:
    """slurmrestd's record of a placeholder job (``stamped``: with the scheduler's
    admin_comment, as only the scheduler submits it)."""
    owner = owner or who()
    return {"job_id": job_id, "name": f"pod:{owner.key}", "job_state": [state],
            "extra": job_extra(owner) + (STARTED if started else ""), "nodes": nodes,
            "state_reason": reason, "admin_comment": admin_comment(owner) if stamped else ""}


def job(job_id: int, owner: PodIdentity | None = None, **kw: Any) -> Job:
    return Job.from_api(raw_job(job_id, owner, **kw))


def pod(uid: str = "aaaa-0001", name: str = "p", namespace: str = "ns", *,
        node: str | None = None, annotations: dict[str, str] | None = None,
        requests: dict[str, str] | None = None, **meta: Any) -> Obj:
    """A Pod that names the scheduler and passes the repository's policies."""
    spec: Obj = {"schedulerName": NAME, "terminationGracePeriodSeconds": 10,
                 "containers": [{"name": "main", "image": "busybox", "resources": {
                     "requests": {"cpu": "2", "memory": "1Gi"} if requests is None
                     else requests}}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"namespace": namespace, "name": name, "uid": uid,
                         "resourceVersion": "10", "annotations": dict(annotations or {}),
                         "creationTimestamp": "2025-01-01T00:00:00Z", **meta},
            "spec": spec, "status": {"phase": "Pending"}}


def owned(job_id: int, uid: str = "aaaa-0001") -> dict[str, str]:
    """The annotations the scheduler writes on a Pod it submitted job ``job_id`` for."""
    return {JOB_ID: str(job_id), POD_UID: uid}


def slurmd(slurm_node: str = "slurm-1", k8s_node: str = "node-a", *,
           annotations: dict[str, str] | None = None) -> Obj:
    return {"metadata": {"namespace": "slurm", "name": f"slurmd-{slurm_node}",
                         "uid": f"slurmd-{slurm_node}", "resourceVersion": "5",
                         "labels": {"app.kubernetes.io/name": "slurmd"},
                         "annotations": dict(annotations or {})},
            "spec": {"hostname": slurm_node, "nodeName": k8s_node},
            "status": {"phase": "Running"}}


def node(name: str = "node-a", *, unschedulable: bool = False,
         taints: list[Obj] | None = None, annotations: dict[str, str] | None = None) -> Obj:
    spec: Obj = {"taints": list(taints or [])}
    if unschedulable:
        spec["unschedulable"] = True
    return {"metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "17",
                         "labels": {"kubernetes.io/hostname": name},
                         "annotations": dict(annotations or {})}, "spec": spec,
            "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"}}}


def namespace(name: str = "ns") -> Obj:
    return {"metadata": {"name": name, "uid": f"ns-{name}", "labels": {}}}


def put(informer: kube.Informer | kube.Subset, obj: Obj) -> None:
    """The informer's cache as a watch event would leave it (a Pod trimmed, and kept whole
    while its policies are to run, as the Pod informer keeps it)."""
    source = informer.source if isinstance(informer, kube.Subset) else informer
    obj = source.trim(obj)
    informer.cache[kube.key(obj)] = obj
    informer.generation += 1


def drop(informer: kube.Informer | kube.Subset, obj: Obj) -> None:
    informer.cache.pop(kube.key(obj), None)
    informer.generation += 1


# -- the parts -----------------------------------------------------------------------------------

@dataclass
class Bed:
    cluster: Cluster
    watch: SlurmWatch
    executor: Executor
    slurm_client: SlurmClient
    kube: Server
    slurm: SlurmServer

    async def settle(self) -> None:
        """Every Event sent in the background has been sent."""
        while self.executor._background:
            await asyncio.gather(*self.executor._background)

    def events(self) -> list[Obj]:
        return [b for m, p, b in self.kube.seen if m == "POST" and p.endswith("/events")]

    def add_pod(self, obj: Obj, kind: str = "ADDED") -> None:
        """A watch event of a Pod that names the scheduler."""
        informer = self.cluster.pod_informers[0]
        if kind == "DELETED":
            drop(informer, obj)
        else:
            put(informer, obj)
        self.cluster._on_pod(kind, obj)

    def any_pod(self, obj: Obj, kind: str = "ADDED") -> None:
        """A watch event of any Pod (what is bound to each Node)."""
        if kind == "DELETED":
            drop(self.cluster.all_pods, obj)
        else:
            put(self.cluster.all_pods, obj)
        self.cluster._on_any_pod(kind, obj)


@contextlib.asynccontextmanager
async def bed(**settings: Any) -> AsyncIterator[Bed]:
    k8s, slurm = Server(), SlurmServer()
    api = kube.Client(FakeCredentials(), transport=MockHttp(k8s))
    client = SlurmClient("http://slurm.test", token=lambda: "jwt",
                         transport=MockHttp(slurm))
    config = Settings(**{"scheduler_name": NAME, "scope": "cluster", **settings})
    cluster = Cluster(config, api)
    watch = SlurmWatch(cluster, client)
    executor = Executor(cluster, KubeAPI(api, NAME), client,
                        credential=CREDENTIAL, jobs=watch)
    made = Bed(cluster, watch, executor, client, k8s, slurm)
    try:
        yield made
    finally:
        await made.settle()
        await client.aclose()
        await kube.close(api)


async def until(condition: Callable[[], object], within: float = 2.0) -> None:
    """Wait (on the event loop) until ``condition()`` holds."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.005)


async def stop(*tasks: asyncio.Task[Any]) -> None:
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task
