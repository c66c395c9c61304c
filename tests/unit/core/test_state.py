"""The dashboard's Pod records stay small and say what they were told."""

from __future__ import annotations

import json

from sunk.state import HISTORY, PodRecord


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
