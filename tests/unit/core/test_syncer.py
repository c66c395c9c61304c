"""The syncer against HTTP-level stand-ins: node locks (taint, evictions, the lock state on the
slurmd Pod), drains kept in step both ways, and the prolog's lock request."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from sunk import kube
from sunk.hooks.auth import HookRefused
from sunk.hooks.inflight import InFlight
from sunk.loops.lockrequest import REQUEST_TTL, LockRequest
from sunk.loops.syncer import Syncer
from sunk.plans.locking import LOCK_KEY, LOCK_TAINT_SPEC, LockState
from sunk.slurm.job import PodIdentity
from sunk.wiring import connect_syncer
from tests.unit.core import stand_ins
from tests.unit.core.stand_ins import (
    PREFIX,
    SLURM,
    Bed,
    answer,
    down,
    job,
    node,
    owned,
    pod,
    put,
    raw_job,
    slurmd,
    stop,
    until,
)

NODE_PATH = "/api/v1/nodes/node-a"
SLURMD_PATH = "/api/v1/namespaces/slurm/pods/slurmd-slurm-1"
EVICT_WEB = "/api/v1/namespaces/ns/pods/web/eviction"
STATE, REASON = f"{PREFIX}slurm-state", f"{PREFIX}slurm-reason"
OTHER_TAINT = {"key": "other", "effect": "NoSchedule"}


@dataclass
class Sync:
    bed: Bed
    syncer: Syncer

    def slurm_node(self, *states: str, reason: str = "") -> None:
        self.bed.cluster.set_slurm_nodes([slurm_info("slurm-1", *states, reason=reason)])

    def writes(self) -> list[tuple[str, str]]:
        """Every request but Events (sent in the background), in order."""
        return [(m, p) for m, p, _ in self.bed.kube.seen + self.bed.slurm.seen
                if not p.endswith("/events")]


@pytest.fixture
async def sync() -> AsyncIterator[Sync]:
    async with stand_ins.bed() as bed:
        made = Sync(bed, Syncer(bed.cluster, bed.executor, bed.slurm_client, bed.watch))
        connect_syncer(made.syncer)
        put(bed.cluster.node_informer, node(taints=[OTHER_TAINT]))
        put(bed.cluster.slurmd_informer, slurmd())
        bed.any_pod(slurmd())
        made.slurm_node("IDLE")
        yield made
        made.syncer.queue.close()


def slurm_info(name: str, *states: str, reason: str = "") -> dict[str, Any]:
    """slurmrestd's record of a node whose size agrees with its Kubernetes Node's."""
    return {"name": name, "state": list(states), "reason": reason, "cpus": 16,
            "real_memory": 64 * 1024}


def web(**meta: Any) -> dict[str, Any]:
    """A Pod of someone else's on node-a: a lock evicts it."""
    return {"metadata": {"namespace": "ns", "name": "web", "uid": "web-1", **meta},
            "spec": {"nodeName": "node-a", "containers": []}, "status": {"phase": "Running"}}


def daemon() -> dict[str, Any]:
    return {"metadata": {"namespace": "kube-system", "name": "agent", "uid": "ds-1",
                         "ownerReferences": [{"kind": "DaemonSet", "name": "agent"}]},
            "spec": {"nodeName": "node-a", "containers": []}, "status": {"phase": "Running"}}


async def refused(call: Awaitable[object]) -> HookRefused:
    with pytest.raises(HookRefused) as caught:
        await call
    return caught.value


# -- locks ---------------------------------------------------------------------------------------

