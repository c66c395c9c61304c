"""A job's record, and whose Pod it is: the ``extra`` codec and :class:`Job` (pure)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from typing import Any

import pytest

from sunk.slurm import job as job_module
from sunk.slurm.job import (
    STARTED,
    Job,
    PodIdentity,
    admin_comment,
    job_extra,
    job_name,
    parse_extra,
)

WHO = PodIdentity("ns", "p-0", "1234-abcd", "sunk")


def test_extra_round_trips_and_says_when_the_script_started() -> None:
    extra = job_extra(WHO)
    assert extra == "sunk-pod=ns/p-0 uid=1234-abcd scheduler=sunk"
    assert parse_extra(extra) == (WHO, False)
    assert parse_extra(extra + STARTED) == (WHO, True)
    assert parse_extra(extra + STARTED + "\n") == (WHO, True)
    assert WHO.key == "ns/p-0"


@pytest.mark.parametrize("extra", [
    None, "", "something else", "sunk-pod=ns/p uid=xyz scheduler=s",  # uid not hex
    " sunk-pod=ns/p uid=1 scheduler=s",  # not at the start
    "sunk-pod=ns/p uid=1",  # no scheduler
])
def test_foreign_extra_is_not_ours(extra: str | None) -> None:
    assert parse_extra(extra) == (None, False)


def test_admin_comment_and_name_name_the_pod() -> None:
    assert admin_comment(WHO) == "sunk-pod-uid=1234-abcd scheduler=sunk"
    assert admin_comment(WHO) != admin_comment(dataclasses.replace(WHO, scheduler="other"))
    assert job_name(WHO) == "pod:ns/p-0"


def record(**fields: Any) -> dict[str, Any]:
    return {"job_id": 7, "name": "pod:ns/p-0", "job_state": ["RUNNING"],
            "extra": job_extra(WHO) + STARTED, "nodes": "h100-000", "state_reason": "None",
            "admin_comment": admin_comment(WHO), **fields}


def test_from_api_reads_the_fields_and_parses_extra_once() -> None:
    raw = record(qos="high", script="#!/bin/sh\n" + "x" * 10_000,
                 environment=["A=1"] * 100)
    job = Job.from_api(raw)
    assert (job.job_id, job.name, job.state, job.nodes, job.reason) == (
        7, "pod:ns/p-0", "RUNNING", "h100-000", "None")
    assert job.admin_comment == admin_comment(WHO)
    # what the dashboard shows is kept, not the whole 18 kB record
    assert job.raw["qos"] == "high" and job.raw["nodes"] == "h100-000"
    assert "script" not in job.raw and "environment" not in job.raw
    assert job.owner == WHO and job.started
    assert not job.finished


def test_owner_and_started_are_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str | None] = []
    real = job_module.parse_extra

    def counting(extra: str | None) -> tuple[PodIdentity | None, bool]:
        calls.append(extra)
        return real(extra)

    monkeypatch.setattr(job_module, "parse_extra", counting)
    job = Job.from_api(record())
    for _ in range(3):
        assert job.owner == WHO and job.started
    assert calls == [job.extra]


def test_a_job_whose_extra_is_someone_elses_text_has_no_owner() -> None:
    job = Job(job_id=3, name="train", state="PENDING", extra="my own notes: started",
              nodes="", reason="Priority")
    assert job.owner is None and not job.started
    assert Job.from_api(record(extra=None)).owner is None
    assert Job.from_api(record(extra=12)).owner is None  # not text: not ours, and no crash


def test_a_job_not_yet_started_and_missing_fields() -> None:
    job = Job.from_api({"job_id": "12", "extra": job_extra(WHO)})
    assert (job.job_id, job.state, job.name, job.nodes, job.reason, job.admin_comment) == (
        12, "UNKNOWN", "", "", "", "")
    assert job.owner == WHO and not job.started


def test_state_reason_and_checked_at_follow_the_job_but_extra_is_set_once() -> None:
    job = Job.from_api(record(job_state=["PENDING"]))
    job.state, job.reason, job.checked_at = "COMPLETED", "", 1.0
    job.admin_comment = ""
    assert job.finished
    for name in ("extra", "owner", "started"):
        with pytest.raises(AttributeError, match="set once"):
            setattr(job, name, getattr(job, name))
    later = dataclasses.replace(job, extra=job_extra(WHO))
    assert later.owner == WHO and not later.started and later.state == "COMPLETED"


def test_owner_and_started_do_not_count_in_equality() -> None:
    """They follow from ``extra``, which does count."""
    a = Job(job_id=1, name="", state="RUNNING", extra=job_extra(WHO), nodes="", reason="",
            checked_at=0)
    assert a == Job(job_id=1, name="", state="RUNNING", extra=job_extra(WHO), nodes="",
                    reason="", checked_at=0)
    assert a != dataclasses.replace(a, extra=job_extra(WHO) + STARTED)


@pytest.mark.parametrize("state", ["COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL"])
def test_finished_states(state: str) -> None:
    assert Job(job_id=1, name="", state=state, extra="", nodes="", reason="").finished


def test_pure_modules_load_no_http_client() -> None:
    """sunk.slurm.job and sunk.slurm.text must not pull in the client's HTTP stack."""
    code = ("import sys, sunk.slurm.job, sunk.slurm.text, sunk.plans.translate; "
            "bad = [m for m in ('httpx', 'aiohttp', 'yarl', 'sunk.slurm.client') "
            "if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_a_job_slurm_held_after_its_launch_failed_is_told_from_a_persons_hold() -> None:
    from sunk.plans.decide import FAILED_LAUNCH_HOLDS
    from sunk.slurm.job import LAUNCH_FAILED_HELD

    # as slurmrestd 24.11 answers for a job whose prolog failed (seen on the test bed)
    raw = {"job_id": 4, "job_state": ["PENDING"], "state_reason": "JobHeldUser",
           "state_description": "launch failed requeued held", "hold": True}
    assert Job.from_api(raw).reason == LAUNCH_FAILED_HELD
    assert LAUNCH_FAILED_HELD in FAILED_LAUNCH_HOLDS
    held_by_user = {**raw, "state_description": ""}
    assert Job.from_api(held_by_user).reason == "JobHeldUser"


def test_a_jobs_record_is_kept_flat_as_the_dashboard_shows_it() -> None:
    job = Job.from_api(record(
        job_state=["RUNNING", "COMPLETING"],
        time_limit={"set": True, "infinite": False, "number": 60},
        end_time={"set": False, "infinite": False, "number": 0},
        priority={"set": True, "infinite": True, "number": 0},
        exit_code={"status": ["SUCCESS"], "return_code": {"set": True, "number": 0},
                   "signal": {"id": {"set": False, "number": 0}, "name": ""}},
        comment="", tres_req_str="cpu=1"))
    assert job.raw["job_state"] == "RUNNING+COMPLETING"
    assert (job.raw["time_limit"], job.raw["priority"], job.raw["exit_code"]) == (
        60, "infinite", "0")
    assert "end_time" not in job.raw and "comment" not in job.raw  # not set, empty
    assert job.raw["tres_req_str"] == "cpu=1"
    assert not any(isinstance(v, dict | list) for v in job.raw.values())
    assert job.state == "RUNNING"  # the state itself is read from the record, not from raw
