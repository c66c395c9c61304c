"""Full collections walk only what arrived since the last one (sunk.runtime.heap)."""

from __future__ import annotations

import gc
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sunk.runtime.heap import YOUNG_COLLECTION_EVERY, FreezeSurvivors, collect_young_less_often


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


SCENARIO = """
import logging, sys
from sunk.runtime.heap import give_back_free_memory
logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
listing, kept = [], []
for _ in range(800):  # 50 MiB in pieces, what is kept in between: the heap keeps it
    listing.append(bytes(64 * 1024))
    kept.append(bytes(1024))
del listing
give_back_free_memory()
"""


def test_freed_memory_is_given_back_after_a_big_read() -> None:
    """In a fresh interpreter: the heap of a test run is too busy to measure."""
    ran = subprocess.run([sys.executable, "-c", SCENARIO], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[3])
    found = re.fullmatch(r"gave back (\d+) MiB of freed memory\n", ran.stdout)
    assert found is not None, ran.stdout + ran.stderr
    assert int(found[1]) >= 30


def test_young_collections_come_less_often_and_the_older_thresholds_stay() -> None:
    before = gc.get_threshold()
    try:
        collect_young_less_often()
        assert gc.get_threshold() == (YOUNG_COLLECTION_EVERY, before[1], before[2])
        assert before[0] < YOUNG_COLLECTION_EVERY
    finally:
        gc.set_threshold(*before)


def test_the_scheduler_does_not_load_httpxs_command_line_tool() -> None:
    """rich, click's formatting and pygments come with litestar's CLI; httpx would import its
    own CLI on them, 3.6 MiB the scheduler never uses (sunk/__main__.py). A fresh interpreter:
    this one has loaded everything."""
    ran = subprocess.run([sys.executable, "-c", "import sys, sunk.__main__, httpx; "
                          "print(sorted(m for m in ('rich', 'pygments', 'httpx._main') "
                          "if sys.modules.get(m) is not None), httpx.AsyncClient.__name__)"],
                         capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[3])
    assert ran.stdout == "[] AsyncClient\n", ran.stdout + ran.stderr
