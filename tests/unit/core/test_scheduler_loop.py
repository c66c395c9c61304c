"""The scheduler's loop against HTTP-level stand-ins of the API server and slurmrestd: what a
reconcile of one Pod sends (submissions, annotations, bindings, cancellations, deletions), and
what the Pod handler, the worker and the orphan collector do."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from sunk.loops import orphans
from sunk.loops.scheduler import Scheduler
from sunk.loops.workqueue import WorkQueue
from sunk.plans import actions as do
from sunk.plans.keys import GangKey, PodKey, QueueKey, ReleaseJob
from sunk.policy import PolicyStore
from sunk.runtime import metrics
from sunk.slurm.client import SlurmError
from sunk.slurm.job import PodIdentity, admin_comment, job_extra, member_id
from sunk.wiring import connect_scheduler
from tests.unit.core import stand_ins
from tests.unit.core.stand_ins import (
    JOB_ID,
    NAME,
    POD_UID,
    POLICIES,
    PREFIX,
    REJECTED,
    SLURM,
    Bed,
    answer,
    down,
    drop,
    job,
    namespace,
    node,
    owned,
    pod,
    put,
    raw_job,
    slurmd,
    stop,
    until,
    who,
)

UID = "aaaa-0001"
SUBMIT = f"{SLURM}/job/submit"
POD_PATH = "/api/v1/namespaces/ns/pods/p"


@functools.cache
def policies() -> PolicyStore:
    return PolicyStore.from_directory(POLICIES, settings={"killWaitSeconds": 30,
                                                          "annotationPrefix": PREFIX})


@dataclass
class Loop:
    bed: Bed
    scheduler: Scheduler


@pytest.fixture
async def loop() -> AsyncIterator[Loop]:
    async with stand_ins.bed() as bed:
        scheduler = Scheduler(bed.cluster, bed.watch, bed.executor, policies())
        connect_scheduler(scheduler)
        put(bed.cluster.namespace_informer, namespace())
        put(bed.cluster.node_informer, node())
        put(bed.cluster.slurmd_informer, slurmd())
        bed.slurm.routes[("POST", SUBMIT)] = answer(200, {"job_id": 41})
        yield Loop(bed, scheduler)
        scheduler.queue.close()


def reasons(bed: Bed) -> list[str]:
    return [e["reason"] for e in bed.events()]


# -- a new Pod ------------------------------------------------------------------------------------

async def test_a_new_pod_gets_a_job_and_its_id_written(loop: Loop) -> None:
    bed, scheduler = loop.bed, loop.scheduler
    bed.add_pod(pod())
    assert len(scheduler.queue) == 1, "the Pod handler queued it"
    await scheduler.reconcile(PodKey("ns", "p"))
    (sent,) = bed.slurm.calls("POST", SUBMIT)
    job_desc = sent["job"]
    assert job_desc["extra"] == job_extra(who())
    assert job_desc["admin_comment"] == admin_comment(who())
    assert job_desc["cpus_per_task"] == 2
    assert job_desc["memory_per_node"] == {"set": True, "number": 1024}
    assert "excluded_nodes" not in job_desc
    assert any(e.startswith("SUNK_JOB_TOKEN=sunk-job.") for e in job_desc["environment"])
    # believed at once, written in the background: the next reconcile (a binding) need not
    # wait for the API server's answer
    assert bed.cluster.assumed.pending_annotations(UID)[JOB_ID] == "41"
    await bed.settle()
    (patch,) = bed.kube.calls("PATCH", POD_PATH)  # with why the Pod waits (its status)
    assert patch["metadata"] == {"uid": UID,
                                 "annotations": {JOB_ID: "41", POD_UID: UID, REJECTED: None}}
    assert patch["status"]["conditions"][0]["reason"] == "Pending"
    assert bed.cluster.jobs.by_uid == {UID: 41}
    record = bed.cluster.state.pods["ns/p"]
    assert record.job_description is not None and record.phase == "Pending"

    await scheduler.reconcile(PodKey("ns", "p"))  # the watch has not shown the annotation yet
    assert len(bed.slurm.calls("POST", SUBMIT)) == 1, "submitted once"
    assert len(bed.kube.calls("PATCH")) == 1, "written once"
    assert bed.cluster.state.pods["ns/p"].job_id == 41


async def test_a_slurm_node_on_a_tainted_node_is_excluded(loop: Loop) -> None:
    bed = loop.bed
    put(bed.cluster.node_informer, node("node-b", taints=[
        {"key": "gpu", "value": "broken", "effect": "NoSchedule"}]))
    put(bed.cluster.slurmd_informer, slurmd("slurm-2", "node-b"))
    put(bed.cluster.pod_informers[0], pod())
    await loop.scheduler.reconcile(PodKey("ns", "p"))
    (sent,) = bed.slurm.calls("POST", SUBMIT)
    assert sent["job"]["excluded_nodes"] == ["slurm-2"]


async def test_a_nodes_taint_and_its_bound_pods_reach_the_next_submissions_exclusions(
        loop: Loop) -> None:
    """Exclusions are kept per kind of Pod and brought up to date from the Node events and
    the bindings the cluster model sees: each must reach them."""
    bed, scheduler = loop.bed, loop.scheduler
    put(bed.cluster.node_informer, node("node-b"))
    put(bed.cluster.slurmd_informer, slurmd("slurm-2", "node-b"))
    ids = iter(range(41, 50))
    bed.slurm.routes[("POST", SUBMIT)] = lambda _: httpx.Response(200, json={
        "job_id": next(ids)})

    async def excluded_for(name: str, uid: str) -> list[str]:
        put(bed.cluster.pod_informers[0], pod(uid, name=name))
        await scheduler.reconcile(PodKey("ns", name))
        return list(bed.slurm.calls("POST", SUBMIT)[-1]["job"].get("excluded_nodes", []))

    assert await excluded_for("p1", "aaaa-0001") == []
    tainted = node("node-b", taints=[{"key": "gpu", "value": "broken", "effect": "NoSchedule"}])
    put(bed.cluster.node_informer, tainted)
    bed.cluster._on_node_event("MODIFIED", tainted)  # as the Node informer calls it
    assert await excluded_for("p2", "aaaa-0002") == ["slurm-2"]
    put(bed.cluster.node_informer, node("node-b"))
    bed.cluster._on_node_event("MODIFIED", node("node-b"))
    assert await excluded_for("p3", "aaaa-0003") == []
    hog = pod("ffff-0006", name="hog", node="node-b", requests={"cpu": "15", "memory": "1Gi"})
    bed.cluster._on_any_pod("ADDED", hog)  # bound there: 1 of its 16 CPUs left
    assert await excluded_for("p4", "aaaa-0004") == ["slurm-2"]
    bed.cluster._on_any_pod("DELETED", hog)
    assert await excluded_for("p5", "aaaa-0005") == []


async def test_a_pod_whose_namespace_is_not_cached_waits(loop: Loop) -> None:
    bed = loop.bed
    drop(bed.cluster.namespace_informer, namespace())
    put(bed.cluster.pod_informers[0], pod())
    later = await loop.scheduler.reconcile(PodKey("ns", "p"))
    assert later == do.RetryLater("namespace ns not seen yet")
    assert bed.slurm.seen == [] and bed.kube.seen == []


async def test_a_reconcile_plans_once_and_applies_one_plan(loop: Loop) -> None:
    """The Pod's plan and its submission's part are one list, applied once, in order: what
    a reconcile does can be read as that list."""
    bed, applied = loop.bed, []
    apply_pod = bed.executor.apply_pod

    async def recorded(pod: Any, record: Any, actions: Any, *, tries: int = 0) -> None:
        applied.append([type(a).__name__ for a in actions])
        await apply_pod(pod, record, actions, tries=tries)

    bed.executor.apply_pod = recorded  # type: ignore[method-assign]
    put(bed.cluster.pod_informers[0], pod(annotations={JOB_ID: "7", POD_UID: "someone-else"}))
    await loop.scheduler.reconcile(PodKey("ns", "p"))
    assert applied == [["ReportIgnored", "Submit"]]
    assert len(bed.slurm.calls("POST", SUBMIT)) == 1


async def test_a_submission_whose_answer_was_lost_is_adopted_by_the_plan_not_repeated(
        loop: Loop) -> None:
    """The submit timed out but reached Slurm: the next look reads Slurm's jobs since, finds
    the Pod's, and the plan adopts it (its id written), with no second submission."""
    bed, scheduler = loop.bed, loop.scheduler
    bed.slurm.routes[("POST", SUBMIT)] = lambda r: httpx.Response(504, text="timeout")
    put(bed.cluster.pod_informers[0], pod())
    with pytest.raises(SlurmError):
        await scheduler.reconcile(PodKey("ns", "p"))
    assert bed.cluster.jobs.unanswered == {UID: 0}
    bed.slurm.jobs[7] = raw_job(7)  # it reached Slurm after all
    assert await scheduler.reconcile(PodKey("ns", "p")) is None
    assert len(bed.slurm.calls("POST", SUBMIT)) == 1, "not submitted again"
    assert bed.cluster.jobs.unanswered == {} and bed.cluster.jobs.by_uid == {UID: 7}
    await bed.settle()
    (status,) = bed.kube.calls("PATCH", f"{POD_PATH}/status")  # why it waited
    assert status["status"]["conditions"][0]["reason"] == "SchedulerError"
    (patch,) = [p for p in bed.kube.calls("PATCH", POD_PATH) if p is not status]
    assert patch["metadata"]["annotations"][JOB_ID] == "7"
    assert bed.cluster.state.pods["ns/p"].history[-1].what == "adopted"


