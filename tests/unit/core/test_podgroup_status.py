"""A PodGroup's status as sunk keeps it: scheduler-plugins' controller's phases, from the
group's Pods alone; a group's writes land in order."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Mapping
from typing import Any, cast

import pytest

from sunk.apply.background import Background
from sunk.apply.ports import KubePort
from sunk.apply.waiting import WaitingWriter
from sunk.model.cluster import Cluster
from sunk.model.podmemory import PodMemory
from sunk.model.state import GangRecord
from sunk.plans import podgroup

NOW = datetime.datetime(2026, 11, 28, 12, 0, 0, tzinfo=datetime.UTC)
STAMP = "2026-11-28T12:00:00Z"


@pytest.mark.parametrize(("phases", "phase"), [
    ([], "Pending"),
    (["Pending"] * 3, "Pending"),                      # 3 of 4 exist
    (["Pending"] * 4, "Scheduling"),                   # all there, in Slurm's queue
    (["Running"] * 3 + ["Pending"], "Scheduling"),     # being bound
    (["Running"] * 4, "Running"),
    (["Running"] * 2 + ["Succeeded"] * 2, "Running"),
    (["Succeeded"] * 4, "Finished"),
    (["Running"] * 3 + ["Failed"], "Failed"),
    (["Pending"] * 3 + ["Failed"], "Scheduling"),      # a failure before minMember ran
    (["Running"] * 5, "Running"),                      # more Pods than minMember
])
def test_phase_follows_the_pods(phases: list[str], phase: str) -> None:
    got = podgroup.status({}, 4, phases, NOW)
    assert got is not None and got["phase"] == phase
    assert (got["running"], got["succeeded"], got["failed"]) == (
        phases.count("Running"), phases.count("Succeeded"), phases.count("Failed"))


def test_schedule_start_time_is_set_once_when_the_group_leaves_pending() -> None:
    assert "scheduleStartTime" not in (podgroup.status({}, 2, ["Pending"], NOW) or {})
    first = podgroup.status({"phase": "Pending"}, 2, ["Pending"] * 2, NOW)
    assert first == {"phase": "Scheduling", "running": 0, "succeeded": 0, "failed": 0,
                     "scheduleStartTime": STAMP}
    later = NOW + datetime.timedelta(minutes=5)
    running = podgroup.status(first, 2, ["Running"] * 2, later)
    assert running == {"phase": "Running", "running": 2, "succeeded": 0, "failed": 0}


def test_nothing_to_write_when_it_says_that_already() -> None:
    shown = {"phase": "Scheduling", "running": 0, "succeeded": 0, "failed": 0,
             "scheduleStartTime": STAMP}
    assert podgroup.status(shown, 2, ["Pending"] * 2, NOW) is None
    # the controller leaves zero counts out: absent reads as 0
    assert podgroup.status({"phase": "Pending"}, 2, ["Pending"], NOW) is None


@pytest.mark.parametrize("final", ["Finished", "Failed"])
def test_a_final_phase_is_kept_as_its_pods_go(final: str) -> None:
    assert podgroup.status({"phase": final}, 2, [], NOW) is None


class SlowFirstWrite:
    """The API server's status writes, the first held until released: a later write must not
    land before it."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.landed: list[str] = []

    async def patch_status(self, plural: str, version: str, obj: Any,
                           status: Mapping[str, Any], *, strategic: bool = False) -> None:
        if not self.landed and not self.release.is_set():
            await self.release.wait()
        self.landed.append(status["phase"])


async def test_a_groups_writes_land_in_the_order_they_were_made() -> None:
    port = SlowFirstWrite()
    background = Background()
    writer = WaitingWriter(cast(Cluster, None), cast(KubePort, port), PodMemory(), background)
    record = GangRecord("ns", "podgroup:pg", 2)
    group = {"metadata": {"name": "pg", "namespace": "ns", "uid": "u"}}
    writer.show_podgroup(group, record, {"phase": "Scheduling"})
    writer.show_podgroup(group, record, {"phase": "Running"})
    await asyncio.sleep(0.01)
    assert port.landed == []  # the second waits for the first
    port.release.set()
    while background.tasks:
        await asyncio.gather(*background.tasks)
    assert port.landed == ["Scheduling", "Running"]
    assert writer._podgroup_writes == {}
