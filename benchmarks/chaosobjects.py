"""The objects the soak's work makes, as manifests (pure): Pods, gangs from each source sunk
reads, GPU claims and the policy sets its ConfigMap edits switch between.

Gangs, one of each source sunk reads (``docs/gangs.md``):

- ``gang``: Pods with sunk's gang label and size (one in four heterogeneous: a 1-CPU leader and
  2-CPU workers, one heterogeneous Slurm job);
- ``jobset``: a JobSet of a driver and its workers;
- ``lws``: a LeaderWorkerSet of one group;
- ``workload``: Kubernetes' PodGroup (``scheduling.k8s.io``) with a gang policy, and its Pods;
- ``job-gang``: a batch Job that asks for a gang (its controller makes the PodGroup);
- ``podgroup``: scheduler-plugins' PodGroup (``scheduling.x-k8s.io``) and its Pods.

The bed's kubelet completes the Pods of Jobs (a JobSet's too) as soon as they run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

PREFIX = "sunk.coreweave.com/"
GANG_SOURCES = ("gang", "jobset", "lws", "workload", "job-gang", "podgroup")
JOBSET, LWS, BATCH = "jobset.x-k8s.io/v1alpha2", "leaderworkerset.x-k8s.io/v1", "batch/v1"
PLUGINS_GROUP = "scheduling.x-k8s.io/v1alpha1"
#: The claim templates GPU Pods name: one GPU or two.
GPU_TEMPLATES = {1: "chaos-gpu-1", 2: "chaos-gpu-2"}
#: A label the extra policy of a ConfigMap edit refuses.
DENIED_LABEL = "chaos.sunk/denied"
POLICIES = Path(__file__).resolve().parent.parent / "policies"


def pod(name: str, namespace: str, scheduler: str, cpus: int,
        labels: dict[str, str] | None = None, notes: dict[str, str] | None = None
        ) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {},
                         "annotations": notes or {}},
            "spec": spod(scheduler, cpus)}


def spod(scheduler: str, cpus: int) -> dict[str, Any]:
    """A Pod's spec: one container requesting ``cpus`` and 1 GiB."""
    return {"schedulerName": scheduler, "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": "busybox", "resources": {
                "requests": {"cpu": str(cpus), "memory": "1Gi"}}}]}


def gpu_pod(name: str, namespace: str, scheduler: str, gpus: int) -> dict[str, Any]:
    """A Pod asking for ``gpus`` GPUs by a claim made from one of the soak's templates."""
    manifest = pod(name, namespace, scheduler, 1)
    manifest["spec"]["resourceClaims"] = [{"name": "gpus",
                                           "resourceClaimTemplateName": GPU_TEMPLATES[gpus]}]
    manifest["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    return manifest


def claim_template(namespace: str, name: str, count: int) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "gpu.nvidia.com", "count": count}}]}}}}


def labelled_gang(name: str, namespace: str, scheduler: str, size: int, cpus: int, *,
                  het: bool) -> list[dict[str, Any]]:
    return [pod(f"{name}-{i}", namespace, scheduler, (1 if i == 0 else 2) if het else cpus,
                labels={f"{PREFIX}gang": name},
                notes={f"{PREFIX}gang-size": str(size), f"{PREFIX}gang-index": str(i)})
            for i in range(size)]


def _indexed_job(template: dict[str, Any], parallelism: int) -> dict[str, Any]:
    return {"parallelism": parallelism, "completions": parallelism,
            "completionMode": "Indexed", "backoffLimit": 0,
            "template": {"spec": {**template, "restartPolicy": "Never"}}}