async def test_a_busy_node_is_tainted_and_its_blocker_evicted_then_locked(sync: Sync) -> None:
    bed = sync.bed
    sync.slurm_node("ALLOCATED")
    bed.cluster.job_table.learn(job(41, state="RUNNING", nodes="slurm-1"))
    for obj in (web(), daemon(), pod(node="node-a", annotations=owned(41))):
        bed.any_pod(obj)
    await sync.syncer.reconcile("slurm-1")
    assert sync.writes() == [("PATCH", NODE_PATH), ("POST", EVICT_WEB),
                             ("PATCH", SLURMD_PATH)], "only the blocker is evicted"
    (taints,) = bed.kube.calls("PATCH", NODE_PATH)
    assert taints == {"metadata": {"resourceVersion": "17"},
                      "spec": {"taints": [OTHER_TAINT, LOCK_TAINT_SPEC]}}
    (lock,) = bed.kube.calls("PATCH", SLURMD_PATH)
    assert lock == {"metadata": {"annotations": {LOCK_KEY: "pending"}}}

    bed.any_pod(web(deletionTimestamp="2025-01-01T00:01:00Z"), "MODIFIED")  # evicted
    await sync.syncer.reconcile("slurm-1")
    assert sync.writes()[3:] == [("PATCH", SLURMD_PATH)], "no second taint or eviction"
    assert bed.kube.calls("PATCH", SLURMD_PATH)[1] == {
        "metadata": {"annotations": {LOCK_KEY: "locked"}}}
    await bed.settle()
    messages = [e["message"] for e in bed.events() if e["reason"] == "NodeLock"]
    assert messages[0].startswith("lock false -> pending for Slurm node slurm-1 waiting for")
    assert messages[1] == "lock pending -> locked for Slurm node slurm-1"


async def test_an_idle_node_is_unlocked(sync: Sync) -> None:
    bed = sync.bed
    put(bed.cluster.node_informer, node(taints=[OTHER_TAINT, LOCK_TAINT_SPEC]))
    put(bed.cluster.slurmd_informer, slurmd(annotations={LOCK_KEY: "locked_strict"}))
    await sync.syncer.reconcile("slurm-1")
    assert bed.kube.calls("PATCH", NODE_PATH) == [
        {"metadata": {"resourceVersion": "17"}, "spec": {"taints": [OTHER_TAINT]}}]
    assert bed.kube.calls("PATCH", SLURMD_PATH) == [
        {"metadata": {"annotations": {LOCK_KEY: "false"}}}]
    assert sync.writes() == [("PATCH", NODE_PATH), ("PATCH", SLURMD_PATH)]


async def test_a_node_not_polled_from_slurm_yet_keeps_its_lock(sync: Sync) -> None:
    bed = sync.bed
    bed.cluster.state.slurm_nodes.clear()
    put(bed.cluster.slurmd_informer, slurmd(annotations={LOCK_KEY: "locked"}))
    assert sync.syncer.facts("slurm-1") is None
    await sync.syncer.reconcile("slurm-1")
    assert bed.kube.seen == [] and bed.slurm.seen == []


async def test_a_slurm_node_without_slurmd_pod_is_not_acted_on(sync: Sync) -> None:
    assert sync.syncer.facts("slurm-9") is None
    await sync.syncer.reconcile("slurm-9")
    assert sync.bed.kube.seen == []


# -- drains ----------------------------------------------------------------------------------------

async def test_a_cordoned_node_drains_its_slurm_node(sync: Sync) -> None:
    bed = sync.bed
    put(bed.cluster.node_informer, node(unschedulable=True))
    await sync.syncer.reconcile("slurm-1")
    assert bed.slurm.calls("POST", f"{SLURM}/node/slurm-1") == [
        {"state": ["DRAIN"], "reason": "k8s: Kubernetes Node node-a is cordoned"}]


