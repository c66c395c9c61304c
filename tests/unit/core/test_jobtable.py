"""Which Slurm jobs the scheduler takes for its own (plain data: no API server, no Slurm)."""

from __future__ import annotations

from sunk.model.jobtable import JobTable
from sunk.slurm.job import Job, PodIdentity, admin_comment, job_extra

NAME = "sunk-test"


def job(job_id: int, uid: str, *, stamped: bool = True, name: str = "p",
        state: str = "RUNNING", nodes: str = "n1", scheduler: str = NAME) -> Job:
    who = PodIdentity("ns", name, uid, scheduler)
    return Job(job_id=job_id, name="", state=state, extra=job_extra(who), nodes=nodes,
               reason="", admin_comment=admin_comment(who) if stamped else "")


def test_a_job_whose_extra_copies_a_pods_but_that_the_scheduler_did_not_submit_is_ignored(
        ) -> None:
    table = JobTable(NAME)
    assert table.learn(job(7, "aaaa-0001")).owner is not None
    assert table.learn(job(9, "aaaa-0001", stamped=False)).owner is None, "a copied extra"
    assert table.by_uid == {"aaaa-0001": 7} and set(table) == {7}
    forged = job(10, "aaaa-0001")
    forged.admin_comment = admin_comment(PodIdentity("ns", "p", "bbbb-0002", NAME))
    assert table.learn(forged).owner is None, "a stamp for another Pod is no proof"


def test_another_schedulers_job_is_not_ours() -> None:
    table = JobTable(NAME)
    assert table.learn(job(7, "aaaa-0001", scheduler="other")).owner is None
    assert len(table) == 0


def test_a_job_id_reused_by_slurm_for_another_pod_leaves_the_first_pod_without_a_job() -> None:
    table = JobTable(NAME)
    table.learn(job(33, "aaaa-0001", name="a"))
    learned = table.learn(job(33, "bbbb-0002", name="b"))
    assert learned.displaced is not None and learned.displaced.key == "ns/a"
    assert table.by_uid == {"bbbb-0002": 33}
    owner = table.owner(33)
    assert owner is not None and owner.uid == "bbbb-0002"


def test_a_refused_submission_record_is_not_a_pods_job() -> None:
    table = JobTable(NAME)
    assert table.learn(job(5, "aaaa-0001", state="FAILED", nodes="")).owner is None
    assert 5 not in table.jobs
    table.learn(job(6, "aaaa-0001", state="PENDING", nodes=""))
    assert table.learn(job(6, "aaaa-0001", state="FAILED", nodes="")).owner is not None, (
        "a job we followed that failed to launch is still its Pod's")


def test_the_newest_job_is_the_pods_and_forgetting_it_unlinks_the_pod() -> None:
    table = JobTable(NAME)
    table.learn(job(8, "aaaa-0001"))
    table.learn(job(4, "aaaa-0001"))
    assert table.by_uid["aaaa-0001"] == 8, "an older job does not replace the newer"
    assert table.forget(8) is not None
    assert "aaaa-0001" not in table.by_uid
    assert table.forget(8) is None
    table.learn(job(4, "aaaa-0001"))
    assert table.by_uid["aaaa-0001"] == 4 and table.newest_id() == 4