async def test_a_pod_whose_lost_submission_cannot_be_looked_up_is_not_submitted_blind(
        loop: Loop) -> None:
    bed, scheduler = loop.bed, loop.scheduler
    bed.slurm.routes[("POST", SUBMIT)] = lambda r: httpx.Response(504, text="timeout")
    put(bed.cluster.pod_informers[0], pod())
    with pytest.raises(SlurmError):
        await scheduler.reconcile(PodKey("ns", "p"))
    bed.slurm.routes[("GET", f"{SLURM}/jobs/state/")] = down()
    scheduler.queue.failed(PodKey("ns", "p"))
    later = await scheduler.reconcile(PodKey("ns", "p"))
    assert later is not None and "slurmctld down" in later.why
    assert len(bed.slurm.calls("POST", SUBMIT)) == 1, "nothing submitted blind"
    assert bed.cluster.jobs.unanswered == {UID: 0}, "looked up on the next try"
    assert not bed.cluster.state.slurm_healthy, "the failed look-up is Slurm's health too"
    assert "slurmctld down" in bed.cluster.state.slurm_error
    await bed.settle()
    told = [e["message"] for e in bed.events() if e["reason"] == "SubmitFailed"]
    assert [m.split("(try ")[1].split(",")[0] for m in told] == ["1", "2"]
    bed.slurm.routes.pop(("GET", f"{SLURM}/jobs/state/"))  # Slurm back, and no job of the Pod's
    bed.slurm.routes[("POST", SUBMIT)] = answer(200, {"job_id": 9})
    assert await scheduler.reconcile(PodKey("ns", "p")) is None
    assert len(bed.slurm.calls("POST", SUBMIT)) == 2 and bed.cluster.jobs.by_uid == {UID: 9}


async def test_a_queue_key_of_no_known_kind_is_refused_not_passed_over(loop: Loop) -> None:
    with pytest.raises(AssertionError):
        await loop.scheduler.reconcile("ns/p")  # type: ignore[arg-type]


async def test_a_pod_the_policies_refuse_is_rejected_not_submitted(loop: Loop) -> None:
    bed = loop.bed
    put(bed.cluster.pod_informers[0], pod(requests={}))
    await loop.scheduler.reconcile(PodKey("ns", "p"))
    assert bed.slurm.calls("POST", SUBMIT) == []
    (patch,) = bed.kube.calls("PATCH", POD_PATH)
    assert patch["metadata"]["annotations"] == {
        REJECTED: "MissingResourceRequests", JOB_ID: None, POD_UID: UID}
    await bed.settle()
    assert reasons(bed) == ["MissingResourceRequests"]
    assert bed.cluster.state.pods["ns/p"].rejected.startswith("MissingResourceRequests: ")


async def test_a_pod_gone_from_the_cache_is_nothing_to_do(loop: Loop) -> None:
    await loop.scheduler.reconcile(PodKey("ns", "gone"))
    assert loop.bed.slurm.seen == [] and loop.bed.kube.seen == []


# -- a Pod with a job -----------------------------------------------------------------------------

async def test_a_started_job_binds_the_pod_to_the_node_of_its_slurmd_pod(loop: Loop) -> None:
    bed = loop.bed
    bed.cluster.job_table.learn(job(41, state="RUNNING", nodes="slurm-1", started=True))
    put(bed.cluster.pod_informers[0], pod(annotations=owned(41)))
    await loop.scheduler.reconcile(PodKey("ns", "p"))
    (binding,) = bed.kube.calls("POST", f"{POD_PATH}/binding")
    assert binding["metadata"]["uid"] == UID
    assert binding["target"] == {"apiVersion": "v1", "kind": "Node", "name": "node-a"}
    assert bed.kube.calls("PATCH") == [] and bed.slurm.seen == []
    record = bed.cluster.state.pods["ns/p"]
    assert (record.k8s_node, record.slurm_node, record.job_state) == (
        "node-a", "slurm-1", "RUNNING")
    await loop.scheduler.reconcile(PodKey("ns", "p"))
    assert len(bed.kube.calls("POST", f"{POD_PATH}/binding")) == 1, "bound once (assumed)"
    await bed.settle()
    assert reasons(bed) == ["Scheduled"]


