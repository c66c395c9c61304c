"""The Slurm poller against an HTTP-level stand-in of slurmrestd: adoption at start, the relist
after an outage, and each poll (changed states wake their Pods, gone jobs are forgotten, a few
jobs' details are read)."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx
import pytest

from sunk.slurm.job import Job, PodIdentity
from tests.unit.core import stand_ins
from tests.unit.core.stand_ins import (
    SLURM,
    Bed,
    down,
    job,
    raw_job,
    stop,
    until,
    who,
)

A, B, C = who("aaaa-0001", "a"), who("bbbb-0002", "b"), who("cccc-0003", "c")


@dataclass
class Watch:
    bed: Bed
    woken: list[PodIdentity] = field(default_factory=list)
    stuck: list[tuple[int, str]] = field(default_factory=list)


@pytest.fixture
async def watch() -> AsyncIterator[Watch]:
    async with stand_ins.bed(slurm_poll_interval=0.01) as bed:
        made = Watch(bed)
        bed.watch.wake = made.woken.append
        bed.watch.stuck = lambda job, who, why: made.stuck.append((job.job_id, why))
        yield made


def aged(found: Job | None, seconds: float = 100.0) -> Job:
    """The job as read ``seconds`` ago."""
    assert found is not None
    found.checked_at = time.monotonic() - seconds
    return found


# -- start and recovery ----------------------------------------------------------------------

async def test_adopt_learns_only_the_jobs_this_scheduler_submitted(watch: Watch) -> None:
    bed = watch.bed
    bed.slurm.jobs = {41: raw_job(41, A, state="RUNNING", nodes="slurm-1", started=True),
                      42: raw_job(42, B, stamped=False),  # a user's job claiming a Pod
                      43: raw_job(43, who("dddd-0004", scheduler="another-sunk")),
                      44: raw_job(44, C, state="FAILED"),  # a refused submission
                      45: {"job_id": 45, "name": "train", "job_state": ["RUNNING"]}}
    await bed.watch.adopt()
    assert set(bed.cluster.jobs) == {41}
    assert bed.cluster.jobs.by_uid == {A.uid: 41}
    assert bed.slurm.paths() == [f"{SLURM}/jobs/"]
    assert bed.cluster.state.slurm_healthy


async def test_adopt_waits_out_an_outage(watch: Watch) -> None:
    bed = watch.bed
    bed.slurm.jobs = {41: raw_job(41, A)}
    answers = itertools.chain([httpx.Response(503, text="slurmctld down")],
                              itertools.repeat(None))

    def listing(request: httpx.Request) -> httpx.Response:
        return next(answers) or bed.slurm.fallback(request)

    bed.slurm.routes[("GET", f"{SLURM}/jobs/")] = listing
    await asyncio.wait_for(bed.watch.adopt(), 5)
    assert set(bed.cluster.jobs) == {41} and len(bed.slurm.seen) == 2


async def test_relist_forgets_lost_jobs_and_wakes_every_pod_of_ours(watch: Watch) -> None:
    bed = watch.bed
    bed.cluster.job_table.learn(job(41, A))
    bed.cluster.job_table.learn(job(42, B))
    bed.slurm.jobs = {42: raw_job(42, B, state="RUNNING", nodes="slurm-1"),
                      45: raw_job(45, C)}  # lost 41 in a crash
    await bed.watch.relist()
    assert set(bed.cluster.jobs) == {42, 45}
    assert bed.cluster.jobs.by_uid == {B.uid: 42, C.uid: 45}
    assert watch.woken == [A, B, C]
    updated = bed.cluster.jobs.get(42)
    assert updated is not None and updated.state == "RUNNING"


async def test_relist_gives_a_reused_id_to_its_new_pod(watch: Watch) -> None:
    bed = watch.bed
    bed.cluster.job_table.learn(job(41, A))
    bed.slurm.jobs = {41: raw_job(41, B)}
    await bed.watch.relist()
    assert bed.cluster.jobs.owner(41) == B and bed.cluster.jobs.by_uid == {B.uid: 41}
    assert watch.woken == [A, B], "the Pod that lost it, and the one that has it"


async def test_a_job_learned_while_the_relist_is_on_its_way_is_kept(watch: Watch) -> None:
    """Submitted (or read at its prolog's lock) after the listing was asked: the listing is
    older than what is known of it. Forgotten, its placeholder would be told it is no job of
    ours and let its node go under a running Pod."""
    bed = watch.bed
    bed.cluster.job_table.learn(job(41, A, state="RUNNING", nodes="slurm-1", started=True))
    bed.slurm.jobs = {41: raw_job(41, A, state="RUNNING", nodes="slurm-1", started=True)}

    def listing(request: httpx.Request) -> httpx.Response:
        answer = bed.slurm.fallback(request)  # as slurmctld had it when asked
        bed.cluster.job_table.learn(job(42, B, state="RUNNING", nodes="slurm-2", started=True))
        bed.cluster.job_table.learn(job(41, A, state="CANCELLED", nodes="slurm-1", started=True))
        return answer

    bed.slurm.routes[("GET", f"{SLURM}/jobs/")] = listing
    await bed.watch.relist()
    assert set(bed.cluster.jobs) == {41, 42} and bed.cluster.jobs.by_uid == {A.uid: 41,
                                                                              B.uid: 42}
    newer = bed.cluster.jobs.get(41)
    assert newer is not None and newer.state == "CANCELLED", "not taken back to the listing's"


async def test_a_failed_relist_changes_nothing(watch: Watch) -> None:
    bed = watch.bed
    bed.cluster.job_table.learn(job(41, A))
    bed.slurm.routes[("GET", f"{SLURM}/jobs/")] = down()
    await bed.watch.relist()
    assert set(bed.cluster.jobs) == {41} and watch.woken == []


# -- one poll --------------------------------------------------------------------------------

async def test_a_changed_state_is_recorded_and_wakes_its_pod(watch: Watch) -> None:
    bed = watch.bed
    bed.cluster.job_table.learn(job(41, A))
    bed.cluster.job_table.learn(job(42, B, state="RUNNING", nodes="slurm-1", started=True))
    aged(bed.cluster.jobs.get(41), 0.0).reason = "Priority"
    await bed.watch.follow({41: "RUNNING", 42: "RUNNING"}, asked={41, 42})
    changed = bed.cluster.jobs.get(41)
    assert changed is not None and changed.state == "RUNNING" and changed.reason == ""
    assert watch.woken == [A], "only the job that changed"
    assert bed.slurm.seen == [], "a state change alone needs no read"


async def test_a_job_slurm_no_longer_lists_is_forgotten(watch: Watch) -> None:
    bed = watch.bed
    bed.cluster.job_table.learn(job(41, A, state="COMPLETED", nodes="slurm-1"))
    bed.cluster.job_table.learn(job(42, B))  # submitted while the poll was in flight
    await bed.watch.follow({}, asked={41})
    assert set(bed.cluster.jobs) == {42}
    assert A.uid not in bed.cluster.jobs.by_uid
    assert watch.woken == [A]


async def test_a_pending_job_is_read_and_a_stuck_one_told_once(watch: Watch) -> None:
    bed = watch.bed
    bed.cluster.job_table.learn(aged(job(41, A)))
    bed.slurm.jobs[41] = raw_job(41, A, reason="JobHeldAdmin")
    await bed.watch.follow({41: "PENDING"}, asked={41})
    assert bed.slurm.paths() == [f"{SLURM}/job/41"]
    read = bed.cluster.jobs.get(41)
    assert read is not None and read.reason == "JobHeldAdmin"
    assert watch.woken == [A] and [j for j, _ in watch.stuck] == [41]
    assert "scontrol release" in watch.stuck[0][1]

    aged(bed.cluster.jobs.get(41))
    await bed.watch.follow({41: "PENDING"}, asked={41})
    assert len(bed.slurm.seen) == 2, "read again after pending_every"
    assert watch.woken == [A] and len(watch.stuck) == 1, "nothing new: nobody woken or told"


async def test_a_job_held_after_a_failed_launch_wakes_its_pod_and_is_not_stuck(
        watch: Watch) -> None:
    bed = watch.bed
    bed.cluster.job_table.learn(aged(job(41, A)))
    bed.slurm.jobs[41] = raw_job(41, A, reason="launch_failed_requeued_held")
    await bed.watch.follow({41: "PENDING"}, asked={41})
    assert watch.woken == [A], "its Pod gets a new job (podplan)"
    assert watch.stuck == [], "not waiting for a person"


async def test_a_running_job_not_started_is_read_and_its_pod_woken_when_it_is(
        watch: Watch) -> None:
    bed = watch.bed
    bed.cluster.job_table.learn(aged(job(41, A, state="RUNNING", nodes="slurm-1")))
    bed.slurm.jobs[41] = raw_job(41, A, state="RUNNING", nodes="slurm-1", started=True)
    await bed.watch.follow({41: "RUNNING"}, asked={41})
    read = bed.cluster.jobs.get(41)
    assert read is not None and read.started and watch.woken == [A]
    assert watch.stuck == []


async def test_a_read_that_finds_the_job_gone_forgets_it(watch: Watch) -> None:
    bed = watch.bed
    bed.cluster.job_table.learn(aged(job(41, A)))
    await bed.watch.follow({41: "PENDING"}, asked={41})  # purged between the two calls
    assert bed.slurm.paths() == [f"{SLURM}/job/41"]
    assert set(bed.cluster.jobs) == set() and watch.woken == [A]


def hook_arrives(bed: Bed, job_id: int, answered: int) -> None:
    """While the poll reads job ``answered``, the started hook learns job ``job_id`` started;
    slurmrestd answers the read as it was before the placeholder wrote ": started"."""
    def route(request: httpx.Request) -> httpx.Response:
        bed.cluster.job_table.learn(job(job_id, A, state="RUNNING", nodes="slurm-1", started=True))
        return httpx.Response(200, json={"jobs": [raw_job(answered, A if answered == job_id
                                                          else B, state="RUNNING",
                                                          nodes="slurm-1")]})
    bed.slurm.routes[("GET", f"{SLURM}/job/{answered}")] = route


async def test_a_read_older_than_the_started_hook_does_not_undo_it(watch: Watch) -> None:
    bed = watch.bed
    bed.cluster.job_table.learn(aged(job(40, B, state="RUNNING", nodes="slurm-1"), 200))
    bed.cluster.job_table.learn(aged(job(41, A, state="RUNNING", nodes="slurm-1")))
    hook_arrives(bed, 41, answered=40)  # during the read of the job before it
    bed.slurm.jobs[41] = raw_job(41, A, state="RUNNING", nodes="slurm-1")
    await bed.watch.follow({40: "RUNNING", 41: "RUNNING"}, asked={40, 41})
    assert bed.slurm.paths() == [f"{SLURM}/job/40", f"{SLURM}/job/41"]
    kept = bed.cluster.jobs.get(41)
    assert kept is not None and kept.started


async def test_a_read_in_flight_when_the_started_hook_lands_does_not_undo_it(
        watch: Watch) -> None:
    bed = watch.bed
    bed.cluster.job_table.learn(aged(job(41, A, state="RUNNING", nodes="slurm-1")))
    hook_arrives(bed, 41, answered=41)
    await bed.watch.follow({41: "RUNNING"}, asked={41})
    kept = bed.cluster.jobs.get(41)
    assert kept is not None and kept.started


async def test_read_learns_a_job_of_ours_and_not_a_strangers(watch: Watch) -> None:
    bed = watch.bed
    bed.slurm.jobs = {41: raw_job(41, A), 42: raw_job(42, B, stamped=False)}
    first, second = await bed.watch.read(41), await bed.watch.read(42)
    assert first is not None and second is not None and second.owner == B
    assert set(bed.cluster.jobs) == {41}
    assert await bed.watch.read(43) is None


# -- the loops -------------------------------------------------------------------------------

async def test_the_job_poll_follows_slurm_and_outlives_an_outage(watch: Watch) -> None:
    bed = watch.bed
    bed.cluster.job_table.learn(job(41, A))
    bed.slurm.routes[("GET", f"{SLURM}/jobs/state/")] = down()
    poll = asyncio.create_task(bed.watch.poll_jobs())
    try:
        await until(lambda: len(bed.slurm.seen) >= 2)
        assert not bed.cluster.state.slurm_healthy and "503" in bed.cluster.state.slurm_error
        assert "slurmctld down" in bed.cluster.health.slurm_problem()
        del bed.slurm.routes[("GET", f"{SLURM}/jobs/state/")]
        bed.slurm.jobs[41] = raw_job(41, A, state="RUNNING", nodes="slurm-1")
        await until(lambda: watch.woken == [A])
        assert bed.cluster.state.slurm_healthy
    finally:
        await stop(poll)
    found = bed.cluster.jobs.get(41)
    assert found is not None and found.state == "RUNNING"


async def test_the_node_poll_keeps_slurms_nodes(watch: Watch) -> None:
    bed = watch.bed
    bed.slurm.routes[("GET", f"{SLURM}/nodes/")] = lambda r: httpx.Response(200, json={
        "nodes": [{"name": "slurm-1", "state": ["IDLE"]}, {"name": "slurm-2",
                                                           "state": ["DOWN"]}]})
    poll = asyncio.create_task(bed.watch.poll_nodes(interval=60))
    try:
        await until(lambda: bed.cluster.slurm_node_names is not None)
    finally:
        await stop(poll)
    assert bed.cluster.slurm_node_names == frozenset({"slurm-1", "slurm-2"})
    assert bed.cluster.state.slurm_nodes["slurm-2"]["state"] == ["DOWN"]
    assert bed.cluster.state.slurm_healthy


async def test_the_node_poll_outlives_an_outage(watch: Watch) -> None:
    bed = watch.bed
    bed.slurm.routes[("GET", f"{SLURM}/nodes/")] = down()
    poll = asyncio.create_task(bed.watch.poll_nodes(interval=0.01))
    try:
        await until(lambda: len(bed.slurm.seen) >= 2)
    finally:
        await stop(poll)
    assert bed.cluster.slurm_node_names is None
    assert not bed.cluster.state.slurm_healthy
