"""One look at both sides for the soak's checker: the API server's and slurmrestd's answers,
read into :class:`benchmarks.invariants.Look` (the reading is pure, the fetching is not).

The Pods' requests are added up here, from their containers, not by sunk's own code: a checker
that shares the scheduler's arithmetic would share its mistakes."""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

import httpx

from benchmarks.invariants import ClaimLook, JobLook, Look, NodeLook, PodLook
from sunk.plans.claims import gres_indexes
from sunk.plans.placement import LOCK_TAINT
from sunk.quantity import Quantity
from sunk.slurm.text import expand_hostlist

PREFIX = "sunk.coreweave.com/"
GANG_LABEL, GANG_SIZE, LOCK_ANNOTATION = PREFIX + "gang", PREFIX + "gang-size", LOCK_TAINT
SLURM_NAMESPACE = "slurm"
LWS_NAME, LWS_GROUP = "leaderworkerset.sigs.k8s.io/name", "leaderworkerset.sigs.k8s.io/group-index"
LWS_SIZE, JOBSET_NAME = "leaderworkerset.sigs.k8s.io/size", "jobset.sigs.k8s.io/jobset-name"
PLUGINS_GROUP = "scheduling.x-k8s.io/pod-group"
_EXTRA = re.compile(r"^sunk-(?:pod|gang)=\S+ uid=(?P<uid>[0-9a-fA-F-]+) \S+"
                    r"(?: members=(?P<members>[0-9a-f,]+))?")
ENDED = ("Succeeded", "Failed")


def _amount(text: object, scale: int) -> int:
    try:
        return math.ceil(Quantity.parse(str(text)).value * scale)
    except ValueError:
        return 0


def requests(pod: Mapping[str, Any]) -> tuple[int, int]:
    """A Pod's CPU (millicores) and memory (bytes) requests: its containers' sum, or an init
    container's if larger."""
    spec = pod.get("spec") or {}

    def of(containers: Iterable[Mapping[str, Any]]) -> list[tuple[int, int]]:
        return [(_amount(r.get("cpu", 0), 1000), _amount(r.get("memory", 0), 1))
                for c in containers for r in [(c.get("resources") or {}).get("requests") or {}]]

    run, init = of(spec.get("containers") or []), of(spec.get("initContainers") or [])
    cpu, memory = sum(c for c, _ in run), sum(m for _, m in run)
    return max([cpu, *(c for c, _ in init)]), max([memory, *(m for _, m in init)])


def gang_of(pod: Mapping[str, Any]) -> tuple[str, int]:
    """The gang a Pod belongs to, read from what each source writes on its Pods (not from
    sunk's code), and its size where the Pod says it (0 where not): ("", 0) if none."""
    meta, spec = pod["metadata"], pod.get("spec") or {}
    labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
    if gang := labels.get(GANG_LABEL):
        return f"label:{gang}", int(notes.get(GANG_SIZE) or 0)
    if lws := labels.get(LWS_NAME):
        size = str(notes.get(LWS_SIZE, ""))
        return f"lws:{lws}-{labels.get(LWS_GROUP, '')}", int(size) if size.isdigit() else 0
    if jobset := labels.get(JOBSET_NAME):
        return f"jobset:{jobset}", 0
    if group := (spec.get("schedulingGroup") or {}).get("podGroupName"):
        return f"workload:{group}", 0
    if group := labels.get(PLUGINS_GROUP):
        return f"podgroup:{group}", 0
    return "", 0


def pod_look(pod: Mapping[str, Any]) -> PodLook:
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    ended = status.get("phase") in ENDED
    cpu_m, memory = (0, 0) if ended else requests(pod)
    says = next((c.get("message") or "" for c in status.get("conditions") or []
                 if c.get("type") == "PodScheduled" and c.get("status") == "False"), "")
    gang, size = gang_of(pod)
    return PodLook(meta["name"], meta["uid"], spec.get("nodeName") or "",
                   bool(meta.get("deletionTimestamp")),
                   gang=f"{meta.get('namespace', '')}/{gang}" if gang else "", gang_size=size,
                   cpu_m=cpu_m, memory=memory, waiting_says=says, ended=ended)


def job_look(job: Mapping[str, Any]) -> JobLook:
    m = _EXTRA.match(job.get("extra") or "")
    nodes = str(job.get("nodes") or "")
    # gres_detail follows the allocation (Slurm's node order); ``nodes`` is printed sorted by
    # name once the job ends.
    resources = job.get("job_resources")
    held = resources.get("nodes") if isinstance(resources, Mapping) else None
    allocated = held.get("allocation") if isinstance(held, Mapping) else None
    node_list = (tuple(str(a.get("name")) for a in allocated if isinstance(a, Mapping))
                 if isinstance(allocated, list) and allocated
                 else tuple(expand_hostlist(nodes)) if nodes else ())
    gpus = frozenset((node, int(i)) for node, detail in zip(node_list, job.get("gres_detail")
                                                            or [], strict=False)
                     for i in gres_indexes(str(detail)))
    het = job.get("het_job_id")
    het_id = int(het.get("number") or 0) if isinstance(het, Mapping) else int(het or 0)
    return JobLook(int(job["job_id"]), job["job_state"][0], m["uid"] if m else "", nodes,
                   "COMPLETING" in job["job_state"],
                   members=tuple((m["members"] or "").split(",")) if m and m["members"] else (),
                   node_list=node_list, gpus=gpus, het_job_id=het_id)


