"""``kubectl sunk``'s output from plain Pods, Nodes and Events."""

from __future__ import annotations

from typing import Any

import pytest

from sunk import kubectl
from sunk.plans import waiting

Obj = dict[str, Any]
PREFIX = "sunk.coreweave.com/"


def pod(name: str, *, job: str = "", condition: waiting.Waiting | None = None,
        node: str = "", nominated: str = "", rejected: str = "", created: str = "") -> Obj:
    annotations = {PREFIX + "job-id": job} if job else {}
    if rejected:
        annotations[PREFIX + "rejected"] = rejected
    status: Obj = {"phase": "Pending"}
    if condition is not None:
        status["conditions"] = [waiting.condition(condition, 1_800_000_000.0)]
    if nominated:
        status["nominatedNodeName"] = nominated
    return {"metadata": {"namespace": "team-a", "name": name, "uid": f"uid-{name}",
                         "annotations": annotations,
                         "creationTimestamp": created or f"2026-11-28T10:00:0{len(name) % 10}Z"},
            "spec": {"nodeName": node} if node else {}, "status": status}


def test_jobs_lists_the_pods_sunk_handles_like_squeue() -> None:
    pending = waiting.in_slurm(41, "Priority", 1_800_003_600.0, ["kwok-node-001"])
    out = kubectl.jobs_table([
        pod("a", job="41", condition=pending, nominated="kwok-node-001"),
        pod("bb", job="40", node="kwok-node-000"),
        pod("ccc", rejected="InvalidAnnotation",
            condition=waiting.unschedulable("InvalidAnnotation: no")),
        pod("other", condition=waiting.unschedulable("0/3 nodes are available")),  # not ours
    ])
    lines = out.splitlines()
    assert lines[0].split() == ["NAMESPACE", "NAME", "JOB", "STATE", "REASON", "EXPECTED",
                                "START", "NODE"]
    assert lines[1].split() == ["team-a", "a", "41", "Pending", "Priority",
                                "2027-01-15T09:00:00Z", "(kwok-node-001)"]
    assert lines[2].split() == ["team-a", "bb", "40", "Bound", "kwok-node-000"]
    assert lines[3].split() == ["team-a", "ccc", "Rejected"]
    assert len(lines) == 4


def test_nodes_shows_the_lock_the_drain_and_the_cordon() -> None:
    nodes: list[Obj] = [{"metadata": {"name": "kwok-node-001", "annotations": {
                 PREFIX + "slurm-state": "drain", PREFIX + "slurm-reason": "bad GPU"}},
              "spec": {"unschedulable": True, "taints": [
                  {"key": "sunk.coreweave.com/lock", "value": "true", "effect": "NoSchedule"}]}},
             {"metadata": {"name": "kwok-node-000"}, "spec": {}}]
    lines = kubectl.nodes_table(nodes).splitlines()
    assert lines[1].split() == ["kwok-node-000", "-", "-"]
    assert lines[2].split() == ["kwok-node-001", "locked", "(NoSchedule)", "drain", "bad",
                                "GPU", "yes"]


def test_why_tells_the_job_the_condition_the_node_and_the_newest_events() -> None:
    pending = waiting.in_slurm(41, "Resources", None, [])
    events = [{"type": "Normal", "reason": f"R{i}", "message": f"m{i}",
               "lastTimestamp": f"2026-11-28T10:00:{i:02d}Z"} for i in range(12)]
    text = kubectl.why_text(pod("a", job="41", condition=pending, nominated="kwok-node-001"),
                            events, None, node_error="HTTP 403")
    assert "Job:        41" in text
    assert "Scheduled:  False (Pending, since 2027-01-15T08:00:00Z)" in text
    assert "Why:        Slurm job 41 is pending (Resources): the nodes it can use are busy." in text
    assert "Node:       kwok-node-001 (nominated: where Slurm plans it)" in text
    assert "Node lock:  not readable (HTTP 403)" in text
    assert "R11: m11" in text and "R1: m1\n" not in text  # the newest ten
    assert "Events:     none" in kubectl.why_text(pod("b"), [], None)


def test_the_arguments_are_kubectls(capsys: pytest.CaptureFixture[str]) -> None:
    args = kubectl.parser().parse_args(["jobs", "-A"])
    assert (args.command, args.all_namespaces) == ("jobs", True)
    args = kubectl.parser().parse_args(["why", "p", "-n", "team-a"])
    assert (args.command, args.pod, args.namespace) == ("why", "p", "team-a")
    with pytest.raises(SystemExit):
        kubectl.parser().parse_args(["launch"])
    assert "invalid choice" in capsys.readouterr().err