@pytest.mark.parametrize("state", ["RUNNING", "PENDING"])
async def test_a_job_not_started_yet_leaves_the_pod_waiting(loop: Loop, state: str) -> None:
    bed = loop.bed
    bed.cluster.job_table.learn(job(41, state=state, nodes="slurm-1",
                                    reason="Priority" if state == "PENDING" else ""))
    put(bed.cluster.pod_informers[0], pod(annotations=owned(41)))
    await loop.scheduler.reconcile(PodKey("ns", "p"))
    assert bed.kube.seen == [] and bed.slurm.seen == []
    record = bed.cluster.state.pods["ns/p"]
    assert record.job_state == state and record.job_id == 41
    assert record.pending_reason == ("Priority" if state == "PENDING" else "")
    assert any(t.what == f"job {state.lower()}" for t in record.history)


async def test_a_job_on_a_slurm_node_without_slurmd_pod_waits_and_says_so(loop: Loop) -> None:
    bed = loop.bed
    bed.cluster.job_table.learn(job(41, state="RUNNING", nodes="slurm-9", started=True))
    put(bed.cluster.pod_informers[0], pod(annotations=owned(41)))
    later = await loop.scheduler.reconcile(PodKey("ns", "p"))
    assert later is not None and "slurm-9" in later.why and not later.room
    assert bed.kube.calls("POST", f"{POD_PATH}/binding") == []
    await bed.settle()
    assert reasons(bed) == ["NoNodeForSlurmNode"]


async def test_a_proven_job_missing_from_the_annotations_is_written_then_bound(
        loop: Loop) -> None:
    bed = loop.bed
    bed.cluster.job_table.learn(job(41, state="RUNNING", nodes="slurm-1", started=True))
    put(bed.cluster.pod_informers[0], pod())  # killed between submitting and annotating
    await loop.scheduler.reconcile(PodKey("ns", "p"))
    (patch,) = bed.kube.calls("PATCH", POD_PATH)
    assert patch["metadata"]["annotations"] == {JOB_ID: "41", POD_UID: UID, REJECTED: None}
    assert len(bed.kube.calls("POST", f"{POD_PATH}/binding")) == 1
    assert bed.slurm.calls("POST", SUBMIT) == []


async def test_a_deleted_pods_job_is_cancelled(loop: Loop) -> None:
    bed, scheduler = loop.bed, loop.scheduler
    bed.cluster.job_table.learn(job(41, state="RUNNING", nodes="slurm-1", started=True))
    gone = pod(annotations=owned(41), node="node-a")
    put(bed.cluster.pod_informers[0], gone)
    bed.cluster.state.record("ns", "p", UID, 0.0)
    await bed.executor.apply_pod(gone, bed.executor.record(gone), [do.ReportIgnored("copied")])
    assert UID in bed.executor.memory.told_ignored
    bed.add_pod(gone, "DELETED")
    assert "ns/p" not in bed.cluster.state.pods
    assert UID not in bed.executor.memory.told_ignored
    assert len(scheduler.queue) == 1
    key = await scheduler.queue.get()
    assert key == ReleaseJob(PodKey("ns", "p"), UID, 41)
    await scheduler.reconcile(key)
    assert bed.slurm.paths() == [f"{SLURM}/job/41"]
    assert bed.slurm.seen[0][0] == "DELETE"


async def test_a_deleted_pod_whose_job_ended_cancels_nothing(loop: Loop) -> None:
    bed, scheduler = loop.bed, loop.scheduler
    bed.cluster.job_table.learn(job(41, state="COMPLETED", nodes="slurm-1", started=True))
    bed.add_pod(pod(annotations=owned(41)), "DELETED")
    await scheduler.reconcile(await scheduler.queue.get())
    assert bed.slurm.paths("DELETE") == []


async def test_a_deleted_pod_without_a_job_queues_nothing(loop: Loop) -> None:
    loop.bed.add_pod(pod(), "DELETED")
    assert len(loop.scheduler.queue) == 0


async def test_a_pod_being_deleted_releases_its_job(loop: Loop) -> None:
    bed = loop.bed
    bed.cluster.job_table.learn(job(41, state="RUNNING", nodes="slurm-1", started=True))
    put(bed.cluster.pod_informers[0], pod(annotations=owned(41), node="node-a",
                                          deletionTimestamp="2025-01-01T00:01:00Z"))
    await loop.scheduler.reconcile(PodKey("ns", "p"))
    assert [(m, p) for m, p, _ in bed.slurm.seen] == [("DELETE", f"{SLURM}/job/41")]
    assert bed.cluster.state.pods["ns/p"].phase == "Terminating"


@pytest.mark.parametrize("purged", [False, True])
async def test_a_bound_pod_whose_job_ended_is_deleted(loop: Loop, purged: bool) -> None:
    bed = loop.bed
    if not purged:
        bed.cluster.job_table.learn(job(41, state="COMPLETED", nodes="slurm-1", started=True))
    put(bed.cluster.pod_informers[0], pod(annotations=owned(41), node="node-a"))
    await loop.scheduler.reconcile(PodKey("ns", "p"))
    (delete,) = bed.kube.calls("DELETE", POD_PATH)
    assert delete["preconditions"] == {"uid": UID}
    if purged:  # Slurm was asked, and has no such job
        assert bed.slurm.paths() and set(bed.slurm.paths("GET")) == {f"{SLURM}/job/41"}
    else:
        assert bed.slurm.seen == []
    await bed.settle()
    (event,) = bed.events()
    assert event["reason"] == ("SlurmJobLost" if purged else "SlurmJobEnded")
    assert event["type"] == "Warning"
    assert ("completed" in event["message"]) != purged


async def test_a_copied_job_id_is_ignored_and_the_pod_scheduled_from_scratch(
        loop: Loop) -> None:
    bed = loop.bed
    other = who("bbbb-0002", name="q")
    bed.cluster.job_table.learn(job(41, other, state="RUNNING", nodes="slurm-1", started=True))
    put(bed.cluster.pod_informers[0], pod(annotations=owned(41, uid="bbbb-0002")))
    bed.slurm.routes[("POST", SUBMIT)] = answer(200, {"job_id": 42})
    await loop.scheduler.reconcile(PodKey("ns", "p"))
    assert bed.kube.calls("POST", f"{POD_PATH}/binding") == [], "never bound on another's job"
    assert bed.slurm.paths("DELETE") == [], "never cancels another Pod's job"
    (sent,) = bed.slurm.calls("POST", SUBMIT)
    assert sent["job"]["extra"] == job_extra(who())
    await bed.settle()  # the job id is written in the background
    (patch,) = bed.kube.calls("PATCH", POD_PATH)
    assert patch["metadata"]["annotations"] == {JOB_ID: "42", POD_UID: UID, REJECTED: None}
    assert bed.executor.memory.told_ignored == {UID}
    await loop.scheduler.reconcile(PodKey("ns", "p"))
    await bed.settle()
    assert reasons(bed) == ["IgnoredAnnotations"], "told once"
    assert "copied from another Pod" in bed.events()[0]["message"]
    assert bed.cluster.jobs.by_uid == {"bbbb-0002": 41, UID: 42}


