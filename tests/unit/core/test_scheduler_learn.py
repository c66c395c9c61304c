"""Which Slurm jobs the scheduler takes for its own (plain data: no API server, no Slurm)."""

from __future__ import annotations

from typing import Any

from sunk.scheduler import Scheduler
from sunk.settings import Settings
from sunk.slurm.job import Job, PodIdentity, admin_comment, job_extra

NAME = "sunk-test"


def scheduler() -> Scheduler:
    settings = Settings(scheduler_name=NAME, scope="cluster")
    none: Any = None  # _learn touches neither the API server nor Slurm
    return Scheduler(settings, none, none, none)


def job(job_id: int, uid: str, *, stamped: bool = True, name: str = "p") -> Job:
    who = PodIdentity("ns", name, uid, NAME)
    return Job(job_id=job_id, name="", state="RUNNING", extra=job_extra(who),
               nodes="n1", reason="",
               admin_comment=admin_comment(who) if stamped else "")


def test_a_job_whose_extra_copies_a_pods_but_that_the_scheduler_did_not_submit_is_ignored(
        ) -> None:
    s = scheduler()
    assert s._learn(job(7, "aaaa-0001")) is not None
    assert s._learn(job(9, "aaaa-0001", stamped=False)) is None, "a user's job with a copied extra"
    assert s.job_by_uid == {"aaaa-0001": 7} and set(s.jobs) == {7}
    forged_stamp = job(10, "aaaa-0001")
    forged_stamp.admin_comment = admin_comment(
        PodIdentity("ns", "p", "bbbb-0002", NAME))
    assert s._learn(forged_stamp) is None, "a stamp for another Pod is no proof"


def test_a_job_id_reused_by_slurm_for_another_pod_leaves_the_first_pod_without_a_job() -> None:
    s = scheduler()
    s._learn(job(33, "aaaa-0001", name="a"))
    s._learn(job(33, "bbbb-0002", name="b"))
    assert s.job_by_uid == {"bbbb-0002": 33}
    assert s.job_owner(33) == f"{NAME}/bbbb-0002"
