"""Record what the bed's API server and slurmrestd answer, for unit tests on plain data.

    python -m testbed.recordings dra tests/unit/core/recorded    # on a running bed

``dra``: on a bed without a scheduler running, a Slurm job with 2 GPUs on one node and one
with a GPU on each of two nodes (whose hostlist order differs from Slurm's node order), a
node's ResourceSlice, and a Pod's ResourceClaim as sunk allocates it, with its job. Each file
is named by the bed's Slurm release, and a job keeps only the fields sunk reads (a record is
about 18 kB).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx

from testbed import cluster
from testbed.errors import TestbedError
from testbed.scheduler import start_scheduler

T = TypeVar("T")
JOB_FIELDS = ("job_id", "name", "nodes", "job_state", "gres_detail", "tres_per_node",
              "tres_alloc_str", "job_resources", "het_job_id", "het_job_offset")
NAMESPACE = "recordings"
RESOURCE = "/apis/resource.k8s.io/v1"


def _until(what: str, check: Callable[[], T | None], within: float = 60) -> T:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if (found := check()) is not None:
            return found
        time.sleep(0.5)
    raise TestbedError(f"timed out waiting for {what}")


def _job(slurm: httpx.Client, job_id: str) -> dict[str, Any]:
    (job,) = slurm.get(f"/slurm/v0.0.42/job/{job_id}").json()["jobs"]
    return {k: job[k] for k in JOB_FIELDS if k in job}


def _running(slurm: httpx.Client, job_id: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        job = _job(slurm, job_id)
        return job if job["job_state"][0] == "RUNNING" and job.get("gres_detail") else None

    return _until(f"job {job_id} running with its GPUs", check)


def _slurm_release(tb: cluster.Testbed) -> str:
    return tb.slurm("sinfo", "--version").split()[-1].rsplit(".", 1)[0]  # "slurm 24.11.5"


def record_dra(tb: cluster.Testbed, out: Path) -> list[Path]:
    release = _slurm_release(tb)
    written: list[Path] = []

    def save(name: str, data: Any) -> None:
        path = out / f"{name}-{release}.json"
        path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        written.append(path)

    one, two = tb.nodes[0], tb.nodes[1]  # two's name sorts first: a100-001 before h100-000
    with httpx.Client(base_url=tb.slurmrestd_url, headers=tb.slurm_headers(),
                      timeout=30) as slurm, tb.kube() as kube:
        jobs = [tb.slurm("sbatch", "--parsable", f"--nodelist={one.slurm_name}", "--gres=gpu:2",
                         "--chdir=/tmp", "--output=/dev/null", "--wrap=sleep 300").strip(),
                tb.slurm("sbatch", "--parsable", "--nodes=2", "--gres=gpu:1",
                         f"--nodelist={one.slurm_name},{two.slurm_name}", "--chdir=/tmp",
                         "--output=/dev/null", "--wrap=sleep 300").strip()]
        try:
            save("slurm-job-gres-one-node", _running(slurm, jobs[0]))
            save("slurm-job-gres-two-nodes", _running(slurm, jobs[1]))
        finally:
            tb.slurm("scancel", *jobs)
        pieces = kube.get(f"{RESOURCE}/resourceslices").json()["items"]
        (piece,) = [p for p in pieces if p["spec"]["nodeName"] == two.k8s_name]
        piece["metadata"].pop("managedFields", None)
        save("resourceslice", piece)
        _record_claim(tb, kube, slurm, two, save)
    return written


def _record_claim(tb: cluster.Testbed, kube: httpx.Client, slurm: httpx.Client,
                  node: Any, save: Callable[[str, Any], None]) -> None:
    kube.post("/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace",
                                           "metadata": {"name": NAMESPACE}})
    running = start_scheduler(tb, name="sunk-recordings", hooks_port=tb.ports["hooks"])
    try:
        kube.post(f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaimtemplates", json={
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "three-gpus"},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "gpu.nvidia.com", "count": 3}}]}}}}).raise_for_status()
        kube.post(f"/api/v1/namespaces/{NAMESPACE}/pods", json={
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "claimed", "annotations": {
                "sunk.coreweave.com/required-nodes": node.slurm_name}},
            "spec": {"schedulerName": "sunk-recordings", "terminationGracePeriodSeconds": 1,
                     "resourceClaims": [{"name": "gpus",
                                         "resourceClaimTemplateName": "three-gpus"}],
                     "containers": [{"name": "c", "image": "busybox", "resources": {
                         "requests": {"cpu": "1", "memory": "100Mi"},
                         "claims": [{"name": "gpus"}]}}]}}).raise_for_status()

        def bound() -> dict[str, Any] | None:
            pod = kube.get(f"/api/v1/namespaces/{NAMESPACE}/pods/claimed").json()
            return pod if pod["spec"].get("nodeName") else None

        pod = _until("the Pod bound", bound)
        claims = kube.get(f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaims").json()["items"]
        (claim,) = claims
        claim["metadata"].pop("managedFields", None)
        save("resourceclaim-allocated", claim)
        save("slurm-job-of-claimed-pod",
             _job(slurm, pod["metadata"]["annotations"]["sunk.coreweave.com/job-id"]))
    finally:
        kube.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/claimed",
                    params={"gracePeriodSeconds": "0"})
        time.sleep(3)  # the job ends once the Pod is gone
        running.stop()
        kube.delete(f"/api/v1/namespaces/{NAMESPACE}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m testbed.recordings")
    p.add_argument("what", choices=("dra",))
    p.add_argument("out", type=Path)
    args = p.parse_args(argv)
    tb = cluster.Testbed.load()
    if tb is None or not tb.ready:
        print("no test bed is up: python -m testbed up", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    for path in record_dra(tb, args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