async def test_a_job_id_slurm_gave_to_another_pod_is_a_lost_job_and_a_new_one_is_submitted(
        loop: Loop) -> None:
    """Written for this Pod, so Slurm once had it for the Pod: a crashed slurmctld lost it and
    gave its id to another Pod's job. Not bound yet: a new job, and the other Pod's is kept."""
    bed = loop.bed
    other = who("bbbb-0002", name="q")
    bed.slurm.jobs[41] = raw_job(41, other, state="RUNNING", nodes="slurm-1", started=True)
    put(bed.cluster.pod_informers[0], pod(annotations=owned(41)))  # written for this Pod
    bed.kube.routes[("GET", POD_PATH)] = answer(200, pod(annotations=owned(41)))
    bed.slurm.routes[("POST", SUBMIT)] = answer(200, {"job_id": 42})
    await loop.scheduler.reconcile(PodKey("ns", "p"))
    assert bed.slurm.paths("GET") == [f"{SLURM}/job/41"]
    assert len(bed.kube.calls("GET", POD_PATH)) == 1, "had a job: read whole for the policies"
    assert bed.cluster.jobs.owner(41) == other, "what was read is learned"
    assert len(bed.slurm.calls("POST", SUBMIT)) == 1
    assert bed.kube.calls("POST", f"{POD_PATH}/binding") == []
    assert bed.slurm.paths("DELETE") == [], "never cancels another Pod's job"
    await bed.settle()
    (event,) = bed.events()
    assert event["reason"] == "SlurmJobLost" and "another Pod's job" in event["message"]


async def test_a_bound_pod_whose_job_id_slurm_gave_to_another_pod_is_deleted(
        loop: Loop) -> None:
    """Slurm no longer counts the bound Pod on its node (its job is gone, its id another
    Pod's): the Pod goes, as for any ended job, and the other Pod's job is left alone."""
    bed = loop.bed
    other = who("bbbb-0002", name="q")
    bed.cluster.job_table.learn(job(41, who(), state="RUNNING", nodes="slurm-1", started=True))
    bed.cluster.job_table.learn(job(41, other, state="RUNNING", nodes="slurm-1", started=True))
    assert bed.cluster.jobs.by_uid == {"bbbb-0002": 41}
    put(bed.cluster.pod_informers[0], pod(annotations=owned(41), node="node-a"))
    await loop.scheduler.reconcile(PodKey("ns", "p"))
    (delete,) = bed.kube.calls("DELETE", POD_PATH)
    assert delete["preconditions"] == {"uid": UID}
    assert bed.slurm.paths("DELETE") == [] and bed.slurm.calls("POST", SUBMIT) == []
    await bed.settle()
    (event,) = bed.events()
    assert event["reason"] == "SlurmJobLost" and event["type"] == "Warning"
    assert "job 41" in event["message"] and "another Pod's job" in event["message"]
    assert "from scratch" not in event["message"]


async def test_a_job_id_slurm_ties_to_the_pod_is_learned_and_followed(loop: Loop) -> None:
    bed = loop.bed
    bed.slurm.jobs[41] = raw_job(41, state="RUNNING", nodes="slurm-1", started=True)
    put(bed.cluster.pod_informers[0], pod(annotations=owned(41)))
    await loop.scheduler.reconcile(PodKey("ns", "p"))
    assert bed.cluster.jobs.by_uid == {UID: 41}
    assert bed.slurm.calls("POST", SUBMIT) == []
    assert len(bed.kube.calls("POST", f"{POD_PATH}/binding")) == 1


async def test_a_lost_job_of_a_pod_not_bound_is_replaced(loop: Loop) -> None:
    bed = loop.bed
    put(bed.cluster.pod_informers[0], pod(annotations=owned(41)))  # Slurm lost job 41
    whole = pod(annotations={**owned(41), f"{PREFIX}comment": "read whole"})
    bed.kube.routes[("GET", POD_PATH)] = answer(200, whole)
    bed.slurm.routes[("POST", SUBMIT)] = answer(200, {"job_id": 42})
    await loop.scheduler.reconcile(PodKey("ns", "p"))
    (sent,) = bed.slurm.calls("POST", SUBMIT)
    assert sent["job"]["comment"] == "read whole", "policies map the Pod the API server has"
    assert bed.executor.memory.replaced == {UID: {41}}
    await bed.settle()
    assert reasons(bed) == ["SlurmJobLost"]


# -- the loops around reconcile --------------------------------------------------------------------

async def test_the_worker_backs_off_a_pod_that_must_wait_then_forgets_its_failures(
        loop: Loop) -> None:
    bed, scheduler = loop.bed, loop.scheduler
    drop(bed.cluster.namespace_informer, namespace())
    put(bed.cluster.pod_informers[0], pod())
    worker = asyncio.create_task(scheduler._work())
    try:
        scheduler.queue.add(PodKey("ns", "p"))
        await until(lambda: scheduler.queue.failures(PodKey("ns", "p")) == 1)
        assert bed.slurm.seen == []
        put(bed.cluster.namespace_informer, namespace())  # retried after 0.5 s
        await until(lambda: scheduler.queue.failures(PodKey("ns", "p")) == 0)
        assert len(bed.slurm.calls("POST", SUBMIT)) == 1
    finally:
        await stop(worker)


async def test_orphaned_jobs_are_cancelled_and_a_failure_does_not_stop_the_rest(
        loop: Loop) -> None:
    bed = loop.bed
    put(bed.cluster.pod_informers[0], pod())
    bed.cluster.job_table.learn(job(41))  # the live Pod's
    bed.cluster.job_table.learn(job(42, who("cccc-0003", name="gone")))
    bed.cluster.job_table.learn(job(43, who("dddd-0004", name="done"), state="COMPLETED",
                                    nodes="slurm-1"))
    bed.cluster.job_table.learn(job(44, who("eeee-0005", name="gone2")))
    bed.slurm.routes[("DELETE", f"{SLURM}/job/42")] = down()
    collector = asyncio.create_task(
        orphans.collect(loop.scheduler.cluster, loop.scheduler.executor, interval=60))
    try:
        await until(lambda: len(bed.slurm.paths("DELETE")) == 2)
    finally:
        await stop(collector)
    assert bed.slurm.paths("DELETE") == [f"{SLURM}/job/42", f"{SLURM}/job/44"]


async def test_a_stuck_job_is_a_warning_on_its_pod(loop: Loop) -> None:
    bed = loop.bed
    put(bed.cluster.pod_informers[0], pod())
    stuck = job(41, state="PENDING", reason="JobHeldAdmin")
    loop.scheduler.job_stuck(stuck, who(), "held")
    loop.scheduler.job_stuck(stuck, who("ffff-0009"), "held")  # not that Pod any more
    await bed.settle()
    (event,) = bed.events()
    assert event["reason"] == "SlurmJobStuck" and "JobHeldAdmin" in event["message"]