def node_look(node: Mapping[str, Any], slurm_name: str, lock: str,
              slurm: Mapping[str, Any]) -> NodeLook:
    spec, allocatable = node.get("spec") or {}, (node.get("status") or {}).get("allocatable", {})
    return NodeLook(node["metadata"]["name"], slurm_name,
                    _amount(allocatable.get("cpu", 0), 1000),
                    _amount(allocatable.get("memory", 0), 1),
                    cordoned=bool(spec.get("unschedulable")),
                    tainted=any(t.get("key") == LOCK_TAINT for t in spec.get("taints") or []),
                    lock=lock, slurm_states=frozenset(slurm.get("state") or ()),
                    slurm_reason=str(slurm.get("reason") or ""))


def claim_looks(claims: Iterable[Mapping[str, Any]]) -> list[ClaimLook]:
    """The allocated claims, with the Pod that holds each (the bed's devices are ``gpu-<i>``)."""
    out = []
    for claim in claims:
        status = claim.get("status") or {}
        results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
        users = [r.get("uid", "") for r in status.get("reservedFor") or []]
        node = _claim_node(status.get("allocation") or {})
        gpus = frozenset(int(r["device"].rsplit("-", 1)[1]) for r in results
                         if str(r.get("device", "")).rsplit("-", 1)[-1].isdigit())
        if results and users:
            out.append(ClaimLook(claim["metadata"]["name"], users[0], node, gpus))
    return out


def _claim_node(allocation: Mapping[str, Any]) -> str:
    """The Node an allocation is for (its node selector's ``metadata.name`` field)."""
    for term in (allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and field.get("values"):
                return str(field["values"][0])
    return ""


def read(namespace: str, pods: list[dict[str, Any]], jobs: list[dict[str, Any]],
         nodes: list[dict[str, Any]], slurm_nodes: list[dict[str, Any]],
         claims: list[dict[str, Any]]) -> Look:
    """The look, from the answers: every Pod (``pods``: all namespaces), the jobs, the Nodes,
    Slurm's nodes and the soak's claims."""
    slurmd = [p for p in pods if p["metadata"].get("namespace") == SLURM_NAMESPACE]
    host_of = {p["spec"].get("hostname", ""): p["spec"].get("nodeName", "") for p in slurmd}
    slurm_of = {k8s: name for name, k8s in host_of.items()}
    locks = {p["spec"].get("nodeName", ""): (p["metadata"].get("annotations") or {}).get(
        LOCK_ANNOTATION, "false") for p in slurmd}
    by_name = {n.get("name", ""): n for n in slurm_nodes}
    ours = [p for p in pods if p["metadata"].get("namespace") == namespace]
    others = [pod_look(p) for p in pods if p["metadata"].get("namespace") != namespace]
    return Look(tuple(pod_look(p) for p in ours),
                tuple(job_look(j) for j in jobs if str(j.get("name", "")).startswith(
                    (f"pod:{namespace}/", f"gang:{namespace}/"))),
                host_of,
                tuple(node_look(n, slurm_of.get(n["metadata"]["name"], ""),
                                locks.get(n["metadata"]["name"], "false"),
                                by_name.get(slurm_of.get(n["metadata"]["name"], ""), {}))
                      for n in nodes),
                others=tuple(others), claims=tuple(claim_looks(claims)))


async def fetch(kube: httpx.AsyncClient, slurm: httpx.AsyncClient, namespace: str
                ) -> Look | None:
    """Both sides, as they are now (None: one of them did not answer)."""
    try:
        answers = await asyncio.gather(
            kube.get("/api/v1/pods"), slurm.get("/slurm/v0.0.42/jobs/"),
            kube.get("/api/v1/nodes"), slurm.get("/slurm/v0.0.42/nodes/"),
            kube.get(f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"))
        if not all(r.is_success for r in answers[:4]):
            return None
        pods, jobs, nodes, slurm_nodes = (r.json() for r in answers[:4])
        claims = answers[4].json().get("items") or [] if answers[4].is_success else []
    except (httpx.HTTPError, ValueError):
        return None
    if jobs.get("errors") or slurm_nodes.get("errors"):
        return None
    look = read(namespace, pods["items"], jobs.get("jobs") or [], nodes["items"],
                slurm_nodes.get("nodes") or [], claims)
    mute = [p for p in look.pods if not p.node and not p.deleting and not p.waiting_says]
    return Look(look.pods, look.jobs, look.host_of, look.nodes, look.others,
                await _evented(kube, namespace, mute), look.claims) if mute else look


async def _evented(kube: httpx.AsyncClient, namespace: str, pods: list[PodLook]
                   ) -> frozenset[str]:
    """Which of ``pods`` some Event is about (asked only of Pods without a condition's word)."""
    found = set()
    for pod in pods[:20]:
        try:
            r = await kube.get(f"/api/v1/namespaces/{namespace}/events",
                               params={"fieldSelector": f"involvedObject.uid={pod.uid}"})
        except httpx.HTTPError:
            found.add(pod.uid)  # cannot tell now: not counted against it
            continue
        if not r.is_success or r.json().get("items"):
            found.add(pod.uid)
    return frozenset(found) | frozenset(p.uid for p in pods[20:])
