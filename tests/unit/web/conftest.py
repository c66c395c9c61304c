"""A small cluster built from plain data: every state the pages show, and hostile strings."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from web import create_app

from .sample import StaticScheduler

SCRIPT = "<script>alert('x')</script>"
#: A gang's name as hostile as one can be: a gang's name never holds a "/" (it comes from a
#: label value or an object's name), so the pages' two-segment links always reach it.
GANG_SCRIPT = "label:<script>alert('x')"


def cluster(now: float) -> StaticScheduler:
    """A small cluster whose Pods were created shortly before ``now``."""
    s = StaticScheduler()
    s.state.slurm_healthy = True
    s.add_node("h100-000", "kwok-node-000", state=("MIXED",), lock="locked", taint=True,
               alloc_cpus=4, alloc_memory_mib=1024, gpus_used=2)
    s.add_node("a100-001", "kwok-node-001", state=("IDLE", "DRAIN"),
               reason="k8s: cordoned by kubectl", cordoned=True, gres_type="a100")
    s.add_node("h100-002", "kwok-node-002", state=("IDLE", "DRAIN"), reason=f"bad GPU {SCRIPT}")
    s.add_node("a100-003", "kwok-node-003", lock=None, gres_type="a100")
    # the account and QOS of a job: as submitted (Slurm's record not read yet), as Slurm's
    # record says, and neither (bound-1, done-1)
    waiting = s.add_pod("team-a", "waiting-1", created=now - 30, job_id=11,
                        job_state="PENDING", pending_reason="Resources",
                        last_event="JobSubmitted: Slurm job 11 submitted", account="team-a",
                        read=False)
    waiting.waiting = ("Slurm job 11 is pending (Resources): the nodes it can use are busy; "
                       "Slurm expects it to start at 2026-01-01T00:10:00Z on kwok-node-000.")
    waiting.expected_start = now + 600
    s.add_pod("team-a", "running-1", created=now - 600, phase="Running", job_id=12,
              job_state="RUNNING", slurm_node="h100-000", k8s_node="kwok-node-000",
              bound_after=1.25, last_event="Scheduled: Successfully assigned",
              account="research", qos="high")
    s.add_pod("team-b", "bound-1", created=now - 5, job_id=13, job_state="RUNNING",
              slurm_node="h100-000", k8s_node="kwok-node-000", bound_after=0.5)
    s.add_pod("team-b", "evil", created=now - 60,
              rejected=f'InvalidAnnotation: got "{SCRIPT}"',
              last_event=f'InvalidAnnotation: annotation exclusive must be one of none, ok, '
                         f'got "{SCRIPT}"',
              annotations={"sunk.coreweave.com/exclusive": SCRIPT})
    s.add_pod("team-b", "done-1", created=now - 9000, phase="Succeeded", job_id=9,
              job_state="COMPLETED", slurm_node="a100-003", k8s_node="kwok-node-003",
              bound_after=3)
    for rec in s.state.pods.values():
        s.events[rec.uid] = [{
            "type": "Warning", "reason": "InvalidAnnotation", "message": f"got {SCRIPT}",
            "count": 2, "source": {"component": "sunk-sample"}}]
    return s


def add_gangs(s: StaticScheduler, now: float) -> StaticScheduler:
    """Three gangs on top of :func:`cluster` (its Pods stay as they are): one running, with its
    members given out of rank order; one whose job waits for nodes; one with a hostile name
    that can never run. And a Pod whose gang is gone (``gang_of`` still names it)."""
    s.add_gang("team-a", "job:train", 3, created=now - 300, job_id=20, job_state="RUNNING",
               account="training", qos="gang", members=[("train-2", 2, "a100-003", "kwok-node-003"),
                        ("train-0", 0, "h100-000", "kwok-node-000"),
                        ("train-1", 1, "a100-001", "kwok-node-001")])
    s.add_gang("team-a", "podgroup:pg1", 2, created=now - 20, job_id=21, job_state="PENDING",
               waiting="job 21 pending (Resources): waiting for 2 nodes",
               members=[("pg1-1", 1, "", ""), ("pg1-0", 0, "", "")])
    s.add_gang("team-b", GANG_SCRIPT, None, created=now - 10,
               problem=f"members disagree on the gang's size: {SCRIPT}",
               waiting=f"members disagree on the gang's size: {SCRIPT}",
               members=[("hostile-0", 0, "", "")])
    s.state.gang_of["team-a/waiting-1"] = "team-a/job:gone"
    return s


@pytest.fixture
def now() -> float:
    """When the test runs: ages on the pages are counted from the clock, so the sample cluster
    is built relative to it (not to when the module was imported)."""
    return time.time()


@pytest.fixture
def scheduler(now: float) -> StaticScheduler:
    return cluster(now)


@pytest.fixture
def gangs(scheduler: StaticScheduler, now: float) -> StaticScheduler:
    """The sample cluster with gangs (:func:`add_gangs`): the ``client`` fixture serves it."""
    return add_gangs(scheduler, now)


MakeClient = Callable[..., AsyncTestClient[Litestar]]


@pytest.fixture
def make_client(scheduler: StaticScheduler) -> MakeClient:
    """A client of the dashboard with ``create_app``'s options; ``async with`` it."""

    def make(*, auth_token: str | None = None,
             basic_auth: tuple[str, str] | None = None) -> AsyncTestClient[Litestar]:
        return AsyncTestClient(create_app(scheduler, auth_token=auth_token,
                                          basic_auth=basic_auth))

    return make


@pytest.fixture
async def client(make_client: MakeClient) -> AsyncIterator[AsyncTestClient[Litestar]]:
    async with make_client() as c:
        yield c
