"""The bed's GPU DRA driver stand-in: what it publishes for a Node, as NVIDIA's driver would,
and what sunk reads of it."""

from __future__ import annotations

from sunk.plans.claims import DeviceMapping, node_devices
from testbed import dradriver
from testbed.topology import GPU_PRODUCTS, NODE_GPUS, nodes


def node(i: int) -> dict[str, object]:
    n = nodes(i + 1)[i]
    return {"metadata": {"name": n.k8s_name, "uid": f"uid-{i}",
                         "labels": {"gpu.nvidia.com/model": n.gpu_model}}}


def test_a_nodes_slice_has_its_gpus_with_index_uuid_and_product() -> None:
    piece = dradriver.resource_slice(node(1))  # an a100 node
    spec = piece["spec"]
    assert (spec["driver"], spec["nodeName"]) == ("gpu.nvidia.com", "kwok-node-001")
    assert spec["pool"] == {"name": "kwok-node-001", "generation": 1, "resourceSliceCount": 1}
    assert [d["name"] for d in spec["devices"]] == [f"gpu-{i}" for i in range(NODE_GPUS)]
    first = spec["devices"][0]["attributes"]
    assert first["productName"] == {"string": GPU_PRODUCTS["a100"]}
    assert first["index"] == {"int": 0} and first["uuid"]["string"].startswith("GPU-")
    uuids = {d["attributes"]["uuid"]["string"] for d in spec["devices"]}
    assert len(uuids) == NODE_GPUS
    assert dradriver.resource_slice(node(1)) == piece, "the same Node, the same slice"
    owner = piece["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Node", "kwok-node-001", "uid-1")


def test_sunk_reads_the_bed_slices_indexes() -> None:
    devices = node_devices([dradriver.resource_slice(node(0))], "kwok-node-000",
                           DeviceMapping(driver=dradriver.DRIVER))
    assert devices == {i: ("kwok-node-000", f"gpu-{i}") for i in range(NODE_GPUS)}


def test_the_device_class_selects_the_drivers_devices() -> None:
    cls = dradriver.device_class()
    assert cls["metadata"]["name"] == "gpu.nvidia.com"
    assert cls["spec"]["selectors"] == [
        {"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}}]