async def test_uncordoning_resumes_only_a_drain_kubernetes_set(sync: Sync) -> None:
    bed = sync.bed
    sync.slurm_node("IDLE", "DRAIN", reason="k8s: Kubernetes Node node-a is cordoned")
    await sync.syncer.reconcile("slurm-1")
    assert bed.slurm.calls("POST", f"{SLURM}/node/slurm-1") == [{"state": ["RESUME"]}]

    sync.slurm_node("IDLE", "DRAIN", reason="bad DIMM")  # an admin's drain stays
    await sync.syncer.reconcile("slurm-1")
    assert len(bed.slurm.calls("POST", f"{SLURM}/node/slurm-1")) == 1
    shown = {"metadata": {"annotations": {STATE: "drain", REASON: "bad DIMM"}}}
    assert bed.kube.calls("PATCH", SLURMD_PATH) == [shown]
    assert bed.kube.calls("PATCH", NODE_PATH) == [shown]
    await bed.settle()
    (event,) = bed.events()
    assert event["reason"] == "SlurmNodeDrain" and "bad DIMM" in event["message"]


# -- the prolog's request ----------------------------------------------------------------------

async def test_a_lock_request_is_answered_once_the_node_is_cleared(sync: Sync) -> None:
    bed, syncer = sync.bed, sync.syncer
    bed.slurm.jobs[41] = raw_job(41, state="RUNNING", nodes="slurm-[1-3]")
    bed.cluster.job_table.learn(job(41, state="RUNNING", nodes="slurm-[1-3]"))
    bed.any_pod(web())
    worker = asyncio.create_task(syncer._work())
    try:
        asking = asyncio.create_task(syncer.request_lock("slurm-1", 41, True, within=5))
        await until(lambda: bed.kube.calls("POST", EVICT_WEB))
        await until(lambda: len(bed.kube.calls("PATCH", SLURMD_PATH)) == 1)
        assert bed.kube.calls("PATCH", SLURMD_PATH) == [
            {"metadata": {"annotations": {LOCK_KEY: "pending"}}}]
        bed.any_pod(web(deletionTimestamp="2025-01-01T00:01:00Z"), "MODIFIED")
        await asyncio.sleep(0.05)
        assert not asking.done(), "a strict lock waits until the Pod is gone"
        assert bed.cluster.jobs.in_prolog == {41}, "no script runs while the prolog waits"
        bed.any_pod(web(), "DELETED")  # the Pod handler looks at the node again
        assert await asyncio.wait_for(asking, 2) is LockState.LOCKED_STRICT
        assert bed.kube.calls("PATCH", SLURMD_PATH)[-1] == {
            "metadata": {"annotations": {LOCK_KEY: "locked_strict"}}}
        assert bed.slurm.paths() == [f"{SLURM}/job/41"]
        request = syncer.requests["slurm-1"]
        assert request.answered_at is not None and request.strict
        # the job's nodes as Slurm gave them, for its started call
        assert bed.cluster.jobs.allocated == {41: "slurm-[1-3]"}
        assert bed.cluster.jobs.in_prolog == set()

        # asked again by the same job: answered from the lock, Slurm not read again
        again = await syncer.request_lock("slurm-1", 41, True, within=1)
        assert again is LockState.LOCKED_STRICT and len(bed.slurm.seen) == 1

        # another job's request on the node in between: job 41 is not read again
        bed.slurm.jobs[42] = raw_job(42, state="RUNNING", nodes="slurm-1")
        await syncer.request_lock("slurm-1", 42, True, within=1)
        assert await syncer.request_lock("slurm-1", 41, True, within=1) is LockState.LOCKED_STRICT
        assert bed.slurm.paths() == [f"{SLURM}/job/41", f"{SLURM}/job/42"]
    finally:
        await stop(worker)


async def test_a_lock_request_times_out_with_the_state_reached(sync: Sync) -> None:
    bed, syncer = sync.bed, sync.syncer
    bed.slurm.jobs[41] = raw_job(41, state="RUNNING", nodes="slurm-1")
    bed.kube.routes[("POST", EVICT_WEB)] = answer(429, {"message": "disruption budget"})
    bed.any_pod(web())
    worker = asyncio.create_task(syncer._work())
    try:
        state = await syncer.request_lock("slurm-1", 41, False, within=0.2)
    finally:
        await stop(worker)
    assert state is LockState.PENDING
    assert syncer.requests["slurm-1"].answered_at is None


