"""Pod + mappings + snapshot -> Slurm job description, on plain data."""

from __future__ import annotations

import re
from typing import Any

import pytest

from sunk.plans import fit
from sunk.plans.placement import (
    CORDONED,
    PASSING_REASONS,
    UNMAPPED,
    NodeInfo,
    Snapshot,
    why_excluded,
)
from sunk.plans.translate import (
    OWNED_ANNOTATIONS,
    POD_ANNOTATIONS,
    TranslateSettings,
    Unschedulable,
    job_description,
    unknown_annotations,
)
from sunk.slurm.job import parse_extra

SETTINGS = TranslateSettings(scheduler_name="sunk", placeholder_script="/opt/p.sh",
                             gpu_types={"H100": "h100", "A100": "a100"})
SNAP = Snapshot(slurm_to_k8s={"h1": "n1", "a1": "n2"},
                nodes={"n1": NodeInfo("n1", labels={"gpu.nvidia.com/model": "H100"}),
                       "n2": NodeInfo("n2", labels={"gpu.nvidia.com/model": "A100"})})


def pod(requests: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": "p", "uid": "1234-ab"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": requests}}],
                     **spec}}


def test_resources_round_up_and_identity_round_trips() -> None:
    job = job_description(pod({"cpu": "1500m", "memory": "1.5Gi"}), {}, SNAP, SETTINGS)
    assert job["cpus_per_task"] == 2
    assert job["memory_per_node"] == {"set": True, "number": 1536}
    assert "tres_per_node" not in job
    who, started = parse_extra(job["extra"])
    assert who is not None and (who.key, who.uid, who.scheduler) == ("ns/p", "1234-ab", "sunk")
    assert not started
    assert parse_extra(job["extra"] + ": started")[1]
    assert f"SUNK_JOB_EXTRA={job['extra']}" in job["environment"]
    assert job["script"] == "#!/bin/sh\nexec /opt/p.sh\n"


