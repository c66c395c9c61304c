"""Pod + mappings + snapshot -> Slurm job description, on plain data."""

from __future__ import annotations

from typing import Any

import pytest

from sunk.placement import NodeInfo, Snapshot
from sunk.translate import TranslateSettings, job_description, parse_extra, pod_requests

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
    assert float(pod_requests(p)["cpu"]) == 3.25


def test_bad_quantity_is_an_error_not_a_crash() -> None:
    with pytest.raises(ValueError, match="invalid quantity"):
        job_description(pod({"cpu": "lots", "memory": "1Gi"}), {}, SNAP, SETTINGS)


def test_foreign_extra_is_not_ours() -> None:
    assert parse_extra("something else") == (None, False)
    assert parse_extra(None) == (None, False)