async def test_a_prolog_waiting_for_its_lock_is_not_counted_at_work(sync: Sync) -> None:
    """The hook API's bound counts calls at work (sunk.hooks.inflight): when a big job starts, a
    prolog on every node waits for its lock at once."""
    bed, syncer = sync.bed, sync.syncer
    bed.slurm.jobs[41] = raw_job(41, state="RUNNING", nodes="slurm-1")
    bed.kube.routes[("POST", EVICT_WEB)] = answer(429, {"message": "disruption budget"})
    bed.any_pod(web())
    bound = InFlight(1)

    async def prolog() -> LockState | None:
        with bound.working_on():
            return await syncer.request_lock("slurm-1", 41, False, within=0.5)

    worker = asyncio.create_task(syncer._work())
    try:
        asking = asyncio.create_task(prolog())
        await until(lambda: bed.kube.calls("POST", EVICT_WEB))
        await asyncio.sleep(0.05)
        assert not asking.done() and bound.working == 0
        assert await asking is LockState.PENDING
    finally:
        await stop(worker)
    assert bound.working == 0


async def test_a_prolog_whose_job_slurmrestd_is_slow_to_read_is_not_counted_at_work(
        sync: Sync) -> None:
    bed, syncer = sync.bed, sync.syncer
    bed.slurm.jobs[41] = raw_job(41, state="RUNNING", nodes="slurm-1")
    release = asyncio.Event()

    async def slow(request: httpx.Request) -> httpx.Response:
        await release.wait()
        return bed.slurm.fallback(request)

    bed.slurm.routes[("GET", f"{SLURM}/job/41")] = slow  # type: ignore[assignment]
    bound = InFlight(1)

    async def prolog() -> LockState | None:
        with bound.working_on():
            return await syncer.request_lock("slurm-1", 41, False, within=0.2)

    asking = asyncio.create_task(prolog())
    await until(lambda: bed.slurm.paths("GET"))
    assert bound.working == 0, "waiting for slurmrestd is not work"
    release.set()
    await asking
    assert bound.working == 0


async def test_a_lock_left_from_the_previous_job_does_not_answer_a_new_one(sync: Sync) -> None:
    """The node still shows the last job's strict lock (not swept yet) and a Pod that may not
    be evicted arrived since: the new job's prolog is not told "locked" from that stale state."""
    bed, syncer = sync.bed, sync.syncer
    put(bed.cluster.slurmd_informer, slurmd(annotations={LOCK_KEY: "locked_strict"}))
    bed.slurm.jobs[42] = raw_job(42, state="RUNNING", nodes="slurm-1")
    bed.kube.routes[("POST", EVICT_WEB)] = answer(429, {"message": "disruption budget"})
    bed.any_pod(web())
    worker = asyncio.create_task(syncer._work())
    try:
        state = await syncer.request_lock("slurm-1", 42, True, within=0.5)
    finally:
        await stop(worker)
    assert state is LockState.PENDING
    assert syncer.requests["slurm-1"].answered_at is None


async def test_a_lock_request_with_nothing_in_the_way_locks_at_once(sync: Sync) -> None:
    bed, syncer = sync.bed, sync.syncer
    bed.slurm.jobs[41] = raw_job(41, state="CONFIGURING", nodes="slurm-1")
    worker = asyncio.create_task(syncer._work())
    try:
        state = await syncer.request_lock("slurm-1", 41, False, within=2)
    finally:
        await stop(worker)
    assert state is LockState.LOCKED
    assert bed.kube.calls("PATCH", NODE_PATH)[0]["spec"]["taints"][-1] == LOCK_TAINT_SPEC