def test_gpus_typed_only_when_one_model_is_possible() -> None:
    untyped = job_description(pod({"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "2"}), {},
                              SNAP, SETTINGS)
    assert untyped["tres_per_node"] == "gres/gpu:2"
    typed = job_description(pod({"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "2"},
                                nodeSelector={"gpu.nvidia.com/model": "A100"}), {},
                            SNAP, SETTINGS)
    assert typed["tres_per_node"] == "gres/gpu:a100:2"
    assert typed["excluded_nodes"] == ["h1"]


def test_mappings_become_job_fields() -> None:
    mappings = {"account": "acct", "partition": "high", "priority": 100, "time_limit": 5,
                "shared": "user", "user_id": 1001, "excluded_nodes": ["x1"],
                "required_nodes": ["a1"], "current_working_directory": "/w"}
    job = job_description(pod({"cpu": "1", "memory": "1Gi"}), mappings, SNAP, SETTINGS)
    assert (job["account"], job["partition"]) == ("acct", "high")
    assert job["priority"] == {"set": True, "number": 100}
    assert job["time_limit"] == {"set": True, "number": 5}
    assert job["shared"] == ["user"]
    assert (job["user_id"], job["group_id"]) == ("1001", "1001")
    assert job["excluded_nodes"] == ["x1"] and job["required_nodes"] == ["a1"]
    assert job["current_working_directory"] == "/w"
    with_group = job_description(pod({"cpu": "1", "memory": "1Gi"}),
                                 {"user_id": 1001, "group_id": 1002}, SNAP, SETTINGS)
    assert (with_group["user_id"], with_group["group_id"]) == ("1001", "1002")


def test_init_containers_and_overhead_count_as_kubernetes_counts_them() -> None:
    p = pod({"cpu": "1", "memory": "1Gi"},
            initContainers=[{"name": "i", "resources": {"requests": {"cpu": "3"}}}],
            overhead={"cpu": "250m"})
    assert fit.pod_requests(p)["cpu"] == 3250  # millicores
    assert job_description(p, {}, SNAP, SETTINGS)["cpus_per_task"] == 4


def test_bad_quantity_is_an_error_not_a_crash() -> None:
    with pytest.raises(ValueError, match="invalid quantity"):
        job_description(pod({"cpu": "lots", "memory": "1Gi"}), {}, SNAP, SETTINGS)


# -- annotations sunk does not read -------------------------------------------------------------
PREFIX = "sunk.coreweave.com/"


def test_a_misspelt_annotation_gets_the_closest_known_key() -> None:
    found = unknown_annotations({f"{PREFIX}prioritty": "5", f"{PREFIX}acount": "a",
                                 f"{PREFIX}priority": "5"}, PREFIX)
    assert found == [(f"{PREFIX}acount", f"{PREFIX}account"),
                     (f"{PREFIX}prioritty", f"{PREFIX}priority")]


def test_a_far_off_annotation_gets_no_suggestion() -> None:
    assert unknown_annotations({f"{PREFIX}banana": "x", f"{PREFIX}": "y"}, PREFIX) == [
        (PREFIX, None), (f"{PREFIX}banana", None)]
    long_key = PREFIX + "z" * 500
    assert unknown_annotations({long_key: ""}, PREFIX) == [(long_key[:200], None)]


def test_known_owned_and_foreign_annotations_are_not_reported() -> None:
    annotations = {PREFIX + k: "v" for k in (*POD_ANNOTATIONS, *OWNED_ANNOTATIONS)}
    annotations |= {"other.io/prioritty": "5", "prioritty": "5", "kubectl.kubernetes.io/x": ""}
    assert unknown_annotations(annotations, PREFIX) == []
    # The same keys under another prefix are someone else's business.
    assert unknown_annotations({f"{PREFIX}prioritty": "5"}, "example.com/") == []


# -- required nodes that can never be had --------------------------------------------------------
TAINTED = {"key": "gpu-broken", "value": "true", "effect": "NoSchedule"}
CONFLICTS = Snapshot(
    slurm_to_k8s={"h1": "n1", "t1": "n-tainted", "c1": "n-cordoned"},
    nodes={"n1": NodeInfo("n1"), "n-tainted": NodeInfo("n-tainted", taints=(TAINTED,)),
           "n-cordoned": NodeInfo("n-cordoned", unschedulable=True)},
    slurm_nodes=frozenset({"h1", "t1", "c1", "orphan"}))
SMALL = {"cpu": "1", "memory": "1Gi"}


def test_a_required_node_in_excluded_nodes_is_unschedulable() -> None:
    with pytest.raises(Unschedulable, match=r"h1: in excluded-nodes") as caught:
        job_description(pod(SMALL), {"required_nodes": ["h1"], "excluded_nodes": ["h1"]},
                        CONFLICTS, SETTINGS)
    assert caught.value.reason == "PlacementConflict"
    assert "Invalid node name specified" in str(caught.value)


def test_a_required_node_with_an_untolerated_taint_is_unschedulable() -> None:
    with pytest.raises(Unschedulable, match=r"t1: taint gpu-broken=true:NoSchedule") as caught:
        job_description(pod(SMALL), {"required_nodes": ["t1"]}, CONFLICTS, SETTINGS)
    assert caught.value.reason == "PlacementConflict"
    # A cordoned node alongside does not make the conflict one that passes.
    with pytest.raises(Unschedulable):
        job_description(pod(SMALL), {"required_nodes": ["c1", "t1"]}, CONFLICTS, SETTINGS)


def test_a_required_node_with_a_tolerated_taint_is_fine() -> None:
    tolerant = pod(SMALL, tolerations=[{"key": "gpu-broken", "operator": "Exists"}])
    job = job_description(tolerant, {"required_nodes": ["t1"]}, CONFLICTS, SETTINGS)
    assert job["required_nodes"] == ["t1"]
    assert job["excluded_nodes"] == ["c1", "orphan"]


@pytest.mark.parametrize(("required", "said"), [
    (["c1"], "c1: unschedulable (cordoned)"),
    (["orphan"], "orphan: no slurmd Pod runs it"),
    (["c1", "orphan", "h1"], "c1: unschedulable (cordoned); orphan: no slurmd Pod runs it"),
])
def test_a_required_node_that_may_come_back_is_waited_for(required: list[str], said: str) -> None:
    with pytest.raises(LookupError, match=re.escape(said)) as caught:
        job_description(pod(SMALL), {"required_nodes": required}, CONFLICTS, SETTINGS)
    assert not isinstance(caught.value, ValueError)  # not Unschedulable: not rejected


def test_why_a_node_is_excluded() -> None:
    assert why_excluded(pod(SMALL), CONFLICTS, "h1") == ""
    assert why_excluded(pod(SMALL), CONFLICTS, "t1") == "taint gpu-broken=true:NoSchedule"
    assert why_excluded(pod(SMALL), CONFLICTS, "c1") == CORDONED
    assert why_excluded(pod(SMALL), CONFLICTS, "orphan") == UNMAPPED
    assert why_excluded(pod(SMALL), CONFLICTS, "never-heard-of") == UNMAPPED
    assert why_excluded(pod(SMALL, nodeSelector={"zone": "a"}), CONFLICTS, "h1") == (
        "nodeSelector zone=a")
    assert {CORDONED, UNMAPPED} == PASSING_REASONS
