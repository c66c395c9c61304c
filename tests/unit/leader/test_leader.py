"""Leader election: the pure decisions, then electors racing over an in-memory Lease."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import itertools
import time

import pytest

from sunk.loops.leader import (
    LeaderElector,
    LeaseConflict,
    LeaseError,
    LeaseRecord,
    Observer,
    Timing,
    Verdict,
    claim,
    micro_time,
    released,
    renewal_overdue,
    verdict,
)

T0 = datetime.datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=datetime.UTC)


def held(by: str, *, duration: int = 15, transitions: int = 0) -> LeaseRecord:
    stamp = micro_time(T0)
    return LeaseRecord(holder=by, lease_duration=duration, acquire_time=stamp, renew_time=stamp,
                       transitions=transitions)


# -- pure decisions ------------------------------------------------------------------------------


def test_no_lease_is_created() -> None:
    assert verdict(None, me="a", observed_at=0, now=0) is Verdict.CREATE


def test_our_own_lease_is_renewed_even_if_it_looks_expired() -> None:
    assert verdict(held("a"), me="a", observed_at=0, now=1000) is Verdict.RENEW


def test_a_released_lease_is_taken_at_once() -> None:
    assert verdict(held(""), me="a", observed_at=10, now=10) is Verdict.TAKE


def test_another_holders_lease_is_respected_until_it_stays_unchanged_for_its_duration() -> None:
    record = held("b", duration=15)
    assert verdict(record, me="a", observed_at=100, now=100) is Verdict.WAIT
    assert verdict(record, me="a", observed_at=100, now=114.9) is Verdict.WAIT
    assert verdict(record, me="a", observed_at=100, now=115) is Verdict.TAKE


def test_expiry_is_judged_by_the_candidates_clock_not_the_holders_timestamps() -> None:
    """The record's renewTime may be from a machine whose clock is hours off: it is not read."""
    ancient = LeaseRecord(holder="b", lease_duration=15, renew_time="1999-01-01T00:00:00.000000Z")
    assert verdict(ancient, me="a", observed_at=50, now=51) is Verdict.WAIT


def test_the_observer_restarts_the_clock_only_when_the_record_changes() -> None:
    seen = Observer()
    seen.observe(held("b"), 10)
    assert seen.at == 10
    seen.observe(held("b"), 20)
    assert seen.at == 10
    renewed = dataclasses.replace(
        held("b"), renew_time=micro_time(T0 + datetime.timedelta(seconds=2)))
    seen.observe(renewed, 30)
    assert seen.at == 30
    fresh = Observer()
    fresh.observe(None, 5)
    assert fresh.at == 5 and fresh.record is None


def test_claiming_a_new_lease_starts_its_transitions_at_zero() -> None:
    record = claim(None, me="a", lease_duration=15, now=T0)
    assert record == LeaseRecord(holder="a", lease_duration=15,
                                 acquire_time="2025-01-02T03:04:05.678901Z",
                                 renew_time="2025-01-02T03:04:05.678901Z", transitions=0)


def test_renewing_keeps_the_acquire_time_and_the_transitions() -> None:
    later = T0 + datetime.timedelta(seconds=2)
    record = claim(held("a", transitions=3), me="a", lease_duration=15, now=later)
    assert record.acquire_time == micro_time(T0)
    assert record.renew_time == micro_time(later)
    assert record.transitions == 3


def test_taking_over_counts_a_transition() -> None:
    record = claim(held("b", transitions=3), me="a", lease_duration=10, now=T0)
    assert (record.holder, record.transitions, record.lease_duration) == ("a", 4, 10)


def test_releasing_empties_the_holder_and_keeps_the_transitions() -> None:
    record = released(held("a", transitions=2), now=T0)
    assert (record.holder, record.lease_duration, record.transitions) == ("", 1, 2)


def test_the_record_round_trips_through_the_lease_spec() -> None:
    spec = {"holderIdentity": "a", "leaseDurationSeconds": 15, "acquireTime": "x",
            "renewTime": "y", "leaseTransitions": 4}
    assert LeaseRecord.from_spec(spec).to_spec() == spec
    assert LeaseRecord.from_spec(None) == LeaseRecord()