@pytest.mark.parametrize("slurm_says,status,why", [
    (raw_job(41), 409, "pending"),
    (raw_job(41, state="COMPLETED", nodes="slurm-1"), 410, "completed: it will not run"),
    (raw_job(41, state="CANCELLED", nodes="slurm-1"), 410, "cancelled: it will not run"),
    (raw_job(41, state="RUNNING", nodes="slurm-2"), 409, "was given slurm-2, not slurm-1"),
    (None, 410, "Slurm has no job 41"),
])
async def test_a_lock_for_a_job_not_starting_there_is_refused(
        sync: Sync, slurm_says: dict[str, Any] | None, status: int, why: str) -> None:
    bed = sync.bed
    if slurm_says is not None:
        bed.slurm.jobs[41] = slurm_says
    exc = await refused(sync.syncer.request_lock("slurm-1", 41, True, within=1))
    assert exc.status == status and why in exc.detail
    assert sync.syncer.requests == {} and len(sync.syncer.queue) == 0
    assert bed.kube.seen == []


def held_reads(sync: Sync, job_id: int) -> asyncio.Event:
    """slurmrestd answers reads of the job as it was when asked, once released."""
    release = asyncio.Event()

    async def slow(request: httpx.Request) -> httpx.Response:
        answer = sync.bed.slurm.fallback(request)
        await release.wait()
        return answer

    sync.bed.slurm.routes[("GET", f"{SLURM}/job/{job_id}")] = slow  # type: ignore[assignment]
    return release


#: A gang of two's identity, as its job names it.
GANG = PodIdentity("ns", "job:g", "6a6e-1d", stand_ins.NAME, ("0123456789a0", "0123456789a1"))


@pytest.mark.parametrize("owner", [None, GANG], ids=["not-ours", "a-gang"])
async def test_lock_requests_for_one_job_at_once_share_one_read_of_it(
        sync: Sync, owner: PodIdentity | None) -> None:
    """A gang's prologs, one per node, ask at the same moment: one read of the job for all,
    and one prolog hanging up does not fail the read the others wait for. So do those of a
    job not ours (a Slurm job's, or one the job table has not learned yet)."""
    bed, syncer = sync.bed, sync.syncer
    if owner is not None:
        bed.cluster.job_table.learn(job(41, owner, state="CONFIGURING", nodes="slurm-1"))
        assert bed.cluster.jobs.owner(41) == owner
    bed.slurm.jobs[41] = raw_job(41, owner, state="CONFIGURING", nodes="slurm-1")
    release = held_reads(sync, 41)
    asking = [asyncio.create_task(syncer.request_lock("slurm-1", 41, False, within=0.05))
              for _ in range(3)]
    await until(lambda: bed.slurm.paths("GET"))
    await asyncio.sleep(0.02)
    await stop(asking[0])  # the first prolog hangs up
    release.set()
    for each in asking[1:]:
        assert await each is LockState.FALSE  # not locked within 0.05 s: no worker here
    assert bed.slurm.paths("GET") == [f"{SLURM}/job/41"]
    assert syncer.lock_check.reads == {}


async def test_lock_requests_for_a_single_pods_job_each_read_it(sync: Sync) -> None:
    """One Pod's job runs on one node, so one prolog asks: its read is its own, without the
    shared read's task (a second request is a prolog that asked again)."""
    bed, syncer = sync.bed, sync.syncer
    bed.cluster.job_table.learn(job(41, state="CONFIGURING", nodes="slurm-1"))  # one Pod's, ours
    bed.slurm.jobs[41] = raw_job(41, state="CONFIGURING", nodes="slurm-1")
    release = held_reads(sync, 41)
    asking = [asyncio.create_task(syncer.request_lock("slurm-1", 41, False, within=0.05))
              for _ in range(2)]
    await until(lambda: len(bed.slurm.paths("GET")) == 2)
    assert syncer.lock_check.reads == {}
    release.set()
    for each in asking:
        assert await each is LockState.FALSE  # not locked within 0.05 s: no worker here
    assert syncer.requests["slurm-1"].job_id == 41