async def test_slurm_back_relists_jobs_and_requeues_every_pod(loop: Loop) -> None:
    bed, scheduler = loop.bed, loop.scheduler
    put(bed.cluster.pod_informers[0], pod())
    put(bed.cluster.pod_informers[0], pod("bbbb-0002", name="q"))
    bed.slurm.jobs[41] = raw_job(41)
    bed.cluster.health.slurm_answered(None)  # not ready yet: nothing
    assert len(scheduler.queue) == 0 and not bed.executor._background
    bed.cluster.ready.set()
    bed.cluster.health.slurm_answered(RuntimeError("down"))
    bed.cluster.health.slurm_answered(None)
    await bed.settle()
    assert bed.slurm.paths("GET") == [f"{SLURM}/jobs/"]
    assert bed.cluster.jobs.by_uid == {UID: 41}
    assert len(scheduler.queue) == 2


async def test_the_api_server_back_requeues_every_pod(loop: Loop) -> None:
    bed, scheduler = loop.bed, loop.scheduler
    put(bed.cluster.pod_informers[0], pod())
    bed.cluster.ready.set()
    informers = bed.cluster.informers()
    for informer in informers:
        informer.healthy = True
    bed.cluster.health.note_kube()
    assert len(scheduler.queue) == 0, "coming up is no outage: every Pod was queued by its watch"
    informers[0].healthy = False
    bed.cluster.health.note_kube()
    informers[0].healthy = True
    bed.cluster.health.note_kube()
    assert len(scheduler.queue) == 1
    assert bed.cluster.state.kube_healthy


async def test_wake_queues_the_pod_of_a_job(loop: Loop) -> None:
    loop.scheduler.wake(who())
    loop.bed.watch.wake(who("bbbb-0002", name="q"))  # the poller wakes through the scheduler
    assert [await loop.scheduler.queue.get() for _ in range(2)] == [
        PodKey("ns", "p"), PodKey("ns", "q")]


async def test_a_pod_waiting_for_room_looks_again_as_soon_as_a_pod_leaves_a_node(
        loop: Loop) -> None:
    bed, scheduler = loop.bed, loop.scheduler
    hog = pod("ffff-0006", name="hog", node="node-a", requests={"cpu": "15", "memory": "1Gi"})
    bed.cluster._on_any_pod("ADDED", hog)  # Slurm's own, on the only node: 1 of 16 CPUs left
    put(bed.cluster.pod_informers[0], pod())  # asks for 2
    scheduler.queue = WorkQueue(base_delay=60)  # a retry would come far too late for the test
    worker = asyncio.create_task(scheduler._work())
    try:
        scheduler.queue.add(PodKey("ns", "p"))
        await until(lambda: scheduler.queue.failures(PodKey("ns", "p")) == 1)
        assert bed.slurm.calls("POST", SUBMIT) == [], "no job while no Node has room"
        assert scheduler._waiting_for_room == {PodKey("ns", "p")}
        bed.cluster._on_any_pod("DELETED", hog)  # long before the backoff would end
        await until(lambda: len(bed.slurm.calls("POST", SUBMIT)) == 1)
        assert scheduler._waiting_for_room == set()
    finally:
        await stop(worker)


async def test_a_translation_that_raises_is_sunks_fault_told_and_retried_never_a_rejection(
        loop: Loop, monkeypatch: pytest.MonkeyPatch) -> None:
    bed, scheduler = loop.bed, loop.scheduler
    calls = []

    def broken(*args: object) -> dict[str, Any]:
        calls.append(args)
        raise KeyError("a bug of ours")

    monkeypatch.setattr("sunk.plans.translate.job_description", broken)
    put(bed.cluster.pod_informers[0], pod())
    bed.kube.routes[("GET", POD_PATH)] = answer(200, pod())
    scheduler.queue = WorkQueue(base_delay=0.01, max_delay=0.01)
    before = metrics.INTERNAL_ERRORS._value.get()
    worker = asyncio.create_task(scheduler._work())
    try:
        scheduler.queue.add(PodKey("ns", "p"))
        await until(lambda: scheduler.queue.failures(PodKey("ns", "p")) >= 4)
    finally:
        await stop(worker)
    await bed.settle()
    assert len(calls) >= 4, "retried"
    assert metrics.INTERNAL_ERRORS._value.get() - before >= 4
    told = [e for e in bed.events() if e["reason"] == "InternalError"]
    assert 3 <= len(told) < len(calls), "on the 1st, 2nd, 4th ... failure, not every one"
    assert "the fault is sunk's, not the Pod's" in told[0]["message"]
    assert "KeyError" in told[0]["message"]
    assert bed.kube.calls("PATCH", POD_PATH) == [], "never marked rejected"
    assert bed.slurm.calls("POST", SUBMIT) == []


async def test_pods_slurm_does_not_count_are_named_where_a_binding_is_refused(
        loop: Loop) -> None:
    """Slurm ran the job on slurm-1, whose Node is full of a Pod no live job of Slurm's counts
    (its job was lost): the job is refitted, and the Node, the Pod taking the room, a metric
    and the dashboard say why Slurm and Kubernetes disagree, once while the same Pods do."""
    bed = loop.bed
    stray = pod("ffff-0006", name="stray", node="node-a", requests={"cpu": "15", "memory": "1Gi"})
    bed.any_pod(stray)
    # a bound gang member whose gang's job runs: Slurm counts it (its room is the gang job's)
    member = pod("eeeeeeee-eeee-0005", name="member", node="node-a",
                 requests={"cpu": "1", "memory": "1"})
    bed.any_pod(member)
    gang = PodIdentity("ns", "label:g", "abcd" * 8, NAME, (member_id("eeeeeeee-eeee-0005"),))
    bed.cluster.job_table.learn(job(30, gang, state="RUNNING", nodes="slurm-1", started=True))
    put(bed.cluster.pod_informers[0], pod(annotations=owned(41)))  # asks for 2 of 1 left
    bed.kube.routes[("GET", POD_PATH)] = answer(200, pod(annotations=owned(41)))
    for job_id in (41, 42):  # the next job Slurm runs there: told again only if Pods change
        bed.cluster.job_table.learn(job(job_id, state="RUNNING", nodes="slurm-1", started=True))
        bed.slurm.routes[("POST", SUBMIT)] = answer(200, {"job_id": job_id + 1})
        await loop.scheduler.reconcile(PodKey("ns", "p"))
        await bed.settle()
    assert bed.kube.calls("POST", f"{POD_PATH}/binding") == []
    assert bed.slurm.paths("DELETE") == [f"{SLURM}/job/41", f"{SLURM}/job/42"]
    told = [(e["reason"], e["involvedObject"]["kind"], e["involvedObject"]["name"])
            for e in bed.events() if "Counted" in e["reason"]]
    assert told == [("PodsNotCountedBySlurm", "Node", "node-a"),
                    ("NotCountedBySlurm", "Pod", "stray")]
    (on_node,) = [e for e in bed.events() if e["reason"] == "PodsNotCountedBySlurm"]
    assert "ns/stray" in on_node["message"] and "job 41" in on_node["message"]
    assert "ns/stray" in bed.cluster.state.not_counted["slurm-1"]
    assert metrics.child(metrics.NODE_PODS_NOT_COUNTED, "node-a")._value.get() == 1


