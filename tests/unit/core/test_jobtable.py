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


def test_forgetting_the_newest_job_counts_the_newest_again_at_once() -> None:
    table = JobTable(NAME)
    for job_id in (3, 9, 5):
        table.learn(job(job_id, f"aaaa-000{job_id}"))
    assert table.newest_id() == 9
    table.forget(5)
    assert table.newest_id() == 9, "an older job forgotten: the newest stays"
    table.forget(9)
    assert table.newest_id() == 3, "counted when forgotten: asking it writes nothing"
    table.forget(3)
    assert table.newest_id() == 0


def test_a_submission_is_its_pods_newest_job_even_below_a_known_id() -> None:
    table = JobTable(NAME)
    table.learn(job(50, "aaaa-0001"))
    table.learn(job(12, "aaaa-0001", state="PENDING", nodes=""))  # Slurm gave a lower id again
    assert table.by_uid["aaaa-0001"] == 50
    table.submitted("aaaa-0001", 12, at=7.5)
    assert table.by_uid["aaaa-0001"] == 12 and table.submitted_at == {12: 7.5}
    table.forget(12)
    assert table.submitted_at == {}


def test_a_polled_state_changes_the_job_in_place_and_a_pending_reason_goes_with_pending() -> None:
    table = JobTable(NAME)
    learned = job(7, "aaaa-0001", state="PENDING", nodes="")
    learned.reason = "Priority"
    table.learn(learned)
    assert table.saw_state(7, "PENDING", at=3.0) is learned
    assert (learned.state, learned.reason, learned.checked_at) == ("PENDING", "Priority", 3.0)
    table.saw_state(7, "RUNNING", at=4.0)
    assert (learned.state, learned.reason, learned.checked_at) == ("RUNNING", "", 4.0)


def test_a_lock_check_keeps_the_nodes_of_a_job_of_ours_and_notes_another_schedulers() -> None:
    table = JobTable(NAME)
    table.lock_checked(7, job(7, "aaaa-0001", nodes="slurm-[1-2]"))
    assert table.allocated == {7: "slurm-[1-2]"}
    table.lock_checked(8, job(8, "bbbb-0002", scheduler="other"))
    assert 8 not in table.allocated and table.placed("bbbb-0002", "")
    table.lock_checked(9, job(9, "cccc-0003", stamped=False))
    assert 9 not in table.allocated and not table.placed("cccc-0003", ""), "an impostor"
    assert len(table) == 0, "a lock check learns no job"


def test_a_prolog_waits_for_its_lock_until_answered() -> None:
    table = JobTable(NAME)
    table.prolog_waiting(7)
    assert table.in_prolog == set(), "a job the table does not know"
    learned = job(7, "aaaa-0001", state="CONFIGURING")
    table.learn(learned)
    table.prolog_waiting(7)
    assert table.in_prolog == {7}
    table.lock_answered(7, at=12.0)
    assert table.in_prolog == set() and learned.checked_at == 12.0
    table.lock_answered(8, at=13.0)  # a job the table does not know: nothing to note


def test_a_started_call_after_a_lock_read_is_learned_as_started() -> None:
    table = JobTable(NAME)
    table.learn(job(7, "aaaa-0001", state="PENDING", nodes=""))
    assert table.learn_started(7) is None, "no lock read: Slurm's word is wanted"
    table.lock_checked(7, job(7, "aaaa-0001", state="CONFIGURING", nodes="slurm-1"))
    told = table.learn_started(7)
    assert told is not None and told.started and (told.state, told.nodes) == (
        "RUNNING", "slurm-1")
    assert table.get(7) is told and 7 in table.started_at
    assert table.learn_started(7) is told, "started already: as known"


def test_a_started_hook_is_heard_once() -> None:
    table = JobTable(NAME)
    table.heard_started(7)
    first = table.started_at[7]
    table.heard_started(7)
    assert table.started_at == {7: first}


def test_an_unanswered_submit_is_kept_until_slurms_jobs_since_were_looked_up() -> None:
    table = JobTable("sunk")
    table.submit_unanswered("uid-1", 41)
    table.submit_unanswered("uid-2", 40)
    assert table.unanswered == {"uid-1": 41, "uid-2": 40}
    table.looked_up("uid-1")
    table.looked_up("uid-3")  # nothing to look up: nothing happens
    assert table.unanswered == {"uid-2": 40}


def test_a_heterogeneous_jobs_component_is_followed_through_its_leader_only() -> None:
    table = JobTable(NAME)
    who = PodIdentity("ns", "label:g", "ab" * 16, NAME, ("a" * 12, "b" * 12), (0, 1))

    def het(job_id: int) -> Job:
        return Job(job_id=job_id, name="", state="RUNNING", extra=job_extra(who), nodes="n1",
                   reason="", admin_comment=admin_comment(who), het_job_id=40,
                   het_offset=job_id - 40)

    assert table.learn(het(40)).owner == who
    assert table.learn(het(41)).owner is None, "a component is not the gang's job"
    assert table.by_uid == {who.uid: 40} and set(table) == {40}
    assert table.member_of == {"a" * 12: 40, "b" * 12: 40}
    table.lock_checked(40, het(40))
    assert table.learn_started(40) is None, "its components' nodes are read, not assumed"
