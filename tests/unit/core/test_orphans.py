"""Which of our jobs are orphans: a Pod's once the Pod is gone, a gang's once none of its Pods
is left or its gang has a newer job (sunk.loops.orphans)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

from sunk.loops.orphans import collect, why_orphaned
from sunk.slurm.client import SlurmError
from sunk.slurm.job import PodIdentity, member_id
from tests.unit.core.stand_ins import NAME, job, who

A, B = "aaaaaaaa-0000-0001", "bbbbbbbb-0000-0002"
GANG = PodIdentity("ns", "job:train", "9a9a-0001", NAME, members=(member_id(A), member_id(B)))


def test_a_pods_job_is_an_orphan_once_its_pod_is_gone() -> None:
    live = {"aaaa-0001"}
    members = {member_id("aaaa-0001")}
    assert why_orphaned(41, job(41), newest={}, live=live, members=members) is None
    gone = job(42, who("cccc-0003", name="gone"))
    assert why_orphaned(42, gone, newest={}, live=live, members=members) == (
        "orphaned: its Pod no longer exists")
    ended = job(43, who("cccc-0003", name="gone"), state="COMPLETED", nodes="slurm-1")
    assert why_orphaned(43, ended, newest={}, live=live, members=members) is None


def test_a_gangs_job_stays_while_it_is_the_newest_and_a_member_lives() -> None:
    one_left = {member_id(B)}
    newest = {GANG.uid: 51}
    assert job(51, GANG).owner == GANG
    assert why_orphaned(51, job(51, GANG), newest=newest, live=set(), members=one_left) is None
    assert why_orphaned(50, job(50, GANG), newest=newest, live=set(), members=one_left) == (
        "its gang has a newer job")
    assert why_orphaned(51, job(51, GANG), newest=newest, live=set(), members=set()) == (
        "orphaned: none of its gang's Pods exists")


async def test_a_wake_looks_for_orphans_at_once_not_at_the_next_round() -> None:
    """Slurm answering again after an outage wakes the sweep: an orphan whose cancel failed
    meanwhile is cancelled then, not up to a whole interval later."""
    jobs = SimpleNamespace(jobs={42: job(42, who("cccc-0003", name="gone"))}, by_uid={})
    cluster = SimpleNamespace(jobs=jobs, pods=lambda: [])

    tried: list[float] = []

    class Executor:
        async def cancel(self, job_id: int, key: str, why: str) -> bool:
            tried.append(asyncio.get_running_loop().time())
            if len(tried) == 1:
                raise SlurmError("slurmctld is down")
            jobs.jobs = {}
            return True

    wake = asyncio.Event()
    sweep = asyncio.create_task(collect(cast(Any, cluster), cast(Any, Executor()),
                                        interval=3600, wake=wake))
    try:
        await asyncio.sleep(0.05)
        assert len(tried) == 1, "the first round tried and failed"
        wake.set()
        await asyncio.sleep(0.05)
        assert len(tried) == 2, "woken: tried again at once"
    finally:
        sweep.cancel()
        await asyncio.gather(sweep, return_exceptions=True)