def counted(scheduler: Scheduler, gate: asyncio.Event | None = None) -> list[str]:
    """The keys the scheduler's workers reconcile, in turn (each waits for ``gate``)."""
    seen: list[str] = []
    reconcile = scheduler.reconcile

    async def counting(key: QueueKey) -> None:
        seen.append(str(key))
        if gate is not None:
            await gate.wait()
        await reconcile(key)

    scheduler.reconcile = counting  # type: ignore[method-assign]
    return seen


@contextlib.asynccontextmanager
async def working(scheduler: Scheduler,
                  gate: asyncio.Event | None = None) -> AsyncIterator[list[str]]:
    """A worker of the scheduler at work meanwhile; gives the keys it reconciles, in turn."""
    seen = counted(scheduler, gate)
    worker = asyncio.create_task(scheduler._work())
    try:
        yield seen
    finally:
        await stop(worker)


async def quiet(scheduler: Scheduler) -> None:
    """Until the queue is empty and no worker holds a key."""
    await until(lambda: len(scheduler.queue) == 0 and not scheduler.queue._active)
    await asyncio.sleep(0.02)
    await until(lambda: len(scheduler.queue) == 0 and not scheduler.queue._active)


async def test_the_watchs_echo_of_the_schedulers_own_writes_is_not_reconciled_again(
        loop: Loop) -> None:
    bed, scheduler = loop.bed, loop.scheduler
    async with working(scheduler) as seen:
        bed.add_pod(pod(generation=1))
        await until(lambda: len(bed.kube.calls("PATCH", POD_PATH)) == 1)
        await quiet(scheduler)
        assert seen == ["ns/p"]
        # the annotations it wrote come back, then kwok's status, then a label someone adds
        bed.add_pod(pod(generation=1, annotations=owned(41), resourceVersion="11"), "MODIFIED")
        echo = pod(generation=1, annotations=owned(41), resourceVersion="12")
        echo["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled",
                                                               "status": "False"}]}
        bed.add_pod(echo, "MODIFIED")
        bed.add_pod(pod(generation=1, annotations=owned(41), resourceVersion="13",
                        labels={"team": "a"}), "MODIFIED")
        assert len(scheduler.queue) == 0
        await quiet(scheduler)
        assert seen == ["ns/p"], "nothing it reads changed"
        # ...yet the dashboard's line has the job it submitted (its account and QOS come from it)
        assert bed.cluster.state.pods["ns/p"].job_id == 41
        bed.cluster.job_table.learn(job(41, state="RUNNING", nodes="slurm-1", started=True))
        scheduler.wake(who())  # the job-side still wakes it
        await until(lambda: len(bed.kube.calls("POST", f"{POD_PATH}/binding")) == 1)
        await quiet(scheduler)
        assert seen == ["ns/p", "ns/p"]
        bound = pod(generation=1, annotations=owned(41), resourceVersion="14", node="node-a")
        bed.add_pod(bound, "MODIFIED")  # the binding's echo
        assert len(scheduler.queue) == 0


CHANGES_A_RECONCILE_READS: dict[str, dict[str, Any]] = {
    "deleted": {"deletionTimestamp": "2025-01-01T00:01:00Z"},
    "a new spec": {"generation": 2},
    "another job id": {"annotations": owned(99)},
    "its pod-uid annotation removed": {"annotations": {JOB_ID: "41"}},
    "marked rejected": {"annotations": {**owned(41), REJECTED: "PolicyDenied"}},
    "bound by someone else": {"node": "node-a"},
    "a new Pod of that name": {"uid": "bbbb-0002"},
}


@pytest.mark.parametrize("change", sorted(CHANGES_A_RECONCILE_READS))
async def test_a_change_a_reconcile_reads_is_reconciled_after_a_settled_one(
        loop: Loop, change: str) -> None:
    bed, scheduler = loop.bed, loop.scheduler
    # as the API server answers a write: the version it made (the watch shows it, or later)
    bed.kube.routes[("PATCH", POD_PATH)] = answer(200, {"metadata": {"resourceVersion": "11"}})
    async with working(scheduler) as seen:
        bed.add_pod(pod(generation=1))
        await until(lambda: len(bed.kube.calls("PATCH", POD_PATH)) == 1)
        await quiet(scheduler)
        fields: dict[str, Any] = {"generation": 1, "annotations": owned(41),
                                  "resourceVersion": "12", **CHANGES_A_RECONCILE_READS[change]}
        bed.add_pod(pod(**fields), "MODIFIED")
        await quiet(scheduler)
        assert len(seen) >= 2, "looked at again"  # (a new Pod's job-id repair: more looks)


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
async def test_an_ended_pod_is_reconciled_and_its_job_released(loop: Loop, phase: str) -> None:
    bed, scheduler = loop.bed, loop.scheduler
    async with working(scheduler) as seen:
        bed.add_pod(pod())
        await quiet(scheduler)
        ended = pod(annotations=owned(41), resourceVersion="11")
        ended["status"] = {"phase": phase}
        bed.add_pod(ended, "MODIFIED")
        await until(lambda: len(bed.slurm.calls("DELETE", f"{SLURM}/job/41")) == 1)
        await quiet(scheduler)
        assert seen == ["ns/p", "ns/p"]
        assert bed.cluster.state.pods["ns/p"].phase == phase


async def test_a_running_phase_only_updates_the_dashboard(loop: Loop) -> None:
    bed, scheduler = loop.bed, loop.scheduler
    async with working(scheduler) as seen:
        bed.add_pod(pod())
        await quiet(scheduler)
        running = pod(annotations=owned(41), resourceVersion="11", node="node-a")
        running["status"] = {"phase": "Running"}
        bed.cluster.job_table.learn(job(41, state="RUNNING", nodes="slurm-1", started=True))
        scheduler.wake(who())
        await until(lambda: len(bed.kube.calls("POST", f"{POD_PATH}/binding")) == 1)
        await quiet(scheduler)
        bed.add_pod(running, "MODIFIED")  # bound (its echo), and kwok runs it
        await quiet(scheduler)
        assert seen == ["ns/p", "ns/p"]
        record = bed.cluster.state.pods["ns/p"]
        assert (record.phase, record.k8s_node) == ("Running", "node-a")
        terminating = pod(annotations=owned(41), resourceVersion="12", node="node-a",
                          deletionTimestamp="2025-01-01T00:01:00Z")
        bed.add_pod(terminating, "MODIFIED")
        await quiet(scheduler)
        assert seen == ["ns/p"] * 3 and record.phase == "Terminating"


async def test_a_failed_reconcile_leaves_the_next_event_to_be_reconciled(loop: Loop) -> None:
    bed, scheduler = loop.bed, loop.scheduler
    scheduler.queue = WorkQueue(base_delay=60)  # no retry within the test: only events
    bed.slurm.routes[("POST", SUBMIT)] = answer(500, {"errors": [{"error": "down"}]})
    async with working(scheduler) as seen:
        bed.add_pod(pod())
        await until(lambda: scheduler.queue.failures(PodKey("ns", "p")) == 1)
        await quiet(scheduler)
        bed.add_pod(pod(resourceVersion="11"), "MODIFIED")  # the same Pod, as it was
        await quiet(scheduler)
        assert seen == ["ns/p", "ns/p"], "not taken for an echo: nothing was written"


