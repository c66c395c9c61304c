"""The bed's stand-in for a GPU DRA driver, as kwok is for the kubelet: for each kwok Node it
publishes a ResourceSlice of that node's GPUs (``resource.k8s.io/v1``) the way NVIDIA's driver
does (devices ``gpu-0`` .. ``gpu-7`` with their ``index``, ``uuid`` and ``productName``), and
the DeviceClass ``gpu.nvidia.com`` that selects them.

Kept in step with the Nodes: a new Node gets its slice within a poll, and a Node's slice is
owned by it (the garbage collector deletes it with the Node). Run by the bed::

    python -m testbed.dradriver          # until stopped
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx

from testbed.topology import GPU_MODELS, GPU_PRODUCTS, NODE_GPUS

DRIVER = "gpu.nvidia.com"
API = "/apis/resource.k8s.io/v1"
#: The bed's kwok Nodes (the Nodes it makes carry this annotation).
FAKE = ("kwok.x-k8s.io/node", "fake")
POLL_SECONDS = 2.0


def device_class() -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": DRIVER},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}


def slice_name(node: str) -> str:
    return f"{node}-{DRIVER}"


def resource_slice(node: dict[str, Any]) -> dict[str, Any]:
    """The slice of a Node's GPUs, of the model its label names."""
    meta = node["metadata"]
    name = meta["name"]
    model = (meta.get("labels") or {}).get("gpu.nvidia.com/model", "")
    gres_type = dict(GPU_MODELS).get(model, "h100")
    product = GPU_PRODUCTS.get(gres_type, gres_type)
    devices = [{"name": f"gpu-{i}", "attributes": {
        "index": {"int": i}, "productName": {"string": product},
        "uuid": {"string": f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{name}/{i}')}"}},
        "capacity": {"memory": {"value": "80Gi"}}} for i in range(NODE_GPUS)]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": slice_name(name), "ownerReferences": [{
                "apiVersion": "v1", "kind": "Node", "name": name, "uid": meta["uid"],
                "controller": True}]},
            "spec": {"driver": DRIVER, "nodeName": name, "devices": devices,
                     "pool": {"name": name, "generation": 1, "resourceSliceCount": 1}}}


def sync(kube: httpx.Client) -> None:
    """One pass: the DeviceClass, and a slice for every kwok Node that has none."""
    found = kube.get(f"{API}/deviceclasses/{DRIVER}")
    if found.status_code == 404:
        kube.post(f"{API}/deviceclasses", json=device_class()).raise_for_status()
    else:
        found.raise_for_status()  # an API server starting up (503): retried, not a crash

    def items(path: str) -> list[dict[str, Any]]:
        r = kube.get(path)
        r.raise_for_status()
        listed: list[dict[str, Any]] = r.json()["items"]
        return listed

    have = {s["metadata"]["name"] for s in items(f"{API}/resourceslices")}
    for node in items("/api/v1/nodes"):
        annotations = node["metadata"].get("annotations") or {}
        if annotations.get(FAKE[0]) != FAKE[1] or slice_name(node["metadata"]["name"]) in have:
            continue
        r = kube.post(f"{API}/resourceslices", json=resource_slice(node))
        if r.status_code != 409:
            r.raise_for_status()


def main() -> None:
    from testbed import cluster

    tb = cluster.Testbed.load()
    if tb is None:
        raise SystemExit("no test bed")
    while True:
        try:
            with tb.kube() as kube:
                while True:
                    sync(kube)
                    time.sleep(POLL_SECONDS)
        except (httpx.HTTPError, KeyError, ValueError) as exc:  # an API server away or odd
            print(f"dradriver: {exc!r}; retrying", flush=True)
            time.sleep(POLL_SECONDS)


if __name__ == "__main__":
    main()