async def test_a_request_refused_on_a_read_begun_before_it_asked_reads_again(
        sync: Sync) -> None:
    """The read it joined may be older than its call (the job was pending then): a refusal
    is given only on a read of its own."""
    bed, syncer = sync.bed, sync.syncer
    bed.slurm.jobs[41] = raw_job(41)
    release = held_reads(sync, 41)
    early = asyncio.create_task(syncer.request_lock("slurm-1", 41, False, within=0.05))
    await until(lambda: bed.slurm.paths("GET"))
    bed.slurm.jobs[41] = raw_job(41, state="CONFIGURING", nodes="slurm-1")  # now starting
    joined = asyncio.create_task(syncer.request_lock("slurm-1", 41, False, within=0.05))
    await asyncio.sleep(0.02)
    release.set()
    exc = await refused(early)
    assert exc.status == 409 and "pending" in exc.detail, "its own read: refused"
    assert await joined is LockState.FALSE, "read again, and taken"
    assert len(bed.slurm.paths("GET")) == 2
    assert syncer.requests["slurm-1"].job_id == 41
    assert syncer.lock_check.reads == {}


async def test_a_shared_read_that_fails_tells_every_request_to_retry(sync: Sync) -> None:
    bed, syncer = sync.bed, sync.syncer
    bed.slurm.jobs[41] = raw_job(41, state="CONFIGURING", nodes="slurm-1")
    release = asyncio.Event()

    async def failing(request: httpx.Request) -> httpx.Response:
        await release.wait()
        return httpx.Response(503, text="slurmctld down")

    bed.slurm.routes[("GET", f"{SLURM}/job/41")] = failing  # type: ignore[assignment]
    asking = [asyncio.create_task(syncer.request_lock("slurm-1", 41, False, within=1))
              for _ in range(2)]
    await until(lambda: bed.slurm.paths("GET"))
    release.set()
    for each in asking:
        exc = await refused(each)
        assert exc.status == 503 and exc.retry_after == 5
    assert len(bed.slurm.paths("GET")) == 1
    assert syncer.lock_check.reads == {} and syncer.requests == {}


async def test_a_lock_request_during_a_slurm_outage_is_a_503(sync: Sync) -> None:
    sync.bed.slurm.routes[("GET", f"{SLURM}/job/41")] = down()
    exc = await refused(sync.syncer.request_lock("slurm-1", 41, True, within=1))
    assert exc.status == 503 and exc.retry_after == 5


async def test_a_lock_for_a_node_we_do_not_know_is_none(sync: Sync) -> None:
    assert await sync.syncer.request_lock("slurm-9", 41, True, within=1) is None
    assert sync.bed.slurm.seen == []


async def test_an_unanswered_request_expires_on_an_idle_node_only(sync: Sync) -> None:
    syncer = sync.syncer
    syncer.requests["slurm-1"] = LockRequest(41, True, at=time.monotonic() - REQUEST_TTL - 1)
    sync.slurm_node("ALLOCATED")
    facts = syncer.facts("slurm-1")
    assert facts is not None and not facts.requested and facts.strict is True
    assert "slurm-1" in syncer.requests, "kept while Slurm runs a job there"
    sync.slurm_node("IDLE")
    facts = syncer.facts("slurm-1")
    assert facts is not None and facts.strict is None and syncer.requests == {}


# -- who stays on a locked node ---------------------------------------------------------------

async def test_a_pod_placed_by_sunk_stays_and_one_claiming_to_be_is_evicted(sync: Sync) -> None:
    bed = sync.bed
    sync.slurm_node("ALLOCATED")
    bed.cluster.job_table.learn(job(41, state="RUNNING", nodes="slurm-1"))
    bed.any_pod(pod(node="node-a", annotations=owned(41)))
    bed.any_pod(pod("bbbb-0002", name="fake", node="node-a",
                    annotations=owned(41, uid="bbbb-0002")))  # wrote sunk's job-id itself
    await sync.syncer.reconcile("slurm-1")
    assert [p for m, p, _ in bed.kube.seen if p.endswith("/eviction")] == [
        "/api/v1/namespaces/ns/pods/fake/eviction"]