def test_a_leader_stops_at_the_renew_deadline() -> None:
    timing = Timing(15, 10, 2)
    assert not renewal_overdue(100, 109.9, timing)
    assert renewal_overdue(100, 110, timing)


@pytest.mark.parametrize(("lease", "renew", "retry", "problem"), [
    (15.5, 10, 2, "whole seconds"),
    (0, 0.5, 0.1, "whole seconds"),
    (10, 10, 2, "longer than the renew deadline"),
    (15, 2, 2, "renew deadline must be longer"),
    (15, 10, 0, "positive"),
])
def test_inconsistent_timings_are_refused(lease: float, renew: float, retry: float,
                                          problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        Timing(lease, renew, retry)


def test_defaults_are_client_gos() -> None:
    assert Timing() == Timing(15, 10, 2)


# -- electors over an in-memory Lease -------------------------------------------------------------


class FakeLeases:
    """One Lease with the API server's compare-and-swap semantics, and a switch to fail."""

    def __init__(self) -> None:
        self.record: LeaseRecord | None = None
        self.version = 0
        self.down = False
        self.writes: list[LeaseRecord] = []
        self.written_at: list[float] = []

    async def _io(self) -> None:
        await asyncio.sleep(0)  # let racing candidates interleave between read and write
        if self.down:
            raise LeaseError("connection refused")

    async def get(self) -> tuple[LeaseRecord, str] | None:
        await self._io()
        return None if self.record is None else (self.record, str(self.version))

    async def create(self, record: LeaseRecord) -> tuple[LeaseRecord, str]:
        await self._io()
        if self.record is not None:
            raise LeaseConflict("already exists")
        return self._write(record)

    async def update(self, record: LeaseRecord, resource_version: str) -> tuple[LeaseRecord, str]:
        await self._io()
        if self.record is None or resource_version != str(self.version):
            raise LeaseConflict("the object has been modified")
        return self._write(record)

    def _write(self, record: LeaseRecord) -> tuple[LeaseRecord, str]:
        self.record = record
        self.version += 1
        self.writes.append(record)
        self.written_at.append(time.monotonic())
        return record, str(self.version)


FAST = Timing(lease_duration=1, renew_deadline=0.5, retry_period=0.1)


def elector(leases: FakeLeases, name: str, timing: Timing = FAST) -> LeaderElector:
    return LeaderElector(leases, identity=name, timing=timing, jitter=lambda: 0.0)


async def test_the_first_candidate_creates_the_lease_and_leads() -> None:
    leases = FakeLeases()
    a = elector(leases, "a")
    await asyncio.wait_for(a.acquire(), 1)
    assert a.leading and leases.record is not None and leases.record.holder == "a"
    assert leases.record.lease_duration == 1


async def test_racing_candidates_elect_exactly_one() -> None:
    leases = FakeLeases()
    candidates = [elector(leases, f"c{i}") for i in range(6)]
    tasks = [asyncio.create_task(c.acquire()) for c in candidates]
    done, pending = await asyncio.wait(tasks, timeout=0.5)
    assert len(done) == 1
    assert [c.identity for c in candidates if c.leading] == [leases.record.holder if leases.record
                                                            else None]
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    assert len({w.holder for w in leases.writes}) == 1


async def test_a_dead_leaders_lease_is_taken_only_after_it_expires() -> None:
    leases = FakeLeases()
    a, b = elector(leases, "a"), elector(leases, "b")
    await a.acquire()
    holding = asyncio.create_task(a.hold())
    waiting = asyncio.create_task(b.acquire())
    await asyncio.sleep(1.5)  # a renews every 0.1 s: b must keep waiting
    assert not waiting.done() and b.holder == "a"
    holding.cancel()  # a dies (kill -9): no release
    died = time.monotonic()
    await asyncio.wait_for(waiting, 3)
    took = time.monotonic() - died
    assert b.leading and leases.record is not None and leases.record.holder == "b"
    assert FAST.lease_duration - 0.2 <= took <= FAST.lease_duration + 1.0  # slack: busy CI
    assert leases.record.transitions == 1


async def test_a_released_lease_is_taken_at_the_next_retry() -> None:
    leases = FakeLeases()
    slow = Timing(lease_duration=30, renew_deadline=10, retry_period=0.1)
    a, b = elector(leases, "a", slow), elector(leases, "b", slow)
    await a.acquire()
    waiting = asyncio.create_task(b.acquire())
    await asyncio.sleep(0.3)
    await a.release()
    released_at = time.monotonic()
    await asyncio.wait_for(waiting, 2)
    assert time.monotonic() - released_at < 1.0  # a retry period is 0.1 s; the lease 30 s
    assert not a.leading and b.leading


async def test_a_leader_that_cannot_renew_stops_before_anyone_may_take_over() -> None:
    leases = FakeLeases()
    a, b = elector(leases, "a"), elector(leases, "b")
    await a.acquire()
    waiting = asyncio.create_task(b.acquire())
    holding = asyncio.create_task(a.hold())
    await asyncio.sleep(0.3)
    leases.down = True
    last_renewal = leases.written_at[-1]
    await asyncio.wait_for(holding, 2)
    lost_at = time.monotonic()
    assert not a.leading and "renew deadline" in a.lost_reason
    assert lost_at - last_renewal <= FAST.renew_deadline + 0.5
    leases.down = False
    await asyncio.wait_for(waiting, 3)
    assert b.leading
    # b took over only once the record had stayed unchanged for the whole lease duration,
    # and so only after a had stopped acting.
    assert leases.written_at[-1] - last_renewal >= FAST.lease_duration
    assert leases.written_at[-1] > lost_at


async def test_a_leader_whose_lease_was_taken_stops_at_its_next_renewal() -> None:
    leases = FakeLeases()
    a = elector(leases, "a")
    await a.acquire()
    holding = asyncio.create_task(a.hold())
    leases._write(held("usurper", duration=1))
    await asyncio.wait_for(holding, 1)
    assert not a.leading and "usurper holds it now" in a.lost_reason


async def test_never_two_leaders_through_deaths_releases_and_outages() -> None:
    """Candidates come and go; at no sampled instant do two of them act as leader."""
    leases = FakeLeases()
    names = (f"r{i}" for i in itertools.count())
    running: dict[LeaderElector, asyncio.Task[None]] = {}

    async def life(e: LeaderElector) -> None:
        await e.acquire()
        await e.hold()

    def start() -> None:
        e = elector(leases, next(names))
        running[e] = asyncio.create_task(life(e))

    for _ in range(3):
        start()
    overlaps = 0
    for step in range(40):
        await asyncio.sleep(0.05)
        acting = [e for e in running if e.leading and not renewal_overdue(
            e._renewed_at, time.monotonic(), FAST)]
        overlaps += len(acting) > 1
        if step % 10 == 3 and acting:  # kill the leader, sometimes gracefully
            victim = acting[0]
            running.pop(victim).cancel()
            if step % 20 == 3:
                await victim.release()
            else:
                victim.leading = False
            start()
        if step == 25:
            leases.down = True
        if step == 30:
            leases.down = False
    for task in running.values():
        task.cancel()
    await asyncio.gather(*running.values(), return_exceptions=True)
    assert overlaps == 0
    holders = [w.holder for w in leases.writes if w.holder]
    assert len(set(holders)) >= 2  # leadership did move


async def test_a_standby_is_ready_while_it_can_read_the_lease() -> None:
    leases = FakeLeases()
    a, b = elector(leases, "a"), elector(leases, "b")
    assert b.standby_status() == (False, "standby: the Lease has not been read yet")
    await a.acquire()
    waiting = asyncio.create_task(b.acquire())
    await asyncio.sleep(0.05)
    assert b.standby_status() == (True, "standby: a leads")
    leases.down = True
    await asyncio.sleep(FAST.lease_duration + 0.2)
    ok, why = b.standby_status()
    assert not ok and "cannot read" in why
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
