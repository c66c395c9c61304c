"""A JobSet as one gang: its size, its Pods' ranks, and when it is no gang."""

from __future__ import annotations

from typing import Any

import pytest

from sunk.plans import jobset
from sunk.plans.gang import JOB_INDEX, Claim, Owners, assemble, claim, gang_name

PREFIX = "sunk.coreweave.com/"


def role(name: str, replicas: int | None = 1, parallelism: int | None = 1,
         completions: int | None = None, **more: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if parallelism is not None:
        spec["parallelism"] = parallelism
    spec["completions"] = completions if completions is not None else parallelism
    entry: dict[str, Any] = {"name": name, "template": {"spec": spec}, **more}
    if replicas is not None:
        entry["replicas"] = replicas
    return entry


# A CPU driver and two Jobs of four GPU workers each, as the API server keeps it.
TRAIN = {"metadata": {"name": "train", "namespace": "ns"},
         "spec": {"replicatedJobs": [role("driver"), role("workers", 2, 4)]}}


def member(name: str, replicated: str, job_index: int, completion: int | None,
           set_name: str = "train") -> dict[str, Any]:
    labels = {jobset.NAME_LABEL: set_name, jobset.REPLICATED_JOB_LABEL: replicated,
              jobset.JOB_INDEX_LABEL: str(job_index)}
    if completion is not None:
        labels[JOB_INDEX] = str(completion)
    owner = [{"apiVersion": "batch/v1", "kind": "Job", "controller": True, "uid": "j",
              "name": f"{set_name}-{replicated}-{job_index}"}]
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                         "labels": labels, "ownerReferences": owner}, "spec": {}}


def owners(*sets: dict[str, Any], known: bool = True,
           jobs: dict[str, tuple[int, int]] | None = None) -> Owners:
    by_name = {s["metadata"]["name"]: s for s in sets}
    return Owners(job=lambda ns, n: (jobs or {}).get(n), podgroup=lambda ns, n: None,
                  jobset=lambda ns, n: jobset.shape(by_name[n]) if n in by_name else None,
                  jobsets_known=known)


def test_the_shape_of_a_driver_and_workers() -> None:
    shape = jobset.shape(TRAIN)
    assert shape == jobset.Shape((jobset.Role("driver", 1, 1), jobset.Role("workers", 2, 4)))
    assert shape.size == 9
    # the JobSet's own order: the driver, then workers Job 0's Pods 0-3, then Job 1's
    assert shape.rank("driver", 0, 0) == 0
    assert shape.rank("workers", 0, 0) == 1
    assert shape.rank("workers", 1, 3) == 8
    for out_of_range in (("workers", 2, 0), ("workers", 0, 4), ("driver", 0, 1), ("x", 0, 0)):
        assert shape.rank(*out_of_range) is None


@pytest.mark.parametrize(("replicated", "why"), [
    ([role("w", 1, 4, 8)], "does not run its Pods all at once"),
    ([role("a"), role("b", dependsOn=[{"name": "a", "status": "Ready"}])], "waits for another"),
    ([], "lists no replicated jobs"),
    (["not an object"], "not an object"),
    ([role("w", replicas=-1)], "no valid replicas"),
    ([role("w", parallelism=True)], "does not run its Pods all at once"),
])
def test_a_jobset_that_does_not_run_all_at_once_is_no_gang(
        replicated: list[Any], why: str) -> None:
    assert why in jobset.shape({"spec": {"replicatedJobs": replicated}}).not_a_gang


def test_defaults_are_one_replica_of_one_pod() -> None:
    shape = jobset.shape({"spec": {"replicatedJobs": [
        {"name": "solo", "template": {"spec": {}}}]}})
    assert shape == jobset.Shape((jobset.Role("solo", 1, 1),))


def test_every_pod_of_a_jobset_is_one_gang_ranked_in_its_order() -> None:
    known = owners(TRAIN)
    pods = [member("driver-0", "driver", 0, 0)] + [
        member(f"w-{j}-{c}", "workers", j, c) for j in range(2) for c in range(4)]
    claims = [claim(p, PREFIX, known) for p in pods]
    assert claims[0] == Claim("jobset:train", "9", "0")
    assert claims[-1] == Claim("jobset:train", "9", "8")
    gang = assemble("ns", "jobset:train", [(p, c) for p, c in zip(pods, claims, strict=True)
                                           if c is not None], max_size=64)
    assert gang.complete and not gang.problem
    assert [m.key for m in gang.members] == [f"ns/{p['metadata']['name']}" for p in pods]


