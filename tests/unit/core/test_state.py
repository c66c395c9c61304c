"""The dashboard's Pod records stay small and say what they were told."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from sunk.model.state import HISTORY, PodRecord, SchedulerState
from sunk.plans.placement import NodeInfo, Snapshot
from sunk.plans.translate import TranslateSettings, job_description


def test_a_records_job_description_reads_back_as_submitted_and_is_kept_packed() -> None:
    rec = PodRecord("ns", "p", "uid-1", 0.0)
    assert rec.job_description is None
    job = {"name": "pod:ns/p", "environment": ["A=1"], "memory_per_node": {"set": True,
                                                                          "number": 1024}}
    rec.job_description = job
    assert rec.job_description == job and rec.job_description is not job
    assert isinstance(rec.job_description_packed, bytes)
    many = {**job, "environment": [f"SUNK_POD_NAME=p-{n}" for n in range(40)]}
    rec.job_description = many
    assert rec.job_description == many
    assert len(rec.job_description_packed) < len(json.dumps(many)) / 2
    rec.job_description = None
    assert rec.job_description is None


def test_a_records_history_keeps_the_newest_transitions() -> None:
    rec = PodRecord("ns", "p", "uid-1", 0.0)
    for i in range(HISTORY + 5):
        rec.note("step", str(i))
    assert len(rec.history) == HISTORY
    assert (rec.history[0].detail, rec.history[-1].detail) == ("5", str(HISTORY + 4))


def test_a_record_has_no_instance_dict() -> None:
    assert not hasattr(PodRecord("ns", "p", "uid-1", 0.0), "__dict__")


def test_a_typical_submitted_job_is_kept_in_under_200_bytes() -> None:
    """The preset dictionary matches what ``translate`` writes: 11,000 records must fit the
    scheduler's memory (its JSON alone is over 700 bytes; compressed without it, 370)."""
    pod = {"metadata": {"namespace": "bench", "name": "p-00042",
                        "uid": "5f0c2a9e-1b7d-4c1e-9a53-0d2f7e8b9c41"},
           "spec": {"containers": [{"name": "main", "resources": {
               "requests": {"cpu": "1", "memory": "100Mi"}}}]}}
    settings = TranslateSettings(scheduler_name="sunk-bench",
                                 placeholder_script="/opt/sunk/placeholder.sh")
    snap = Snapshot(slurm_to_k8s={"slurm-1": "k1"}, nodes={"k1": NodeInfo("k1")})
    job = job_description(pod, {}, snap, settings)
    rec = PodRecord("bench", "p-00042", "uid-1", 0.0)
    rec.job_description = job
    assert rec.job_description == job
    assert len(json.dumps(job)) > 700 and len(rec.job_description_packed) < 200


_NAMES = st.sampled_from(["a", "b", "c", "d"])


@given(st.lists(st.tuples(st.booleans(), _NAMES, _NAMES, st.sampled_from(["u1", "u2"]))))
def test_the_sorted_keys_and_namespaces_follow_every_record_and_forget(
        steps: list[tuple[bool, str, str, str]]) -> None:
    """The dashboard pages through these instead of sorting every Pod per page: they must be
    what sorting the records would give, after any sequence of Pods seen (again, or with a new
    uid) and forgotten (known or not)."""
    state = SchedulerState()
    for seen, namespace, name, uid in steps:
        if seen:
            state.record(namespace, name, uid, 0.0)
        else:
            state.forget(f"{namespace}/{name}")
        assert list(state.pod_keys()) == sorted(state.pods)
        assert state.namespaces() == sorted({rec.namespace for rec in state.pods.values()})
