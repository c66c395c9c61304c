"""The scheduler's answers to the placeholder's hook calls, against HTTP-level stand-ins: each
checks the call against what Slurm says of the job, refuses a mismatch (409) and turns an
outage into a 503 the caller retries."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field

import pytest

from sunk import kube
from sunk.hooks.answers import HookAnswers, answering
from sunk.hooks.auth import HookRefused
from sunk.hooks.inflight import InFlight
from sunk.slurm.client import SlurmError
from sunk.slurm.job import PodIdentity, member_id
from tests.unit.core import stand_ins
from tests.unit.core.stand_ins import (
    NAME,
    SLURM,
    Bed,
    answer,
    down,
    job,
    pod,
    put,
    raw_job,
    slurmd,
    who,
)

UID = "aaaa-0001"
POD_PATH = "/api/v1/namespaces/ns/pods/p"


@dataclass
class Hooks:
    bed: Bed
    answers: HookAnswers
    woken: list[PodIdentity] = field(default_factory=list)


@pytest.fixture
async def hooks() -> AsyncIterator[Hooks]:
    async with stand_ins.bed() as bed:
        made = Hooks(bed, HookAnswers(bed.cluster, bed.watch, bed.executor,
                                      wake=lambda who: made.woken.append(who)))
        put(bed.cluster.pod_informers[0], pod())
        yield made


async def refused(call: Awaitable[object]) -> HookRefused:
    with pytest.raises(HookRefused) as caught:
        await call
    return caught.value


# -- whose job ---------------------------------------------------------------------------------

async def test_a_job_is_owned_by_its_pod_and_other_jobs_by_no_one(hooks: Hooks) -> None:
    bed = hooks.bed
    bed.cluster.job_table.learn(job(41))
    bed.cluster.job_table.learn(job(42, stamped=False))  # claims the Pod, not submitted by us
    bed.cluster.job_table.learn(job(43, who(scheduler="another-sunk")))
    assert hooks.answers.job_owner(41) == f"{NAME}/{UID}"
    assert [hooks.answers.job_owner(j) for j in (42, 43, 99)] == [None, None, None]
    for call in (hooks.answers.job_started, hooks.answers.job_terminating,
                 hooks.answers.drain_for_job):
        assert await call(99, "slurm-1") is None
    assert await hooks.answers.wait_pod_gone(99, 0.01) is None
    assert bed.slurm.seen == [] and bed.kube.seen == [], "nothing asked for a stranger's job"
    assert hooks.answers.ready is bed.cluster.ready


async def test_reading_a_job_the_table_does_not_know_learns_it_and_an_outage_is_a_503(
        hooks: Hooks) -> None:
    """What the hook API does before it would tell a placeholder its job is not ours."""
    bed = hooks.bed
    bed.slurm.jobs[41] = raw_job(41, state="RUNNING", nodes="slurm-1", started=True)
    assert hooks.answers.job_owner(41) is None
    await hooks.answers.read_job(41)
    assert hooks.answers.job_owner(41) == f"{NAME}/{UID}"
    await hooks.answers.read_job(99)  # Slurm has no such job: still not ours
    assert hooks.answers.job_owner(99) is None
    bed.slurm.routes[("GET", f"{SLURM}/job/42")] = down()
    outage = await refused(hooks.answers.read_job(42))
    assert outage.status == 503 and outage.retry_after == 5
    assert hooks.answers.scheduler_name == NAME


# -- started -----------------------------------------------------------------------------------

@pytest.mark.parametrize("slurm_says,why", [
    (raw_job(41, state="PENDING"), "pending, not running"),
    (raw_job(41, state="RUNNING", nodes="slurm-2", started=True), "on slurm-2, not on slurm-1"),
    (raw_job(41, state="RUNNING", nodes="slurm-1"), "does not say started"),
    (raw_job(41, state="COMPLETED", nodes="slurm-1", started=True), "completed, not running"),
    (None, "Slurm has no job 41"),
])
async def test_started_is_refused_unless_slurm_runs_the_started_job_there(
        hooks: Hooks, slurm_says: dict[str, object] | None, why: str) -> None:
    bed = hooks.bed
    bed.cluster.job_table.learn(job(41))
    if slurm_says is not None:
        bed.slurm.jobs[41] = slurm_says
    exc = await refused(hooks.answers.job_started(41, "slurm-1"))
    assert exc.status == 409 and why in exc.detail
    assert bed.slurm.paths() == [f"{SLURM}/job/41"], "Slurm's word is read, not the cache's"
    assert hooks.woken == [] and bed.kube.seen == []
    slurm_started = str((slurm_says or {}).get("extra", "")).endswith(": started")
    assert (41 in bed.cluster.jobs.started_at) == slurm_started, (
        "only Slurm's own word times the start of a job whose call was refused")


async def test_started_on_its_node_wakes_the_pod_at_once(hooks: Hooks) -> None:
    bed = hooks.bed
    bed.cluster.job_table.learn(job(41, state="RUNNING", nodes="slurm-1"))  # the poll's older copy
    bed.slurm.jobs[41] = raw_job(41, state="RUNNING", nodes="slurm-[1-2]", started=True)
    assert await hooks.answers.job_started(41, "slurm-2") == ("ns/p", False)
    assert hooks.woken == [who()]
    cached = bed.cluster.jobs.get(41)
    assert cached is not None and cached.started, "the fresh read is learned"


async def test_started_on_a_node_its_lock_read_showed_needs_no_second_read(
        hooks: Hooks) -> None:
    bed = hooks.bed
    bed.cluster.job_table.learn(job(41))  # pending in the cache: the poll has not seen it run
    bed.cluster.job_table.allocated[41] = "slurm-[1-2]"  # what Slurm said when its prolog asked
    assert await hooks.answers.job_started(41, "slurm-2") == ("ns/p", False)
    assert hooks.woken == [who()]
    assert bed.slurm.seen == [], "Slurm was read at the lock; not again"
    told = bed.cluster.jobs.get(41)
    assert told is not None and told.started and told.state == "RUNNING"
    assert told.nodes == "slurm-[1-2]"


async def test_started_on_another_node_than_the_lock_read_showed_reads_slurm(
        hooks: Hooks) -> None:
    bed = hooks.bed
    bed.cluster.job_table.learn(job(41))
    bed.cluster.job_table.allocated[41] = "slurm-1"
    bed.slurm.jobs[41] = raw_job(41, state="RUNNING", nodes="slurm-1", started=True)
    exc = await refused(hooks.answers.job_started(41, "slurm-2"))
    assert exc.status == 409 and "not on slurm-2" in exc.detail
    assert bed.slurm.paths() == [f"{SLURM}/job/41"]
    assert hooks.woken == []


async def test_started_for_a_pod_already_gone_says_so(hooks: Hooks) -> None:
    bed = hooks.bed
    bed.cluster.job_table.learn(job(41, who("bbbb-0002", name="q")))
    bed.slurm.jobs[41] = raw_job(41, who("bbbb-0002", name="q"), state="RUNNING",
                                 nodes="slurm-1", started=True)
    assert await hooks.answers.job_started(41, "slurm-1") == ("ns/q", True)


async def test_a_slurm_outage_while_answering_is_a_503(hooks: Hooks) -> None:
    bed = hooks.bed
    bed.cluster.job_table.learn(job(41))
    bed.slurm.routes[("GET", f"{SLURM}/job/41")] = down()
    exc = await refused(hooks.answers.job_started(41, "slurm-1"))
    assert exc.status == 503 and exc.retry_after == 5
    assert "Slurm did not answer" in exc.detail and isinstance(exc.__cause__, SlurmError)
    exc = await refused(hooks.answers.job_terminating(41, "slurm-1"))
    assert exc.status == 503
    assert hooks.woken == [] and bed.kube.seen == []


async def test_answering_maps_the_api_servers_outage_to_503_and_lets_others_through(
        ) -> None:
    with pytest.raises(HookRefused) as caught:
        async with answering("deleting Pod ns/p"):
            raise kube.KubeError("DELETE: 500 etcd timeout", status=500)
    assert caught.value.status == 503 and "the API server did not answer" in caught.value.detail
    with pytest.raises(ValueError):
        async with answering("anything"):
            raise ValueError("a bug is not an outage")


# -- terminating -------------------------------------------------------------------------------

async def test_terminating_deletes_the_pod_once(hooks: Hooks) -> None:
    bed = hooks.bed
    bed.cluster.job_table.learn(job(41, state="RUNNING", nodes="slurm-1", started=True))
    assert await hooks.answers.job_terminating(41, "slurm-1") == ("ns/p", False)
    (delete,) = bed.kube.calls("DELETE", POD_PATH)
    assert delete["preconditions"] == {"uid": UID}
    assert bed.slurm.seen == [], "a running job in the cache needs no read"
    put(bed.cluster.pod_informers[0], pod(deletionTimestamp="2025-01-01T00:01:00Z"))
    assert await hooks.answers.job_terminating(41, "slurm-1") == ("ns/p", False)
    assert len(bed.kube.calls("DELETE", POD_PATH)) == 1, "a Pod being deleted is not again"
    await bed.settle()
    (event,) = bed.events()
    assert event["reason"] == "SlurmJobTerminating" and event["type"] == "Warning"
    assert "job 41 on slurm-1" in event["message"]


async def test_terminating_a_job_slurm_shows_pending_is_refused(hooks: Hooks) -> None:
    bed = hooks.bed
    bed.cluster.job_table.learn(job(41))
    bed.slurm.jobs[41] = raw_job(41)
    exc = await refused(hooks.answers.job_terminating(41, "slurm-1"))
    assert exc.status == 409 and "pending" in exc.detail
    assert bed.kube.seen == []


async def test_terminating_a_job_the_poll_saw_pending_reads_slurm_first(hooks: Hooks) -> None:
    bed = hooks.bed
    bed.cluster.job_table.learn(job(41))
    bed.slurm.jobs[41] = raw_job(41, state="RUNNING", nodes="slurm-1", started=True)
    assert await hooks.answers.job_terminating(41, "slurm-1") == ("ns/p", False)
    assert bed.slurm.paths() == [f"{SLURM}/job/41"]
    assert len(bed.kube.calls("DELETE", POD_PATH)) == 1


async def test_terminating_for_a_pod_gone_deletes_nothing(hooks: Hooks) -> None:
    bed = hooks.bed
    bed.cluster.job_table.learn(job(41, who("bbbb-0002", name="q"), state="RUNNING",
                                    nodes="slurm-1"))
    assert await hooks.answers.job_terminating(41, "slurm-1") == ("ns/q", True)
    assert bed.kube.seen == []


async def test_terminating_while_the_api_server_fails_is_a_503(hooks: Hooks) -> None:
    bed = hooks.bed
    bed.cluster.job_table.learn(job(41, state="RUNNING", nodes="slurm-1"))
    bed.kube.routes[("DELETE", POD_PATH)] = answer(500, {"message": "etcd timeout"})
    exc = await refused(hooks.answers.job_terminating(41, "slurm-1"))
    assert exc.status == 503 and "etcd timeout" in exc.detail
    await bed.settle()
    assert bed.events() == [], "no Event for a deletion that did not happen"


# -- drain ---------------------------------------------------------------------------------------

async def test_drain_for_a_job_drains_its_own_node_naming_the_pod(hooks: Hooks) -> None:
    bed = hooks.bed
    bed.cluster.job_table.learn(job(41, state="COMPLETING", nodes="slurm-1"))
    assert await hooks.answers.drain_for_job(41, "slurm-1") == ("ns/p", False)
    (drain,) = bed.slurm.calls("POST", f"{SLURM}/node/slurm-1")
    assert drain["state"] == ["DRAIN"] and "Pod ns/p still terminating" in drain["reason"]
    await bed.settle()
    assert [e["reason"] for e in bed.events()] == ["SlurmNodeDrained"]


async def test_drain_for_a_job_on_another_node_is_refused(hooks: Hooks) -> None:
    bed = hooks.bed
    bed.cluster.job_table.learn(job(41, state="RUNNING", nodes="slurm-2"))
    exc = await refused(hooks.answers.drain_for_job(41, "slurm-1"))
    assert exc.status == 409 and "was given slurm-2, not slurm-1" in exc.detail
    assert bed.slurm.seen == []


async def test_drain_reads_slurm_when_the_cache_has_no_node_yet(hooks: Hooks) -> None:
    bed = hooks.bed
    bed.cluster.job_table.learn(job(41))
    bed.slurm.jobs[41] = raw_job(41, state="RUNNING", nodes="slurm-1")
    assert await hooks.answers.drain_for_job(41, "slurm-1") == ("ns/p", False)
    assert bed.slurm.paths() == [f"{SLURM}/job/41", f"{SLURM}/node/slurm-1"]


async def test_drain_for_a_pod_gone_drains_nothing(hooks: Hooks) -> None:
    bed = hooks.bed
    bed.cluster.job_table.learn(job(41, who("bbbb-0002", name="q"), state="RUNNING",
                                    nodes="slurm-1"))
    assert await hooks.answers.drain_for_job(41, "slurm-1") == ("ns/q", True)
    assert bed.slurm.seen == []


async def test_a_drain_slurm_does_not_take_is_a_503(hooks: Hooks) -> None:
    bed = hooks.bed
    bed.cluster.job_table.learn(job(41, state="RUNNING", nodes="slurm-1"))
    bed.slurm.routes[("POST", f"{SLURM}/node/slurm-1")] = down()
    exc = await refused(hooks.answers.drain_for_job(41, "slurm-1"))
    assert exc.status == 503 and exc.detail.startswith("draining slurm-1")


# -- waiting for the Pod -------------------------------------------------------------------------

async def test_wait_pod_gone_returns_when_the_deleted_event_arrives(hooks: Hooks) -> None:
    bed = hooks.bed
    bed.cluster.job_table.learn(job(41, state="RUNNING", nodes="slurm-1"))
    waiting = asyncio.create_task(hooks.answers.wait_pod_gone(41, within=5))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    bed.add_pod(pod("bbbb-0002", name="q"), "DELETED")  # another Pod: still waiting
    await asyncio.sleep(0.01)
    assert not waiting.done()
    bed.add_pod(pod(), "DELETED")
    assert await asyncio.wait_for(waiting, 1) == ("ns/p", True)


async def test_wait_pod_gone_says_false_when_the_pod_stays(hooks: Hooks) -> None:
    hooks.bed.cluster.job_table.learn(job(41, state="RUNNING", nodes="slurm-1"))
    assert await hooks.answers.wait_pod_gone(41, within=0.02) == ("ns/p", False)


async def test_a_placeholder_waiting_for_its_pod_is_not_counted_at_work(hooks: Hooks) -> None:
    """The hook API's bound counts calls at work (sunk.hooks.inflight): when a big job ends, a
    placeholder on every node waits for its Pod at once."""
    hooks.bed.cluster.job_table.learn(job(41, state="RUNNING", nodes="slurm-1"))
    bound = InFlight(1)

    async def call() -> object:
        with bound.working_on():
            return await hooks.answers.wait_pod_gone(41, within=5)

    polling = asyncio.create_task(call())
    await asyncio.sleep(0.01)
    assert not polling.done() and bound.working == 0
    hooks.bed.add_pod(pod(), "DELETED")
    assert await asyncio.wait_for(polling, 1) == ("ns/p", True)
    assert bound.working == 0


async def test_wait_pod_gone_for_a_pod_already_gone_does_not_wait(hooks: Hooks) -> None:
    hooks.bed.cluster.job_table.learn(job(41, who("bbbb-0002", name="q")))
    assert await hooks.answers.wait_pod_gone(41, within=60) == ("ns/q", True)


# -- a gang's job: its hooks answer for every member ---------------------------------------------

GANG_UIDS = ("cccc0001-0000", "cccc0002-0000", "cccc0003-0000")


def gang_member(i: int, node: str | None = None, phase: str = "Running") -> kube.Obj:
    member = pod(GANG_UIDS[i], name=f"g-{i}", node=node)
    member["metadata"]["labels"] = {"sunk.coreweave.com/gang": "g"}
    member["status"]["phase"] = phase
    return member


def gang_job(job_id: int, **kw: object) -> PodIdentity:
    owner = PodIdentity("ns", "label:g", "abcd" * 8, NAME,
                        tuple(member_id(u) for u in GANG_UIDS))
    hooks_job = job(job_id, owner, **kw)
    assert hooks_job.owner == owner
    return owner


@pytest.fixture
async def gang_hooks(hooks: Hooks) -> Hooks:
    bed = hooks.bed
    for i, (slurm_node, k8s_node) in enumerate(
            [("slurm-1", "node-a"), ("slurm-2", "node-b"), ("slurm-3", "node-c")]):
        put(bed.cluster.slurmd_informer, slurmd(slurm_node, k8s_node))
        bed.add_pod(gang_member(i, node=k8s_node))
    owner = gang_job(51)
    bed.cluster.job_table.learn(job(51, owner, state="RUNNING", nodes="slurm-[1-3]", started=True))
    return hooks


async def test_a_gangs_job_is_owned_by_the_gang(gang_hooks: Hooks) -> None:
    assert gang_hooks.answers.job_owner(51) == f"{NAME}/{'abcd' * 8}"


async def test_terminating_a_gangs_job_deletes_every_live_member_but_not_one_that_ended(
        gang_hooks: Hooks) -> None:
    bed = gang_hooks.bed
    bed.add_pod(gang_member(2, node="node-c", phase="Succeeded"), "MODIFIED")
    assert await gang_hooks.answers.job_terminating(51, "slurm-1") == ("ns/label:g", False)
    deleted = set(bed.kube.paths("DELETE"))
    assert deleted == {"/api/v1/namespaces/ns/pods/g-0", "/api/v1/namespaces/ns/pods/g-1"}


async def test_a_gangs_drain_drains_only_the_nodes_whose_member_is_still_there(
        gang_hooks: Hooks) -> None:
    bed = gang_hooks.bed
    bed.add_pod(gang_member(1, node="node-b"), "DELETED")
    assert await gang_hooks.answers.drain_for_job(51, "slurm-1") == ("ns/label:g", False)
    drained = set(bed.slurm.paths("POST"))
    assert drained == {f"{SLURM}/node/slurm-1", f"{SLURM}/node/slurm-3"}


async def test_a_gangs_job_waits_for_every_member_to_be_gone(gang_hooks: Hooks) -> None:
    bed = gang_hooks.bed
    waiting = asyncio.create_task(gang_hooks.answers.wait_pod_gone(51, within=5))
    for i in range(2):
        bed.add_pod(gang_member(i), "DELETED")
        await asyncio.sleep(0.01)
        assert not waiting.done(), f"{2 - i} members are still there"
    bed.add_pod(gang_member(2), "DELETED")
    assert await asyncio.wait_for(waiting, 1) == ("ns/label:g", True)