async def test_an_event_while_its_pod_is_reconciled_is_reconciled_after(loop: Loop) -> None:
    bed, scheduler = loop.bed, loop.scheduler
    gate = asyncio.Event()
    gate.set()
    async with working(scheduler, gate) as seen:
        bed.add_pod(pod())
        await quiet(scheduler)  # submitted, its job id written: settled
        gate.clear()
        bed.cluster.job_table.learn(job(41, state="RUNNING", nodes="slurm-1", started=True))
        scheduler.wake(who())  # its job started: a reconcile starts, and waits
        await until(lambda: len(seen) == 2)
        bed.add_pod(pod(annotations=owned(41), resourceVersion="11"), "MODIFIED")
        gate.set()
        await quiet(scheduler)
        assert seen == ["ns/p"] * 3, "what the running reconcile read is not known: again"


# -- a job's change while its Pod is settled --------------------------------------------------

JOB_CHANGES: dict[str, tuple[dict[str, Any], bool]] = {
    # what the job becomes -> whether its Pod is looked at again
    "running, its script not started": ({"state": "RUNNING", "nodes": "slurm-1"}, False),
    "pending for another reason": ({"state": "PENDING", "reason": "Priority"}, False),
    "started": ({"state": "RUNNING", "nodes": "slurm-1", "started": True}, True),
    "cancelled": ({"state": "CANCELLED"}, True),
    "completed": ({"state": "COMPLETED"}, True),
    "held after its launch failed": ({"state": "PENDING",
                                      "reason": "launch_failed_requeued_held"}, True),
    "failed to launch": ({"state": "NODE_FAIL"}, True),
}


@pytest.mark.parametrize("change", sorted(JOB_CHANGES))
async def test_a_jobs_change_is_reconciled_unless_it_leaves_the_pod_waiting(
        loop: Loop, change: str) -> None:
    bed, scheduler = loop.bed, loop.scheduler
    async with working(scheduler) as seen:
        bed.add_pod(pod())
        await quiet(scheduler)
        fields, looked_at = JOB_CHANGES[change]
        bed.cluster.job_table.learn(job(41, **fields))
        scheduler.wake(who())
        await quiet(scheduler)
        assert seen == ["ns/p"] * (2 if looked_at else 1)
        record = bed.cluster.state.pods["ns/p"]
        assert (record.job_state, record.pending_reason) == (
            fields["state"], fields.get("reason", "") if fields["state"] == "PENDING" else "")
        if not looked_at:
            assert any(t.what == f"job {fields['state'].lower()}" for t in record.history) or (
                fields["state"] == "PENDING")


async def test_a_job_change_of_a_pod_not_settled_is_reconciled(loop: Loop) -> None:
    bed, scheduler = loop.bed, loop.scheduler
    scheduler.queue = WorkQueue(base_delay=60)
    bed.slurm.routes[("POST", SUBMIT)] = down()
    async with working(scheduler) as seen:
        bed.add_pod(pod())  # not submitted (slurmrestd down): a retry is due
        await until(lambda: scheduler.queue.failures(PodKey("ns", "p")) == 1)
        await quiet(scheduler)
        bed.cluster.job_table.learn(job(41, state="RUNNING", nodes="slurm-1"))
        scheduler.wake(who())
        await quiet(scheduler)
        assert seen == ["ns/p"] * 2


# -- a gang ---------------------------------------------------------------------------------------

def gang_pod(i: int, size: int = 3, **kw: Any) -> dict[str, Any]:
    member = pod(f"dddd000{i}-0000", name=f"g-{i}", annotations={
        f"{PREFIX}gang-size": str(size)}, **kw)
    member["metadata"]["labels"] = {f"{PREFIX}gang": "g"}
    return member


def three_nodes(bed: Bed) -> None:
    for n in (2, 3):
        put(bed.cluster.node_informer, node(f"node-{'abc'[n - 1]}"))
        put(bed.cluster.slurmd_informer, slurmd(f"slurm-{n}", f"node-{'abc'[n - 1]}"))


async def test_a_gang_member_is_reconciled_as_its_gang_and_submitted_once_whole(
        loop: Loop) -> None:
    bed, scheduler = loop.bed, loop.scheduler
    three_nodes(bed)
    for i in range(2):
        bed.add_pod(gang_pod(i))
    await scheduler.reconcile(PodKey("ns", "g-0"))  # a member: its gang decides
    assert GangKey("ns", "label:g") in scheduler.queue._queued
    assert bed.slurm.seen == [], "a member alone submits nothing"
    await scheduler.reconcile(GangKey("ns", "label:g"))
    assert bed.slurm.calls("POST", SUBMIT) == [], "2 of 3 members: nothing submitted"
    bed.add_pod(gang_pod(2))
    await scheduler.reconcile(GangKey("ns", "label:g"))
    (sent,) = bed.slurm.calls("POST", SUBMIT)
    assert sent["job"]["minimum_nodes"] == sent["job"]["maximum_nodes"] == 3
    assert sent["job"]["name"] == "gang:ns/label:g"
    await bed.settle()  # the members' job id: written once JOB_ID_WAIT passed with no binding
    for i in range(2):  # the first two showed that their gang waited for its third
        (waited,) = bed.kube.calls("PATCH", f"/api/v1/namespaces/ns/pods/g-{i}/status")
        assert "waits for its members: 2 of 3 exist" in (
            waited["status"]["conditions"][0]["message"])
    for i in range(3):
        (patch,) = [p for p in bed.kube.calls("PATCH", f"/api/v1/namespaces/ns/pods/g-{i}")
                    if "annotations" in p["metadata"]]
        assert patch["metadata"]["annotations"][JOB_ID] == "41"


async def test_a_gang_waiting_for_members_is_looked_at_again_when_its_timeout_is_due(
        loop: Loop) -> None:
    """A wait with a time (``after``) is a look later, not a failure: no backoff, no error."""
    bed, scheduler = loop.bed, loop.scheduler
    three_nodes(bed)
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    bed.add_pod(gang_pod(0, creationTimestamp=now))  # just created: its gang may yet fill
    gang = GangKey("ns", "label:g")
    later = await scheduler.reconcile(gang)
    assert later is not None and later.after is not None and "1 of 3 members" in later.why
    assert 0 < later.after <= bed.cluster.settings.gang_incomplete_timeout
    scheduler.queue.failed(gang)  # an earlier failure: forgotten by a reconcile that ran
    scheduler._later(gang, later)
    assert scheduler.queue.failures(gang) == 0, "not a failure: no backoff"
    assert len(scheduler.queue._timers) == 1, "looked at again once its timeout is due"
    scheduler._later(gang, do.RetryLater("no room", room=True))
    assert scheduler.queue.failures(gang) == 1 and gang in scheduler._waiting_for_room


