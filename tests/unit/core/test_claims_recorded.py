"""The claims mapping on what the bed's API server and slurmrestd really answered (Slurm 24.11
and 26.05), recorded by ``python -m testbed.recordings dra tests/unit/core/recorded``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sunk.plans import claims
from sunk.slurm.job import gres_by_node
from sunk.slurm.text import expand_hostlist

RECORDED = Path(__file__).with_name("recorded")
RELEASES = ("24.11", "26.05")
MAPPING = claims.DeviceMapping(classes={"gpu.nvidia.com": "gpu"})


def recorded(name: str, release: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((RECORDED / f"{name}-{release}.json").read_text())
    return data


@pytest.mark.parametrize("release", RELEASES)
def test_each_nodes_gpus_of_a_two_node_job(release: str) -> None:
    job = recorded("slurm-job-gres-two-nodes", release)
    by_node = gres_by_node([job])
    assert set(by_node) == set(expand_hostlist(job["nodes"])) and len(by_node) == 2
    assert all(len(claims.gres_indexes(detail)) == 1 for detail in by_node.values())


@pytest.mark.parametrize("release", RELEASES)
def test_a_one_node_jobs_two_gpus(release: str) -> None:
    job = recorded("slurm-job-gres-one-node", release)
    ((node, detail),) = gres_by_node([job]).items()
    assert node == job["nodes"] and len(claims.gres_indexes(detail)) == 2


@pytest.mark.parametrize("release", RELEASES)
def test_a_nodes_published_devices(release: str) -> None:
    piece = recorded("resourceslice", release)
    devices = claims.node_devices([piece], piece["spec"]["nodeName"], MAPPING)
    assert sorted(devices) == list(range(8))


@pytest.mark.parametrize("release", RELEASES)
def test_the_claim_sunk_allocated_is_exactly_slurms_gpus_and_is_not_written_again(
        release: str) -> None:
    claim = recorded("resourceclaim-allocated", release)
    job = recorded("slurm-job-of-claimed-pod", release)
    piece = recorded("resourceslice", release)
    node = piece["spec"]["nodeName"]
    (user,) = claim["status"]["reservedFor"]
    pod = {"metadata": {"name": user["name"], "uid": user["uid"],
                        "namespace": claim["metadata"]["namespace"]},
           "spec": {"resourceClaims": [{"name": "gpus",
                                        "resourceClaimName": claim["metadata"]["name"]}]}}
    asked = claims.claim_requests(pod, {claim["metadata"]["name"]: claim}, MAPPING)
    assert [r.count for r in asked] == [3]
    (detail,) = gres_by_node([job]).values()
    want = claims.allocation(asked, claims.gres_indexes(detail),
                             claims.node_devices([piece], node, MAPPING), node, MAPPING)
    assert want[claim["metadata"]["name"]]["devices"]["results"] == claim["status"][
        "allocation"]["devices"]["results"]
    assert claims.claim_writes(claim, want[claim["metadata"]["name"]], pod) == []
