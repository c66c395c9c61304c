"""Full collections walk only what arrived since the last one (sunk.heap)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from sunk.heap import FreezeSurvivors


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_survivors_of_a_full_collection_are_frozen() -> None:
    heap = FreezeSurvivors(refresh=600, clock=Clock())
    heap.check()
    assert gc.get_freeze_count() == 0, "no full collection yet: nothing frozen"
    kept = [[n] for n in range(1000)]
    gc.collect()
    heap.check()
    assert gc.get_freeze_count() >= len(kept)
    frozen = gc.get_freeze_count()
    heap.check()
    assert gc.get_freeze_count() == frozen, "no new collection: nothing more to freeze"


def test_everything_is_unfrozen_once_per_refresh_and_cycles_are_collected() -> None:
    clock = Clock()
    heap = FreezeSurvivors(refresh=600, clock=clock)
    cycle: list[object] = []
    cycle.append(cycle)
    gc.collect()
    heap.check()
    assert gc.get_freeze_count() > 0
    del cycle  # garbage now, but frozen: not reclaimed yet
    clock.now = 601
    gc.collect()
    heap.check()
    assert gc.get_freeze_count() == 0
    assert gc.collect() >= 1, "the cycle is collected once unfrozen"