async def test_one_member_the_policies_refuse_rejects_the_whole_gang(loop: Loop) -> None:
    bed, scheduler = loop.bed, loop.scheduler
    three_nodes(bed)
    bed.add_pod(gang_pod(0))
    bed.add_pod(gang_pod(1, requests={}))  # no CPU or memory requested: refused
    bed.add_pod(gang_pod(2))
    await scheduler.reconcile(GangKey("ns", "label:g"))
    assert bed.slurm.calls("POST", SUBMIT) == []
    for i in range(3):
        (patch,) = bed.kube.calls("PATCH", f"/api/v1/namespaces/ns/pods/g-{i}")
        assert patch["metadata"]["annotations"][REJECTED] == "MissingResourceRequests"
    await bed.settle()
    assert reasons(bed).count("MissingResourceRequests") == 3


async def test_a_gang_larger_than_slurm_is_rejected(loop: Loop) -> None:
    bed, scheduler = loop.bed, loop.scheduler  # one Slurm node, three members
    for i in range(3):
        bed.add_pod(gang_pod(i))
    await scheduler.reconcile(GangKey("ns", "label:g"))
    assert bed.slurm.calls("POST", SUBMIT) == []
    await bed.settle()
    assert reasons(bed) == ["GangTooLarge"] * 3
    assert bed.cluster.state.gangs["ns/label:g"].problem.startswith("GangTooLarge: ")


async def test_members_of_a_gang_that_waits_for_the_rest_say_so(loop: Loop) -> None:
    bed, scheduler = loop.bed, loop.scheduler
    for i in range(2):  # of 3
        bed.add_pod(pod(f"gggg-000{i}", f"m{i}", labels={f"{PREFIX}gang": "train"},
                        annotations={f"{PREFIX}gang-size": "3"}))
    await scheduler.gangs.reconcile(GangKey("ns", "label:train"), first_try=True)
    await bed.settle()
    shown = {path: body["status"]["conditions"][0]["message"]
             for path, body in ((c[1], c[2]) for c in bed.kube.seen
                                if c[0] == "PATCH" and c[1].endswith("/status"))}
    assert shown == {f"/api/v1/namespaces/ns/pods/m{i}/status": (
        "gang label:train waits for its members: 2 of 3 exist; it is submitted to Slurm as one "
        "job when all do.") for i in range(2)}
    assert bed.slurm.calls("POST", SUBMIT) == []


PODGROUP_STATUS = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/ns/podgroups/pg/status"


def podgroup_member(uid: str, name: str, phase: str = "Pending") -> dict[str, Any]:
    made = pod(uid, name, labels={"scheduling.x-k8s.io/pod-group": "pg"})
    made["status"] = {"phase": phase}
    return made


async def test_a_podgroup_status_follows_its_gang_written_once_per_change(loop: Loop) -> None:
    bed, scheduler = loop.bed, loop.scheduler
    group = {"metadata": {"name": "pg", "namespace": "ns", "uid": "pg-uid"},
             "spec": {"minMember": 2}}
    put(bed.cluster.gang_index.podgroup_informer, group)
    bed.cluster.gang_index.podgroup_informer.synced.set()
    key = GangKey("ns", "podgroup:pg")
    bed.add_pod(podgroup_member("gggg-0000", "m0"))
    await scheduler.gangs.reconcile(key, first_try=True)
    await bed.settle()
    (pending,) = bed.kube.calls("PATCH", PODGROUP_STATUS)
    assert pending == {"metadata": {"uid": "pg-uid"}, "status": {
        "phase": "Pending", "running": 0, "succeeded": 0, "failed": 0}}
    bed.add_pod(podgroup_member("gggg-0001", "m1"))
    for _ in range(2):  # the watch has not brought the write back: not written twice
        await scheduler.gangs.reconcile(key, first_try=True)
        await bed.settle()
    (_, written) = bed.kube.calls("PATCH", PODGROUP_STATUS)
    assert written["status"]["scheduleStartTime"].endswith("Z")
    assert {k: v for k, v in written["status"].items() if k != "scheduleStartTime"} == {
        "phase": "Scheduling", "running": 0, "succeeded": 0, "failed": 0}
    put(bed.cluster.gang_index.podgroup_informer, {**group, "status": written["status"]})
    for i in range(2):
        bed.add_pod(podgroup_member(f"gggg-000{i}", f"m{i}", "Running"), "MODIFIED")
    await scheduler.gangs.reconcile(key, first_try=True)
    await bed.settle()
    assert bed.kube.calls("PATCH", PODGROUP_STATUS)[2]["status"] == {
        "phase": "Running", "running": 2, "succeeded": 0, "failed": 0}


async def test_no_podgroup_status_when_told_not_to_keep_it() -> None:
    async with stand_ins.bed(podgroup_status=False) as bed:
        scheduler = Scheduler(bed.cluster, bed.watch, bed.executor, policies())
        put(bed.cluster.namespace_informer, namespace())
        put(bed.cluster.gang_index.podgroup_informer, {
            "metadata": {"name": "pg", "namespace": "ns", "uid": "pg-uid"},
            "spec": {"minMember": 2}})
        bed.cluster.gang_index.podgroup_informer.synced.set()
        bed.add_pod(podgroup_member("gggg-0000", "m0"))
        await scheduler.gangs.reconcile(GangKey("ns", "podgroup:pg"), first_try=True)
        await bed.settle()
        assert bed.kube.calls("PATCH", PODGROUP_STATUS) == []
        scheduler.queue.close()


async def test_a_kubernetes_podgroup_gets_kube_schedulers_condition(loop: Loop) -> None:
    bed, scheduler = loop.bed, loop.scheduler
    index = bed.cluster.gang_index
    index.workload_version = "v1beta1"
    put(index.workload_informer, {
        "metadata": {"name": "g", "namespace": "ns", "uid": "g-uid", "generation": 1},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}})
    index.workload_informer.synced.set()
    for i in range(2):
        made = pod(f"gggg-000{i}", f"m{i}")
        made["spec"]["schedulingGroup"] = {"podGroupName": "g"}
        bed.add_pod(made)
    await scheduler.gangs.reconcile(GangKey("ns", "workload:g"), first_try=True)
    await bed.settle()
    (written,) = bed.kube.calls(
        "PATCH", "/apis/scheduling.k8s.io/v1beta1/namespaces/ns/podgroups/g/status")
    assert written["metadata"] == {"uid": "g-uid"}
    (said,) = written["status"]["conditions"]
    assert {k: said[k] for k in ("type", "status", "reason", "observedGeneration")} == {
        "type": "PodGroupInitiallyScheduled", "status": "False", "reason": "Unschedulable",
        "observedGeneration": 1}
    # the stand-in Slurm has one node: the gang is refused, and its PodGroup says why
    assert said["message"] == ("gang workload:g: GangTooLarge: the gang needs 2 nodes; Slurm "
                               "has 1")