async def test_without_the_scheduler_a_pod_is_sunks_by_its_annotations(sync: Sync) -> None:
    async with stand_ins.bed(components=["syncer"]) as bed:
        syncer = Syncer(bed.cluster, bed.executor, bed.slurm_client, bed.watch)
        connect_syncer(syncer)
        mine = pod(node="node-a", annotations=owned(41))
        copied = pod("bbbb-0002", name="q", node="node-a", annotations=owned(41))
        assert syncer._placed_by_sunk(mine)
        assert not syncer._placed_by_sunk(copied), "written for another Pod's uid"
        assert not syncer._placed_by_sunk(web())
        syncer.queue.close()


# -- what needs a look -------------------------------------------------------------------------

async def test_an_idle_node_needs_no_look_and_each_reason_gives_one(sync: Sync) -> None:
    bed, syncer = sync.bed, sync.syncer
    assert not syncer._needs_look("slurm-1", "node-a")
    sync.slurm_node("MIXED")
    assert syncer._needs_look("slurm-1", "node-a")
    sync.slurm_node("IDLE", "DRAIN")
    assert syncer._needs_look("slurm-1", "node-a")
    sync.slurm_node("IDLE")
    for changed in (node(unschedulable=True), node(annotations={STATE: "drain"}),
                    node(taints=[LOCK_TAINT_SPEC])):
        put(bed.cluster.node_informer, changed)
        assert syncer._needs_look("slurm-1", "node-a"), changed
    put(bed.cluster.node_informer, node())
    put(bed.cluster.slurmd_informer, slurmd(annotations={LOCK_KEY: "pending"}))
    assert syncer._needs_look("slurm-1", "node-a")
    put(bed.cluster.slurmd_informer, slurmd())
    syncer.requests["slurm-1"] = LockRequest(41, False)
    assert syncer._needs_look("slurm-1", "node-a")


async def test_the_sweep_queues_the_nodes_that_need_a_look(sync: Sync) -> None:
    bed, syncer = sync.bed, sync.syncer
    put(bed.cluster.node_informer, node("node-b"))
    put(bed.cluster.slurmd_informer, slurmd("slurm-2", "node-b"))
    bed.cluster.set_slurm_nodes([slurm_info("slurm-1", "ALLOCATED"),
                                 slurm_info("slurm-2", "IDLE")])
    sweep = asyncio.create_task(syncer._sweep(interval=60))
    try:
        await until(lambda: len(syncer.queue) == 1)
    finally:
        await stop(sweep)
    assert await syncer.queue.get() == "slurm-1"


async def test_the_sweep_looks_again_at_a_busy_node_only_once_something_changed(
        sync: Sync) -> None:
    bed, syncer = sync.bed, sync.syncer
    sync.slurm_node("ALLOCATED")

    async def one_sweep() -> list[str]:
        sweep = asyncio.create_task(syncer._sweep(interval=60))
        await asyncio.sleep(0.01)
        await stop(sweep)
        queued = []
        while len(syncer.queue):
            queued.append(await syncer.queue.get())
            syncer.queue.done(queued[-1])
        return queued

    assert await one_sweep() == ["slurm-1"]
    await syncer.reconcile("slurm-1")
    assert await one_sweep() == [], "busy, but nothing changed since its last look"
    bed.any_pod(pod(node="node-a"))  # a Pod arrives on its Node
    assert await one_sweep() == ["slurm-1"]
    await syncer.reconcile("slurm-1")
    sync.slurm_node("IDLE")  # its jobs ended
    assert await one_sweep() == ["slurm-1"]
    await syncer.reconcile("slurm-1")
    sync.slurm_node("ALLOCATED")
    await syncer.reconcile("slurm-1")
    syncer.requests["slurm-1"] = LockRequest(41, False)
    assert await one_sweep() == ["slurm-1"], "a lock asked for: looked at every sweep"
    await syncer.reconcile("slurm-1")
    assert await one_sweep() == ["slurm-1"]
    # a lock still being taken (pending: evictions to retry) is looked at every sweep
    assert syncer._lock_state("slurm-1") is LockState.PENDING
    syncer.requests["slurm-1"].answered_at = time.monotonic()
    assert await one_sweep() == ["slurm-1"]


