"""The kubelet's admission arithmetic, on plain data: requests, allocatable, what stays."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from sunk.plans import fit
from sunk.plans.fit import NodeUsage, allocatable, pod_requests, shortfall, sum_requests


def container(**requests: str) -> dict[str, Any]:
    return {"name": "c", "resources": {"requests": dict(requests)}}


def pod(*containers: dict[str, Any], init: list[dict[str, Any]] | None = None,
        overhead: dict[str, str] | None = None, node: str = "", phase: str = "Running",
        uid: str = "u1") -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = init
    if overhead:
        spec["overhead"] = overhead
    if node:
        spec["nodeName"] = node
    return {"metadata": {"uid": uid, "name": uid, "namespace": "ns"}, "spec": spec,
            "status": {"phase": phase}}


def test_app_containers_add_up_and_overhead_is_added() -> None:
    wants = pod_requests(pod(container(cpu="500m", memory="1Gi"), container(cpu="1"),
                             overhead={"cpu": "100m", "memory": "64Mi"}))
    assert wants == {"cpu": 1600, "memory": 2**30 + 64 * 2**20}


def test_an_init_container_larger_than_the_app_sets_the_request() -> None:
    wants = pod_requests(pod(container(cpu="1", memory="1Gi"),
                             init=[container(cpu="4"), container(memory="512Mi")]))
    assert wants == {"cpu": 4000, "memory": 2**30}


def test_sidecars_run_beside_the_app_and_beside_later_init_containers() -> None:
    sidecar = {**container(cpu="1"), "restartPolicy": "Always"}
    # the app (2) plus the sidecar (1) = 3; the init container after the sidecar: 1 + 2.5 = 3.5
    wants = pod_requests(pod(container(cpu="2"), init=[sidecar, container(cpu="2500m")]))
    assert wants == {"cpu": 3500}
    # an init container before the sidecar does not run beside it
    wants = pod_requests(pod(container(cpu="2"), init=[container(cpu="2500m"), sidecar]))
    assert wants == {"cpu": 3000}


def test_extended_resources_count_like_any_other() -> None:
    wants = pod_requests(pod(container(**{"nvidia.com/gpu": "4"}),
                             container(**{"nvidia.com/gpu": "2", "example.com/fpga": "1"})))
    assert wants == {"nvidia.com/gpu": 6, "example.com/fpga": 1}


def test_shortfall_names_each_resource_and_counts_the_pod_itself() -> None:
    alloc = allocatable({"status": {"allocatable": {
        "cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8", "pods": "110"}}})
    assert shortfall({"cpu": 1000}, alloc, {"cpu": 31000}) == []
    assert shortfall({"cpu": 1000}, alloc, {"cpu": 31500}) == ["cpu: needs 1, 0.5 of 32 left"]
    assert shortfall({"nvidia.com/gpu": 8}, alloc, {"nvidia.com/gpu": 2}) == [
        "nvidia.com/gpu: needs 8, 6 of 8 left"]
    assert shortfall({}, alloc, {"pods": 110}) == ["pods: needs 1, 0 of 110 left"]
    assert shortfall({"example.com/fpga": 1}, alloc, {}) == [
        "example.com/fpga: needs 1, 0 of 0 left"], "a resource the Node does not offer"
    assert shortfall({"memory": 2**30}, alloc, {"memory": 256 * 2**30}) == [
        "memory: needs 1Gi, 0Gi of 256Gi left"]
    assert shortfall({"cpu": 0}, {"pods": 1}, {}) == []
    assert shortfall({"cpu": 2000, "memory": 2**30}, {"pods": 1}, {"pods": 1}) == [
        "cpu: needs 2, 0 of 0 left", "memory: needs 1Gi, 0Gi of 0Gi left",
        "pods: needs 1, 0 of 1 left"], "every resource it lacks, in order"


def staying(p: dict[str, Any]) -> bool:
    name = str(p["metadata"]["name"])
    return name.startswith("ds") or name == "slurmd"


def test_usage_counts_only_what_stays_and_follows_each_pod() -> None:
    usage = NodeUsage(staying=staying, reserved=staying)
    ds = pod(container(cpu="4"), node="n1", uid="ds-1")
    usage.observe("ADDED", ds)
    usage.observe("ADDED", pod(container(cpu="8"), node="n1", uid="web"))  # evictable
    usage.observe("ADDED", pod(container(cpu="1"), uid="ds-2"))  # not bound yet
    assert usage.used("n1") == {"cpu": 4000, "pods": 1}
    usage.observe("MODIFIED", pod(container(cpu="1"), node="n1", uid="ds-2"))
    assert usage.used("n1") == {"cpu": 5000, "pods": 2}
    usage.observe("MODIFIED", pod(container(cpu="1"), node="n1", uid="ds-2", phase="Succeeded"))
    assert usage.used("n1") == {"cpu": 4000, "pods": 1}, "an ended Pod holds nothing"
    usage.observe("DELETED", ds)
    assert usage.used("n1") == {"cpu": 0, "pods": 0}
    assert usage.used("n2") == {}


def test_a_binding_counts_at_once_and_once_only() -> None:
    usage = NodeUsage(staying=lambda p: True, reserved=lambda p: False)
    mine = pod(container(cpu="2"), uid="mine")
    usage.observe("ADDED", mine)
    usage.assume_bound(mine, "n1")
    usage.assume_bound(mine, "n1")
    assert usage.used("n1") == {"cpu": 2000, "pods": 1}
    usage.observe("MODIFIED", pod(container(cpu="2"), node="n1", uid="mine"))
    assert usage.used("n1") == {"cpu": 2000, "pods": 1}
    assert usage.reserved_on("n1") == {}


def test_a_pods_events_from_before_its_binding_leave_its_room_held() -> None:
    """The job id's own write lands just before the binding: its event (no Node yet) comes
    after the binding was counted. Releasing the room then let 30 Pods be bound on a Node
    with room for 28 (CI)."""
    usage = NodeUsage(staying=lambda p: True, reserved=lambda p: False)
    mine = pod(container(cpu="2"), uid="mine")
    usage.observe("ADDED", mine)
    usage.assume_bound(mine, "n1")
    usage.observe("MODIFIED", pod(container(cpu="2"), uid="mine"))  # older than the binding
    assert usage.used("n1") == {"cpu": 2000, "pods": 1}
    usage.observe("MODIFIED", pod(container(cpu="2"), node="n1", uid="mine"))  # the binding
    usage.observe("MODIFIED", pod(container(cpu="2"), node="n1", uid="mine", phase="Succeeded"))
    assert usage.used("n1") == {"cpu": 0, "pods": 0}, "shown bound: events count again"


def test_a_failed_binding_holds_nothing_and_a_deleted_pod_nothing() -> None:
    usage = NodeUsage(staying=lambda p: True, reserved=lambda p: False)
    mine = pod(container(cpu="2"), uid="mine")
    usage.assume_bound(mine, "n1")
    usage.binding_failed(mine)
    assert usage.used("n1") == {"cpu": 0, "pods": 0}
    usage.observe("MODIFIED", mine)
    assert usage.used("n1") == {"cpu": 0, "pods": 0}
    usage.assume_bound(mine, "n1")
    usage.observe("DELETED", mine)  # gone before the watch showed it bound
    assert usage.used("n1") == {"cpu": 0, "pods": 0}
    assert usage._binding == set()


def test_reserved_is_what_slurm_must_leave_room_for() -> None:
    usage = NodeUsage(staying=lambda p: True, reserved=staying)
    usage.observe("ADDED", pod(container(cpu="1", memory="1Gi"), node="n1", uid="slurmd"))
    usage.observe("ADDED", pod(container(cpu="4"), node="n1", uid="ds-1"))
    usage.observe("ADDED", pod(container(cpu="3"), node="n1", uid="sunk-pod"))
    assert usage.reserved_on("n1") == {"cpu": 5000, "memory": 2**30, "pods": 2}
    assert usage.used("n1")["cpu"] == 8000


def test_sum_requests() -> None:
    assert sum_requests([pod(container(cpu="1")), pod(container(cpu="2"))]) == {
        "cpu": 3000, "pods": 2}


def test_capacity_agrees_when_slurm_gets_what_kubernetes_leaves() -> None:
    from sunk.plans.fit import Capacity, capacity_mismatch, describe

    alloc = allocatable({"status": {"allocatable": {
        "cpu": "33", "memory": "257Gi", "nvidia.com/gpu": "8"}}})
    slurmd = {"cpu": 1000, "memory": 2**30, "pods": 1}
    slurm = {"cpus": 32, "real_memory": 262144, "gres": "gpu:h100:8(S:0-1)"}
    assert capacity_mismatch(slurm, alloc, slurmd, gpu_resource="nvidia.com/gpu") == ()
    daemonset = {**slurmd, "cpu": 5000}  # a DaemonSet Pod of 4 CPUs as well
    mismatch = capacity_mismatch(slurm, alloc, daemonset, gpu_resource="nvidia.com/gpu")
    assert mismatch == (Capacity("cpu", 32, 28),) and mismatch[0].over
    assert describe(mismatch) == "cpu: Slurm 32, Kubernetes leaves 28"
    fewer = {"cpus": 30, "real_memory": {"set": True, "number": 1024}, "gres": ""}
    assert describe(capacity_mismatch(fewer, alloc, slurmd, gpu_resource="nvidia.com/gpu")) == (
        "cpu: Slurm 30, Kubernetes leaves 32; memory: Slurm 1024 MiB, Kubernetes leaves "
        "262144 MiB; nvidia.com/gpu: Slurm 0, Kubernetes leaves 8")
    assert not any(c.over for c in capacity_mismatch(fewer, alloc, slurmd,
                                                     gpu_resource="nvidia.com/gpu"))


@given(number=st.integers(min_value=0, max_value=10**15 - 1),
       suffix=st.sampled_from(["", "m", "k", "M", "G", "T", "Ki", "Mi", "Gi", "Ti", "E", "e3",
                               "n", "u", ".5", ".25m"]),
       resource=st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]))
def test_the_fast_reading_of_plain_quantities_agrees_with_the_general_parser(
        number: int, suffix: str, resource: str) -> None:
    import math

    from sunk.plans.fit import _units
    from sunk.quantity import Quantity

    text = f"{number}{suffix}"
    value = Quantity.parse(text).value
    assert _units(resource, text) == (math.ceil(value * 1000) if resource == "cpu"
                                      else math.ceil(value))


def test_a_pod_leaving_a_node_says_room_was_freed_there() -> None:
    freed: list[str] = []
    usage = NodeUsage(staying=lambda p: True, reserved=lambda p: False)
    usage.freed = freed.append
    usage.observe("ADDED", pod(container(cpu="1"), node="n1", uid="a"))
    usage.observe("MODIFIED", pod(container(cpu="1"), node="n1", uid="a"))
    assert freed == [], "still there"
    usage.observe("MODIFIED", pod(container(cpu="1"), node="n1", uid="a", phase="Succeeded"))
    assert freed == ["n1"]
    usage.observe("ADDED", pod(container(cpu="1"), node="n2", uid="b"))
    usage.observe("DELETED", pod(container(cpu="1"), node="n2", uid="b"))
    usage.observe("DELETED", pod(container(cpu="1"), uid="never-bound"))
    assert freed == ["n1", "n2"]


def test_pods_not_counted_by_slurm_are_those_that_stay_take_room_and_no_job_counts() -> None:
    def on_node(name: str, **meta: object) -> dict[str, object]:
        return {"metadata": {"namespace": "ns", "name": name, **meta},
                "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}

    pods = [on_node("stray"), on_node("counted"), on_node("daemon"), on_node("evicted"),
            {**on_node("done"), "status": {"phase": "Succeeded"}}, on_node("also-stray")]
    found = fit.not_counted_by_slurm(
        pods, staying=lambda p: p["metadata"]["name"] != "evicted",
        reserved=lambda p: p["metadata"]["name"] == "daemon",
        counted=lambda p: p["metadata"]["name"] == "counted")
    assert found == ["ns/also-stray", "ns/stray"]
