"""ResourceClaims -> Slurm GRES, and Slurm's GPU indexes -> the claims' allocation
(sunk.plans.claims), on plain data: claims, slices and slurmrestd records as the API server and
Slurm write them."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from sunk.plans import claims
from sunk.plans.claims import ClaimRequest, DeviceMapping, NotReady, Unmappable
from sunk.slurm.job import gres_by_node

H100 = "NVIDIA H100 80GB HBM3"
MAPPING = DeviceMapping(classes={"gpu.nvidia.com": "gpu"}, driver="gpu.nvidia.com",
                        types={H100: "h100", "NVIDIA A100 80GB PCIe": "a100"})


def claim(name: str, *requests: dict[str, Any], reserved: list[dict[str, Any]] | None = None,
          allocation: dict[str, Any] | None = None, **devices: Any) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if reserved is not None:
        status["reservedFor"] = reserved
    if allocation is not None:
        status["allocation"] = allocation
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
            "spec": {"devices": {"requests": list(requests), **devices}}, "status": status}


def exactly(name: str = "gpu", count: int | None = 2, cls: str = "gpu.nvidia.com",
            *selectors: str, **more: Any) -> dict[str, Any]:
    exact: dict[str, Any] = {"deviceClassName": cls, "allocationMode": "ExactCount", **more}
    if count is not None:
        exact["count"] = count
    if selectors:
        exact["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {"name": name, "exactly": exact}


def pod(*entries: dict[str, Any], generated: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "pod-uid"},
            "spec": {"resourceClaims": list(entries)},
            "status": {"resourceClaimStatuses": [{"name": k, "resourceClaimName": v}
                                                 for k, v in (generated or {}).items()]}}


NAMED = {"name": "gpus", "resourceClaimName": "train-gpus"}
TEMPLATED = {"name": "gpus", "resourceClaimTemplateName": "two-gpus"}


# -- which claims ---------------------------------------------------------------------------------
def test_a_named_claim_and_a_templates_generated_claim() -> None:
    assert claims.claim_names(pod(NAMED)) == [("gpus", "train-gpus")]
    assert claims.claim_names(pod(TEMPLATED)) == [("gpus", None)]
    assert claims.claim_names(pod(TEMPLATED, generated={"gpus": "p-gpus-x7k2"})) == [
        ("gpus", "p-gpus-x7k2")]
    assert claims.claim_names({"spec": {}}) == [] and not claims.uses_claims({"spec": {}})


def test_a_claim_not_made_or_not_seen_yet_waits() -> None:
    with pytest.raises(NotReady, match="not been made"):
        claims.claim_requests(pod(TEMPLATED), {}, MAPPING)
    with pytest.raises(NotReady, match="not found"):
        claims.claim_requests(pod(NAMED), {}, MAPPING)


# -- requests as GRES ---------------------------------------------------------------------------
def requests(*items: dict[str, Any], **devices: Any) -> tuple[ClaimRequest, ...]:
    return claims.claim_requests(pod(NAMED), {"train-gpus": claim("train-gpus", *items,
                                                                  **devices)}, MAPPING)


def test_a_count_of_a_mapped_class_is_that_many_gres() -> None:
    asked = requests(exactly(count=2))
    assert asked == (ClaimRequest("train-gpus", "gpu", "gpu", None, 2),)
    assert claims.gres(asked) == "gres/gpu:2"
    assert requests(exactly(count=None))[0].count == 1, "count defaults to 1"


@pytest.mark.parametrize("expression", [
    f'device.attributes["gpu.nvidia.com"].productName == "{H100}"',
    f'device.attributes["gpu.nvidia.com"]["productName"] == "{H100}"',
    f'device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].productName == '
    f'"{H100}"',
])
def test_a_selector_on_the_model_is_the_gres_type(expression: str) -> None:
    asked = requests(exactly("gpu", 4, "gpu.nvidia.com", expression))
    assert claims.gres(asked) == "gres/gpu:h100:4"


def test_requests_and_extended_resource_gpus_add_up() -> None:
    asked = requests(exactly("a", 1), exactly("b", 2))
    assert claims.gres(asked) == "gres/gpu:3"
    assert claims.gres(asked, 2, "h100") == "gres/gpu:h100:5"
    assert claims.gres(()) is None and claims.gres((), 1) == "gres/gpu:1"


@pytest.mark.parametrize(("item", "devices", "reason", "says"), [
    (exactly(cls="fpga.example.com"), {}, "UnknownDeviceClass", "not mapped"),
    (exactly("gpu", 1, "gpu.nvidia.com", 'device.capacity["gpu.nvidia.com"].memory.'
             'compareTo(quantity("40Gi")) >= 0'), {}, "UnmappableClaim", "cannot be told"),
    (exactly("gpu", 1, "gpu.nvidia.com", 'device.driver == "other.example.com"'), {},
     "UnmappableClaim", "driver"),
    (exactly("gpu", 1, "gpu.nvidia.com",
             'device.attributes["gpu.nvidia.com"].productName == "Tesla T4"'), {},
     "UnmappableClaim", "no GRES type"),
    (exactly(adminAccess=True), {}, "UnmappableClaim", "admin access"),
    (exactly(allocationMode="All", count=None), {}, "UnmappableClaim", "allocationMode All"),
    ({"name": "gpu", "firstAvailable": [{"name": "a", "deviceClassName": "gpu.nvidia.com"}]},
     {}, "UnmappableClaim", "prioritized"),
    (exactly(count=0), {}, "UnmappableClaim", "count 0"),
    (exactly(), {"constraints": [{"matchAttribute": "gpu.nvidia.com/pciRoot"}]},
     "UnmappableClaim", "constraints"),
])
def test_what_slurm_cannot_be_told_is_refused_with_the_reason(
        item: dict[str, Any], devices: dict[str, Any], reason: str, says: str) -> None:
    with pytest.raises(Unmappable, match=says) as refused:
        requests(item, **devices)
    assert refused.value.reason == reason


def test_two_models_in_one_pod_are_refused() -> None:
    h100 = f'device.attributes["gpu.nvidia.com"].productName == "{H100}"'
    a100 = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA A100 80GB PCIe"'
    asked = requests(exactly("a", 1, "gpu.nvidia.com", h100),
                     exactly("b", 1, "gpu.nvidia.com", a100))
    with pytest.raises(Unmappable, match="different kinds"):
        claims.gres(asked)


def test_a_claim_in_use_by_another_pod_waits_and_one_of_this_pod_is_its_own() -> None:
    other = [{"resource": "pods", "name": "q", "uid": "q-uid"}]
    held = {"train-gpus": claim("train-gpus", exactly(), reserved=other)}
    with pytest.raises(NotReady, match="in use by q"):
        claims.claim_requests(pod(NAMED), held, MAPPING)
    mine = {"train-gpus": claim("train-gpus", exactly(), reserved=[
        {"resource": "pods", "name": "p", "uid": "pod-uid"}])}
    assert claims.claim_requests(pod(NAMED), mine, MAPPING)[0].count == 2


# -- Slurm's indexes ----------------------------------------------------------------------------
@pytest.mark.parametrize(("detail", "indexes"), [
    ("gpu:h100:2(IDX:0-1)", [0, 1]),
    ("gpu:2(IDX:3,5)", [3, 5]),
    ("gpu:h100:4(IDX:0,2-3,6)", [0, 2, 3, 6]),
    ("gpu:a100:1(IDX:7),nic:1(IDX:0)", [7]),
    ("nic:1(IDX:0)", []), ("gpu(CNT:2)", []), ("", []), ("gpu:h100:0(IDX:N/A)", []),
])
def test_gres_detail_gives_the_gpu_indexes(detail: str, indexes: list[int]) -> None:
    assert claims.gres_indexes(detail) == indexes


#: A running job's record as slurmrestd 24.11 (data parser v0.0.42) writes it, trimmed to the
#: fields read here; 26.05 (v0.0.42 through v0.0.45) writes these fields alike.
RECORD_24_11 = {
    "job_id": 41, "nodes": "a100-001,h100-000", "job_state": ["RUNNING"],
    "gres_detail": ["gpu:h100:2(IDX:0-1)", "gpu:a100:2(IDX:4-5)"],
    "job_resources": {"select_type": ["CPU", "MEMORY"], "nodes": {
        "count": 2, "select_type": ["AVAILABLE"], "list": "a100-001,h100-000", "whole": False,
        "allocation": [{"index": 0, "name": "h100-000", "cpus": {"count": 1, "used": 0},
                        "memory": {"used": 0, "allocated": 1024}, "sockets": []},
                       {"index": 1, "name": "a100-001", "cpus": {"count": 1, "used": 0},
                        "memory": {"used": 0, "allocated": 1024}, "sockets": []}]},
        "cpus": 2, "threads_per_core": {"set": True, "infinite": False, "number": 1}},
}


def test_each_nodes_gres_follows_slurms_node_order_not_the_hostlists() -> None:
    assert gres_by_node([RECORD_24_11]) == {"h100-000": "gpu:h100:2(IDX:0-1)",
                                            "a100-001": "gpu:a100:2(IDX:4-5)"}
    one = {"job_id": 7, "nodes": "h100-002", "gres_detail": ["gpu:2(IDX:6-7)"]}
    assert gres_by_node([one]) == {"h100-002": "gpu:2(IDX:6-7)"}
    assert gres_by_node([{"job_id": 8, "nodes": "h100-002"}]) == {}


# -- the allocation -----------------------------------------------------------------------------
def slice_of(node: str, *, driver: str = "gpu.nvidia.com", count: int = 8,
             qualified: bool = False) -> dict[str, Any]:
    key = "gpu.nvidia.com/index" if qualified else "index"
    return {"spec": {"driver": driver, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{i}", "attributes": {
                         key: {"int": i}, "productName": {"string": H100}}}
                         for i in range(count)]}}


SLICES = [slice_of("n1"), slice_of("n2"), slice_of("n1", driver="other.example.com")]


def test_a_nodes_devices_by_index() -> None:
    devices = claims.node_devices(SLICES, "n1", MAPPING)
    assert devices[3] == ("n1", "gpu-3") and len(devices) == 8
    assert claims.node_devices([slice_of("n1", qualified=True)], "n1", MAPPING)[0] == (
        "n1", "gpu-0")
    assert claims.node_devices(SLICES, "n9", MAPPING) == {}


def test_the_claims_get_exactly_the_devices_slurm_gave_request_by_request() -> None:
    asked = (ClaimRequest("a", "gpu", "gpu", None, 1), ClaimRequest("b", "x", "gpu", None, 2))
    got = claims.allocation(asked, [6, 2, 3], claims.node_devices(SLICES, "n1", MAPPING), "n1",
                            MAPPING)
    assert got["a"]["devices"]["results"] == [
        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-2"}]
    assert [r["device"] for r in got["b"]["devices"]["results"]] == ["gpu-3", "gpu-6"]
    assert got["b"]["nodeSelector"] == {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}


def test_fewer_gpus_than_asked_or_an_unpublished_index_waits() -> None:
    asked = (ClaimRequest("a", "gpu", "gpu", None, 2),)
    devices = claims.node_devices(SLICES, "n1", MAPPING)
    with pytest.raises(NotReady, match="gave the job 1 GPUs"):
        claims.allocation(asked, [1], devices, "n1", MAPPING)
    with pytest.raises(NotReady, match=r"no gpu\.nvidia\.com device of index 9"):
        claims.allocation(asked, [1, 9], devices, "n1", MAPPING)


def test_the_writes_allocate_and_reserve_once() -> None:
    asked = (ClaimRequest("train-gpus", "gpu", "gpu", None, 2),)
    want = claims.allocation(asked, [0, 1], claims.node_devices(SLICES, "n1", MAPPING), "n1",
                             MAPPING)["train-gpus"]
    me = {"resource": "pods", "name": "p", "uid": "pod-uid"}
    fresh = claim("train-gpus", exactly())
    assert claims.claim_writes(fresh, want, pod(NAMED)) == [
        {"allocation": want, "reservedFor": [me]}]
    done = copy.deepcopy(fresh)
    done["status"] = {"allocation": want, "reservedFor": [me]}
    assert claims.claim_writes(done, want, pod(NAMED)) == [], "written once"
    unreserved = copy.deepcopy(fresh)
    unreserved["status"] = {"allocation": want}
    assert claims.claim_writes(unreserved, want, pod(NAMED)) == [{"reservedFor": [me]}]


def test_an_allocation_of_other_devices_is_taken_back_before_slurms_is_written() -> None:
    asked = (ClaimRequest("train-gpus", "gpu", "gpu", None, 2),)
    devices = claims.node_devices(SLICES, "n1", MAPPING)
    old = claims.allocation(asked, [4, 5], devices, "n1", MAPPING)["train-gpus"]
    new = claims.allocation(asked, [0, 1], devices, "n1", MAPPING)["train-gpus"]
    stale = claim("train-gpus", exactly(), allocation=old)
    writes = claims.claim_writes(stale, new, pod(NAMED))
    assert writes[0] == {"allocation": None, "reservedFor": None}
    assert writes[1]["allocation"] == new


# -- in the Pod's job ---------------------------------------------------------------------------
def translated(p: dict[str, Any], known: dict[str, Any] | None, *,
               mapping: DeviceMapping | None = MAPPING, free: dict[str, int] | None = None,
               snap: Any = None) -> dict[str, Any]:
    from sunk.plans.placement import Snapshot
    from sunk.plans.translate import TranslateSettings, job_description

    p = copy.deepcopy(p)
    p["spec"]["containers"] = [{"name": "c", "resources": {"requests": {"cpu": "1",
                                                                        "memory": "1Gi"}}}]
    seen = None if known is None else claims.ClaimsSeen(known, free or {})
    return job_description(p, {}, snap or Snapshot({}, {}), TranslateSettings(
        scheduler_name="sunk", placeholder_script="/p.sh", devices=mapping), seen)


def test_the_pods_job_asks_slurm_for_its_claims_gpus() -> None:
    known = {"train-gpus": claim("train-gpus", exactly(count=3))}
    assert translated(pod(NAMED), known)["tres_per_node"] == "gres/gpu:3"


def test_a_pod_with_claims_waits_until_they_are_read_and_is_refused_without_dra() -> None:
    from sunk.plans.translate import NotYet, Unschedulable

    with pytest.raises(NotYet, match="not read yet"):
        translated(pod(NAMED), None)
    with pytest.raises(NotYet, match="not found"):
        translated(pod(NAMED), {})
    with pytest.raises(Unschedulable) as refused:
        translated(pod(NAMED), {}, mapping=None)
    assert refused.value.reason == "UnmappableClaim"
    with pytest.raises(Unschedulable) as unknown:
        translated(pod(NAMED), {"train-gpus": claim("train-gpus", exactly(cls="x"))})
    assert unknown.value.reason == "UnknownDeviceClass"


def test_devices_another_claim_holds_are_never_handed_out_again() -> None:
    asked = (ClaimRequest("train-gpus", "gpu", "gpu", None, 2),)
    devices = claims.node_devices(SLICES, "n1", MAPPING)
    want = claims.allocation(asked, [0, 1], devices, "n1", MAPPING)
    theirs = claim("other", exactly(), allocation=claims.allocation(
        (ClaimRequest("other", "gpu", "gpu", None, 1),), [1], devices, "n1", MAPPING)["other"])
    elsewhere = claim("far", exactly(), allocation=claims.allocation(
        (ClaimRequest("far", "gpu", "gpu", None, 1),), [1],
        claims.node_devices(SLICES, "n2", MAPPING), "n2", MAPPING)["far"])
    assert claims.held_elsewhere(want, [theirs, elsewhere]) == ["gpu-1 (claim ns/other)"]
    mine = claim("train-gpus", exactly(), allocation=want["train-gpus"])
    assert claims.held_elsewhere(want, [mine, elsewhere]) == []


# -- devices Slurm does not know are taken --------------------------------------------------------
def test_free_devices_leave_out_those_claims_hold_for_pods_slurm_does_not_know() -> None:
    devices = claims.node_devices(SLICES, "n1", MAPPING)

    def held(name: str, node: str, indexes: list[int], user: str) -> dict[str, Any]:
        got = claims.allocation((ClaimRequest(name, "gpu", "gpu", None, len(indexes)),),
                                indexes, claims.node_devices(SLICES, node, MAPPING) or devices,
                                node, MAPPING)[name]
        return claim(name, exactly(), allocation=got,
                     reserved=[{"resource": "pods", "name": user, "uid": f"{user}-uid"}])

    theirs = held("kube", "n1", [0, 1, 2], "web")  # kube-scheduler's Pod
    ours = held("sunk", "n1", [3], "p")  # sunk's Pod: Slurm counts it
    far = held("far", "n2", [0], "web2")
    free = claims.free_devices(SLICES, [theirs, ours, far], MAPPING,
                               lambda namespace, name: name == "p")
    assert free == {"n1": 5, "n2": 7}


def test_a_pod_is_kept_off_nodes_short_of_free_devices_and_waits_when_all_are() -> None:
    from sunk.plans.placement import NodeInfo, Snapshot
    from sunk.plans.translate import NoRoom

    snap = Snapshot({"s1": "n1", "s2": "n2"}, {"n1": NodeInfo("n1"), "n2": NodeInfo("n2")})
    known = {"train-gpus": claim("train-gpus", exactly(count=3))}
    job = translated(pod(NAMED), known, free={"n1": 2, "n2": 8}, snap=snap)
    assert job["excluded_nodes"] == ["s1"] and job["tres_per_node"] == "gres/gpu:3"
    with pytest.raises(NoRoom, match="free of claims Slurm does not know"):
        translated(pod(NAMED), known, free={"n1": 2, "n2": 1}, snap=snap)
    assert "excluded_nodes" not in translated(pod(NAMED), known, snap=snap)