async def test_a_look_whose_writes_failed_is_made_again_though_nothing_changed(
        sync: Sync) -> None:
    bed, syncer = sync.bed, sync.syncer
    sync.slurm_node("ALLOCATED")
    syncer.requests["slurm-1"] = LockRequest(41, True)
    bed.kube.routes[("PATCH", NODE_PATH)] = answer(503, {"message": "the API server is away"})
    with pytest.raises(kube.KubeError):
        await syncer.reconcile("slurm-1")
    del syncer.requests["slurm-1"]
    sweep = asyncio.create_task(syncer._sweep(interval=60))
    try:
        await until(lambda: len(syncer.queue) == 1)
    finally:
        await stop(sweep)
    assert await syncer.queue.get() == "slurm-1"


async def test_a_pod_event_on_a_node_being_locked_queues_it(sync: Sync) -> None:
    bed, syncer = sync.bed, sync.syncer
    bed.any_pod(web())
    assert len(syncer.queue) == 0, "no lock is being taken"
    syncer.requests["slurm-1"] = LockRequest(41, True)
    bed.any_pod(web(), "DELETED")
    bed.any_pod(pod(), "ADDED")  # not bound: no node to look at
    assert len(syncer.queue) == 1 and await syncer.queue.get() == "slurm-1"


async def test_a_pod_event_on_a_node_locked_already_waits_for_the_sweep(sync: Sync) -> None:
    bed, syncer = sync.bed, sync.syncer
    syncer.requests["slurm-1"] = LockRequest(41, True, answered_at=time.monotonic())
    bed.any_pod(web())
    assert len(syncer.queue) == 0, "answered: the sweep sees the change (its fingerprint)"
    # evictions under way: each Pod that goes matters now
    put(bed.cluster.slurmd_informer, slurmd(annotations={LOCK_KEY: "pending"}))
    bed.any_pod(web(), "DELETED")
    assert len(syncer.queue) == 1 and await syncer.queue.get() == "slurm-1"


async def test_what_locking_needs_of_a_pod_is_made_again_when_the_pod_or_its_job_changes(
        sync: Sync) -> None:
    bed, syncer = sync.bed, sync.syncer
    mine = pod(node="node-a", annotations=owned(41), resourceVersion="5")
    assert not syncer._pod_on_node(mine).stays, "no job of ours names it yet"
    bed.cluster.job_table.learn(job(41, state="RUNNING", nodes="slurm-1"))
    assert syncer._pod_on_node(mine).placed_by_sunk, "its job is known now"
    tolerating = pod(node="node-a", annotations=owned(41), resourceVersion="6")
    tolerating["spec"]["tolerations"] = [LOCK_TAINT_SPEC]
    assert syncer._pod_on_node(tolerating).tolerates_lock, "a new version is read again"
    bed.any_pod(tolerating, "DELETED")
    assert tolerating["metadata"]["uid"] not in syncer._pods_seen


async def test_a_worker_survives_an_outage(sync: Sync) -> None:
    bed, syncer = sync.bed, sync.syncer
    put(bed.cluster.node_informer, node(unschedulable=True))
    bed.slurm.routes[("POST", f"{SLURM}/node/slurm-1")] = down()
    worker = asyncio.create_task(syncer._work())
    try:
        syncer.queue.add("slurm-1")
        await until(lambda: len(bed.slurm.seen) == 1)
        await until(lambda: len(syncer.queue) == 0)
        del bed.slurm.routes[("POST", f"{SLURM}/node/slurm-1")]
        syncer.queue.add("slurm-1")
        await until(lambda: len(bed.slurm.seen) == 2)
        assert not worker.done(), "the outage did not end the worker"
    finally:
        await stop(worker)
