"""On-demand profiles of the running scheduler (sunk.runtime.profiling)."""

from __future__ import annotations

import pstats
import tracemalloc
from pathlib import Path

from sunk.runtime.profiling import OnDemandProfiler


def test_a_profile_is_written_on_stop(tmp_path: Path) -> None:
    profiler = OnDemandProfiler(str(tmp_path / "p.prof"))
    profiler.start()
    sum(range(1000))
    profiler.stop()
    assert pstats.Stats(str(tmp_path / "p.prof")).get_stats_profile().func_profiles
    assert not (tmp_path / "p.prof.memory").exists(), "no memory snapshot unless traced"


def test_with_tracemalloc_a_memory_snapshot_is_written_too(tmp_path: Path) -> None:
    profiler = OnDemandProfiler(str(tmp_path / "p.prof"))
    tracemalloc.start(5)
    try:
        kept = [str(n) * 10 for n in range(10_000)]
        profiler.stop()
    finally:
        tracemalloc.stop()
    snapshot = tracemalloc.Snapshot.load(str(tmp_path / "p.prof.memory"))
    here = snapshot.filter_traces([tracemalloc.Filter(True, __file__)])
    assert sum(s.size for s in here.statistics("filename")) > 100_000
    assert len(kept) == 10_000
