"""The reporter of why Pods wait: which Pods get a PodScheduled condition, with what, how often,
and the queue's metrics."""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import REGISTRY

from sunk.loops.waiting import WaitingReporter
from sunk.slurm.job import Job
from tests.unit.core.stand_ins import Bed, bed, pod, raw_job, slurmd, who

Obj = dict[str, Any]


def status_patches(b: Bed) -> list[tuple[str, Obj]]:
    return [(path, body) for method, path, body in b.kube.seen
            if method == "PATCH" and path.endswith("/status")]


def pending(job_id: int, reason: str, **raw: Any) -> Job:
    return Job.from_api({**raw_job(job_id, reason=reason), **raw})


def waiting_gauge(namespace: str, partition: str, reason: str) -> float | None:
    return REGISTRY.get_sample_value("sunk_pods_waiting", {
        "namespace": namespace, "partition": partition, "reason": reason})


async def test_a_pod_whose_job_waits_shows_why_when_and_where_once() -> None:
    async with bed() as b:
        b.add_pod(pod())
        for name, k8s in (("slurm-1", "node-a"), ("slurm-2", "node-b")):
            b.cluster.slurmd_informer.cache[f"slurm/slurmd-{name}"] = slurmd(name, k8s)
            b.cluster.slurmd_informer.generation += 1
        start = int(time.time()) + 3600
        b.cluster.job_table.learn(pending(41, "Priority", partition="batch",
                                          start_time=start, scheduled_nodes="slurm-[2-3]"))
        reporter = WaitingReporter(b.cluster, b.executor)
        reporter.look()
        reporter.look()  # nothing new: no second write
        await b.settle()
        ((path, body),) = status_patches(b)
        assert path == "/api/v1/namespaces/ns/pods/p/status"
        assert body["metadata"] == {"uid": "aaaa-0001"}
        (condition,) = body["status"]["conditions"]
        assert (condition["type"], condition["status"], condition["reason"]) == (
            "PodScheduled", "False", "Pending")
        assert condition["message"].startswith("Slurm job 41 is pending (Priority): jobs of "
                                               "higher priority are ahead of it; Slurm expects")
        assert body["status"]["nominatedNodeName"] == "node-b"  # slurm-3 has no slurmd Pod
        assert waiting_gauge("ns", "batch", "Priority") == 1
        assert reporter.estimates == {41: start}


async def test_a_job_not_read_yet_or_just_submitted_or_a_bound_pod_shows_nothing() -> None:
    async with bed() as b:
        b.add_pod(pod())
        b.add_pod(pod("bbbb-0002", "bound", node="node-a"))
        b.cluster.job_table.learn(pending(41, ""))  # its reason not read yet
        b.cluster.job_table.learn(Job.from_api(raw_job(42, who("bbbb-0002", "bound"),
                                                       reason="Resources")))
        WaitingReporter(b.cluster, b.executor).look()
        await b.settle()
        assert status_patches(b) == []
        assert waiting_gauge("ns", "", "None") == 1


async def test_a_change_is_written_but_not_twice_within_10_seconds() -> None:
    async with bed() as b:
        b.add_pod(pod())
        reporter = WaitingReporter(b.cluster, b.executor)
        b.cluster.job_table.learn(pending(41, "Resources"))
        reporter.look()
        b.cluster.job_table.learn(pending(41, "Priority"))
        reporter.look()
        await b.settle()
        (first,) = status_patches(b)
        assert "(Resources)" in first[1]["status"]["conditions"][0]["message"]
        shown = b.executor.memory.shown["aaaa-0001"]
        assert shown.waiting.message.startswith("Slurm job 41 is pending (Resources)")


async def test_the_start_estimate_is_compared_with_the_start() -> None:
    async with bed() as b:
        b.add_pod(pod())
        reporter = WaitingReporter(b.cluster, b.executor)
        b.cluster.job_table.learn(pending(41, "Resources", start_time=int(time.time()) + 60))
        reporter.look()
        before = REGISTRY.get_sample_value("sunk_start_estimate_error_seconds_count") or 0
        b.cluster.job_table.learn(Job.from_api(raw_job(41, state="RUNNING", nodes="slurm-1")))
        reporter.look()
        after = REGISTRY.get_sample_value("sunk_start_estimate_error_seconds_count") or 0
        assert after - before == 1 and reporter.estimates == {}


async def test_the_job_id_write_carries_why_the_pod_waits_once() -> None:
    async with bed() as b:
        b.add_pod(pod())
        b.cluster.job_table.learn(pending(41, "Resources"))
        condition, nominated = b.executor.waiting.ride_along(b.cluster.pod("ns/p") or {}) or (
            {}, "x")
        assert (condition["reason"], nominated) == ("Pending", "")
        assert condition["message"].startswith("Slurm job 41 is pending (Resources)")
        assert b.executor.waiting.ride_along(b.cluster.pod("ns/p") or {}) is None  # shown
        WaitingReporter(b.cluster, b.executor).look()  # nothing new for a write of its own
        await b.settle()
        assert status_patches(b) == []