def test_a_jobset_not_seen_yet_makes_its_pods_wait() -> None:
    pod = member("driver-0", "driver", 0, 0)
    assert gang_name(pod, PREFIX) == "jobset:train"
    assert claim(pod, PREFIX, owners()) == Claim("jobset:train", None,
                                                 waiting="JobSet train not seen yet")
    unwatched = claim(pod, PREFIX, owners(known=False))
    assert unwatched is not None and "not watched" in unwatched.waiting


def test_a_jobset_that_is_no_gang_leaves_its_pods_to_their_jobs() -> None:
    staged = {"metadata": {"name": "staged"}, "spec": {"replicatedJobs": [
        role("a", 1, 2), role("b", 1, 2, dependsOn=[{"name": "a", "status": "Complete"}])]}}
    pod = member("a-0", "a", 0, 0, set_name="staged")
    known = owners(staged, jobs={"staged-a-0": (2, 2)})
    assert gang_name(pod, PREFIX, known) == "job:staged-a-0"
    assert claim(pod, PREFIX, known) == Claim("job:staged-a-0", "2", "0")


def test_a_jobset_started_in_order_or_naming_another_scheduler_is_no_gang() -> None:
    in_order = {"spec": {"startupPolicy": {"startupPolicyOrder": "InOrder"},
                         "replicatedJobs": [role("a"), role("b")]}}
    assert "in order" in jobset.shape(in_order).not_a_gang
    ours = role("w")
    ours["template"]["spec"]["template"] = {"spec": {"schedulerName": "sunk"}}
    theirs = role("d")
    theirs["template"]["spec"]["template"] = {"spec": {"schedulerName": "default-scheduler"}}
    assert not jobset.shape({"spec": {"replicatedJobs": [ours]}}, "sunk").not_a_gang
    mixed = jobset.shape({"spec": {"replicatedJobs": [ours, theirs]}}, "sunk")
    assert "another scheduler" in mixed.not_a_gang


def test_pods_of_jobs_that_are_not_indexed_are_ranked_by_name() -> None:
    workers = role("workers", 1, 3, completionMode="NonIndexed")
    workers["template"]["spec"]["completionMode"] = "NonIndexed"
    unindexed = {"metadata": {"name": "train"},
                 "spec": {"replicatedJobs": [role("driver"), workers]}}
    known = owners(unindexed)
    assert not jobset.shape(unindexed).indexed
    pods = [member("driver-0", "driver", 0, 0)] + [
        member(f"w-{i}", "workers", 0, None) for i in range(3)]
    claims = [claim(p, PREFIX, known) for p in pods]
    assert {c.rank for c in claims if c is not None} == {None}  # no collision: name order
    gang = assemble("ns", "jobset:train", [(p, c) for p, c in zip(pods, claims, strict=True)
                                           if c is not None], max_size=64)
    assert gang.complete


def test_the_cache_keeps_only_what_the_shape_reads() -> None:
    big = {"metadata": {"name": "train", "namespace": "ns", "managedFields": [{}]},
           "spec": {"startupPolicy": {"startupPolicyOrder": "AnyOrder"},
                    "network": {"enableDNSHostnames": True},
                    "replicatedJobs": [{
                        "name": "w", "replicas": 2, "groupName": "g",
                        "template": {"metadata": {"labels": {"a": "b"}}, "spec": {
                            "parallelism": 4, "completions": 4, "completionMode": "Indexed",
                            "backoffLimit": 3, "template": {"spec": {
                                "schedulerName": "sunk", "containers": [{"name": "c"}]}}}}}]},
           "status": {"replicatedJobsStatus": []}}
    kept = jobset.trim(big)
    assert kept == {
        "metadata": {"name": "train", "namespace": "ns"},
        "spec": {"startupPolicy": {"startupPolicyOrder": "AnyOrder"}, "replicatedJobs": [{
            "name": "w", "replicas": 2, "template": {"spec": {
                "parallelism": 4, "completions": 4, "completionMode": "Indexed",
                "template": {"spec": {"schedulerName": "sunk"}}}}}]}}
    assert jobset.shape(kept, "sunk") == jobset.shape(big, "sunk")
    assert jobset.trim({"metadata": {"name": "x"}, "spec": None}) == {"metadata": {"name": "x"}}
