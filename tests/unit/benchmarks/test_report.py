"""The scheduling benchmark's accounting: CPU per part, and what its report concludes."""

from __future__ import annotations

import pytest

from benchmarks import cpu, results
from benchmarks.scheduling import Phase, render_saturate, saturate_figures


def test_cpu_per_part_counts_only_processes_alive_at_both_samples() -> None:
    before = cpu.Sample(busy=100.0, by_group={}, by_pid={"1": ("etcd", 5.0),
                                                         "2": ("slurmd", 1.0)})
    after = cpu.Sample(busy=110.0, by_group={}, by_pid={"1": ("etcd", 7.0),
                                                        "2": ("slurmd", 2.5),
                                                        "3": ("kwok", 50.0)})
    used = cpu.used(before, after)
    assert used["etcd"] == pytest.approx(2.0)
    assert used["slurmd"] == pytest.approx(1.5)
    assert "kwok" not in used  # started between the samples: its total is not this phase's
    assert used["job processes and other"] == pytest.approx(6.5)
    assert used["machine total"] == pytest.approx(10.0)


def test_versioned_binaries_are_grouped_by_name() -> None:
    assert cpu._group("1", "kube-apiserver-") == "kube-apiserver"
    assert cpu._group("1", "etcd-v3.6.16") == "etcd"
    assert cpu._group("1", "slurmctld") == "slurmctld"
    assert cpu._group("1", "bash") is None


def test_the_figures_give_the_ratio_the_ceiling_and_the_share_of_it() -> None:
    raw = Phase("raw", 100, 10.0, [1.0] * 100,
                cpu={"machine total": 10.0, "sunk-scheduler": 0.5})
    ours = Phase("sunk", 100, 20.0, [3.0] * 100,
                 cpu={"machine total": 20.0, "sunk-scheduler": 4.5, "kube-apiserver": 4.0})
    figures = saturate_figures(raw, ours, {"slurmrestd POST /job/submit": 1.0})
    assert figures["ratio"] == 0.5  # 5 Pods/s against 10 jobs/s
    # without the scheduler's 40 ms extra per Pod: 100 ms per job against 160 ms per Pod
    assert figures["ceiling"] == 0.625
    assert figures["ratio_to_ceiling"] == 0.8
    assert figures["scheduler_cpu_ms_per_pod"] == 45.0
    rec = results.record("saturate", figures=figures, argv=["--scenario", "saturate"],
                         module="benchmarks.scheduling")
    text = render_saturate(rec)
    assert "**ratio to that ceiling: 0.800**" in text
    assert "| slurmrestd POST /job/submit | 1.00 |" in text
