"""Flags with the reference names, and the work queue's guarantees."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from sunk.loops.workqueue import WorkQueue
from sunk.settings import from_args, parse_bind, parse_duration, read_secret_file


def test_reference_flags_parse() -> None:
    s = from_args(["--scheduler-name=tenant-slurm", "--slurm-kill-wait=45s",
                   "--watch-namespace=a,b", "--watch-namespace=c",
                   "--slurm-api-base=slurm-controller:6820", "--components", "scheduler",
                   "--gpu-types=H100_NVLINK_80GB=h100"])
    assert s.scheduler_name == "tenant-slurm"
    assert s.slurm_kill_wait == 45
    assert s.namespaces() == ["a", "b", "c"]
    assert s.slurm_api_base == "http://slurm-controller:6820"
    assert s.components == ["scheduler"]
    assert s.gpu_types == {"H100_NVLINK_80GB": "h100"}
    assert from_args(["--scope=cluster"]).namespaces() is None
    assert from_args(["--zap-log-level=debug"]).log_level == "debug"


def test_a_rotated_token_file_is_read_again_within_a_second(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr("sunk.settings.time.monotonic", lambda: now[0])
    token = tmp_path / "token"
    token.write_text("first\n")
    s = from_args([f"--slurm-auth-token-file={token}", f"--hooks-token-file={token}"])
    assert s.slurm_token() == "first" and s.hook_tokens() == ["first"]
    token.write_text("second\n")
    now[0] += 0.5
    assert s.slurm_token() == "first"  # not read again on every call
    now[0] += 0.6
    assert s.slurm_token() == "second" and s.hook_tokens() == ["second"]
    assert read_secret_file(token) == "second"


def test_durations_and_bind_addresses() -> None:
    assert parse_duration("1.5m") == 90 and parse_duration("500ms") == 0.5
    assert parse_bind(":8000") == ("0.0.0.0", 8000)
    assert parse_bind("127.0.0.1:8082") == ("127.0.0.1", 8082)
    with pytest.raises(ValueError, match="duration"):
        parse_duration("soon")
    with pytest.raises(ValueError, match="bind address"):
        parse_bind("8000")


async def test_a_key_is_handled_by_one_worker_at_a_time_and_again_if_it_changed() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    q.add("a")  # queued once
    assert len(q) == 1
    key = await q.get()
    q.add("a")  # changed while being handled: handled again afterwards, not concurrently
    assert len(q) == 0
    q.done(key)
    assert len(q) == 1 and await q.get() == "a"


async def test_failures_back_off_exponentially_and_reset() -> None:
    q: WorkQueue[str] = WorkQueue(base_delay=0.01, max_delay=0.04)
    assert [q.failed("k") for _ in range(4)] == [0.01, 0.02, 0.04, 0.04]
    q.forget("k")
    assert q.failed("k") == 0.01
    q.add_after("k", 0.01)
    assert await asyncio.wait_for(q.get(), 1) == "k"


async def test_each_key_tells_how_long_it_waited_for_a_worker_from_when_it_was_first_queued(
        ) -> None:
    waited: list[float] = []
    q: WorkQueue[str] = WorkQueue(observe_wait=waited.append)
    q.add("a")
    await asyncio.sleep(0.05)
    q.add("a")  # already queued: its wait runs from the first add
    b_added = time.monotonic()
    q.add("b")
    assert await q.get() == "a" and await q.get() == "b"
    assert len(waited) == 2 and waited[0] >= 0.05
    assert waited[1] <= time.monotonic() - b_added
    q.add("a")  # while "a" is handled: queued again once done, timed from then
    done_at = time.monotonic()
    q.done("a")
    await asyncio.sleep(0.02)
    assert await q.get() == "a"
    assert len(waited) == 3 and 0.02 <= waited[2] <= time.monotonic() - done_at
