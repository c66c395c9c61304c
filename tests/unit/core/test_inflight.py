"""The hook API's bound counts calls at work, not calls waiting (pure bookkeeping)."""

from __future__ import annotations

import asyncio

import pytest

from sunk.hooks.inflight import InFlight, waiting


def test_a_call_counts_while_at_work_and_not_while_it_waits() -> None:
    bound = InFlight(2)
    with bound.working_on():
        assert bound.working == 1 and not bound.full
        with waiting():
            assert bound.working == 0
        assert bound.working == 1
        with bound.working_on():
            assert bound.full
    assert bound.working == 0


def test_waiting_outside_a_hook_call_changes_nothing() -> None:
    bound = InFlight(1)
    with waiting():
        assert bound.working == 0


def test_an_error_while_waiting_or_at_work_leaves_the_count_whole() -> None:
    bound = InFlight(1)
    with pytest.raises(TimeoutError), bound.working_on(), waiting():
        raise TimeoutError
    assert bound.working == 0


async def test_each_task_counts_against_its_own_call() -> None:
    """Calls served side by side (tasks): one waiting leaves the other counted."""
    bound = InFlight(2)
    release = asyncio.Event()
    seen: list[int] = []

    async def long_poll() -> None:
        with bound.working_on(), waiting():
            await release.wait()

    async def at_work() -> None:
        with bound.working_on():
            await asyncio.sleep(0)
            seen.append(bound.working)

    poll = asyncio.create_task(long_poll())
    await asyncio.sleep(0)
    await at_work()
    release.set()
    await poll
    assert seen == [1] and bound.working == 0