def gang_objects(source: str, name: str, namespace: str, scheduler: str, size: int, cpus: int,
                 *, het: bool = False, workload_version: str = "v1beta1"
                 ) -> list[tuple[str, dict[str, Any]]]:
    """What makes one gang of ``size`` from ``source``: (API path under the namespace, body),
    in the order to create them."""
    ns = f"/namespaces/{namespace}"
    spec = spod(scheduler, cpus)
    if source == "gang":
        return [(f"/api/v1{ns}/pods", m)
                for m in labelled_gang(name, namespace, scheduler, size, cpus, het=het)]
    if source == "jobset":
        jobs = [{"name": "driver", "replicas": 1, "template": {"spec": _indexed_job(spec, 1)}},
                {"name": "workers", "replicas": 1,
                 "template": {"spec": _indexed_job(spec, size - 1)}}]
        return [(f"/apis/{JOBSET}{ns}/jobsets", {
            "apiVersion": JOBSET, "kind": "JobSet",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicatedJobs": jobs}})]
    if source == "lws":
        return [(f"/apis/{LWS}{ns}/leaderworkersets", {
            "apiVersion": LWS, "kind": "LeaderWorkerSet",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": 1, "leaderWorkerTemplate": {
                "size": size, "leaderTemplate": {"spec": spec},
                "workerTemplate": {"spec": spec}}}})]
    if source == "job-gang":
        job = _indexed_job(spec, size)
        if workload_version != "v1alpha2":  # 1.37 asks; 1.36 gives a gang to this shape
            job["scheduling"] = {"schedulingPolicy": {"gang": {}}}
        return [(f"/apis/{BATCH}{ns}/jobs", {"apiVersion": BATCH, "kind": "Job",
                                             "metadata": {"name": name, "namespace": namespace},
                                             "spec": job})]
    if source == "workload":
        group = f"scheduling.k8s.io/{workload_version}"
        members = [pod(f"{name}-{i}", namespace, scheduler, cpus) for i in range(size)]
        for member in members:
            member["spec"]["schedulingGroup"] = {"podGroupName": name}
        return [(f"/apis/{group}{ns}/podgroups", {
            "apiVersion": group, "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"schedulingPolicy": {"gang": {"minCount": size}}}}),
            *((f"/api/v1{ns}/pods", m) for m in members)]
    if source == "podgroup":
        return [(f"/apis/{PLUGINS_GROUP}{ns}/podgroups", {
            "apiVersion": PLUGINS_GROUP, "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"minMember": size}}),
            *((f"/api/v1{ns}/pods", pod(f"{name}-{i}", namespace, scheduler, cpus,
                                        labels={"scheduling.x-k8s.io/pod-group": name}))
              for i in range(size))]
    raise ValueError(f"not a gang source: {source!r}")


#: What the soak deletes at its end, owners first (so that no controller makes a Pod again).
OWNERS = (f"/apis/{JOBSET}/namespaces/{{ns}}/jobsets",
          f"/apis/{LWS}/namespaces/{{ns}}/leaderworkersets",
          f"/apis/{BATCH}/namespaces/{{ns}}/jobs")


def policy_sets() -> list[dict[str, str]]:
    """The ConfigMap data an edit switches between: the default set; the default set with one
    more policy (Pods with :data:`DENIED_LABEL` are refused); and a broken set (sunk keeps the
    set in force and says why)."""
    default = {path.name: path.read_text() for path in sorted(POLICIES.glob("*.yaml"))}
    extra = f"""apiVersion: sunk.coreweave.com/v1alpha1
kind: SchedulingPolicy
metadata:
  name: chaos-denied-label
spec:
  failurePolicy: Fail
  validationActions: [Deny]
  validations:
    - expression: "!has(object.metadata.labels) || !('{DENIED_LABEL}' in object.metadata.labels)"
      reason: DeniedByTheSoak
      message: "the soak's policy refuses Pods labelled {DENIED_LABEL}"
"""
    broken = "apiVersion: sunk.coreweave.com/v1alpha1\nkind: SchedulingPolicy\nspec: [\n"
    return [default, default | {"90-chaos.yaml": extra}, default | {"90-chaos.yaml": broken}]
