"""What one poll of job states means for the jobs the scheduler follows (pure)."""

from __future__ import annotations

from sunk.model.jobpoll import Followed, plan_poll


def test_a_changed_state_is_recorded_without_reading_the_job() -> None:
    followed = {1: Followed("PENDING", False, 0.0), 2: Followed("RUNNING", True, 0.0),
                3: Followed("RUNNING", True, 0.0)}
    plan = plan_poll(followed, {1: "RUNNING", 2: "CANCELLED", 3: "RUNNING"}, now=1.0,
                     asked={1, 2, 3})
    assert plan.changed == {1: "RUNNING", 2: "CANCELLED"}
    assert plan.fetch == [] and plan.gone == []


def test_a_running_job_not_started_is_read_only_after_a_while() -> None:
    followed = {1: Followed("RUNNING", False, 10.0)}
    states = {1: "RUNNING"}
    assert plan_poll(followed, states, now=24.0, asked={1}).fetch == []
    assert plan_poll(followed, states, now=25.0, asked={1}).fetch == [1]
    started = {1: Followed("RUNNING", True, 0.0)}
    assert plan_poll(started, states, now=100.0, asked={1}).fetch == []


def test_a_pending_job_is_read_a_second_after_submission_then_now_and_then() -> None:
    submitted = {1: Followed("PENDING", False, 10.0)}
    assert plan_poll(submitted, {1: "PENDING"}, now=10.5, asked={1}).fetch == []
    assert plan_poll(submitted, {1: "PENDING"}, now=11.0, asked={1}).fetch == [1]
    read = {1: Followed("PENDING", False, 11.0, reason="Resources")}
    assert plan_poll(read, {1: "PENDING"}, now=30.0, asked={1}).fetch == []
    assert plan_poll(read, {1: "PENDING"}, now=41.0, asked={1}).fetch == [1]


def test_a_pending_job_slurm_has_not_looked_at_yet_is_read_again_a_second_later() -> None:
    unsaid = {1: Followed("PENDING", False, 11.0, reason="None")}
    assert plan_poll(unsaid, {1: "PENDING"}, now=11.5, asked={1}).fetch == []
    assert plan_poll(unsaid, {1: "PENDING"}, now=12.0, asked={1}).fetch == [1]


def test_pending_jobs_are_refreshed_a_few_at_a_time_oldest_first() -> None:
    followed = {i: Followed("PENDING", False, float(100 - i), reason="Priority")
                for i in range(20)}
    plan = plan_poll(followed, dict.fromkeys(followed, "PENDING"), now=200.0,
                     asked=set(followed), pending_per_poll=3)
    assert plan.fetch == [19, 18, 17]
    assert plan_poll(followed, dict.fromkeys(followed, "PENDING"), now=100.0,
                     asked=set(followed)).fetch == []


def test_a_job_slurm_no_longer_lists_is_gone_unless_submitted_during_the_poll() -> None:
    followed = {1: Followed("COMPLETED", True, 0.0), 2: Followed("PENDING", False, 0.0)}
    plan = plan_poll(followed, {}, now=1.0, asked={1})
    assert plan.gone == [1]  # job 2 was submitted while the poll was in flight


def test_ended_jobs_need_nothing_more() -> None:
    followed = {1: Followed("CANCELLED", False, 0.0)}
    plan = plan_poll(followed, {1: "CANCELLED"}, now=1000.0, asked={1})
    assert (plan.fetch, plan.changed, plan.gone) == ([], {}, [])


def test_never_read_pending_jobs_come_before_refreshes_and_one_poll_reads_one_by_default() -> None:
    followed = {1: Followed("PENDING", False, 0.0, reason="Priority"),
                2: Followed("PENDING", False, 50.0), 3: Followed("PENDING", False, 40.0)}
    states = dict.fromkeys(followed, "PENDING")
    assert plan_poll(followed, states, now=100.0, asked=set(followed)).fetch == [3]
    assert plan_poll(followed, states, now=100.0, asked=set(followed),
                     pending_per_poll=3).fetch == [3, 2, 1]


def test_a_running_job_whose_prolog_waits_for_its_lock_is_not_read() -> None:
    followed = {1: Followed("RUNNING", False, 0.0), 2: Followed("RUNNING", False, 0.0)}
    plan = plan_poll(followed, {1: "RUNNING", 2: "RUNNING"}, now=60.0, asked={1, 2},
                     in_prolog={1})
    assert plan.fetch == [2]


def test_a_running_job_no_lock_was_heard_of_is_read_only_after_a_longer_wait() -> None:
    followed = {1: Followed("RUNNING", False, 10.0), 2: Followed("RUNNING", False, 10.0)}
    states = {1: "RUNNING", 2: "RUNNING"}
    assert plan_poll(followed, states, now=24.0, asked={1, 2}, locked={1}).fetch == []
    assert plan_poll(followed, states, now=26.0, asked={1, 2}, locked={1}).fetch == [1]
    assert plan_poll(followed, states, now=39.0, asked={1, 2}, locked={1}).fetch == [1]
    assert plan_poll(followed, states, now=40.0, asked={1, 2}, locked={1}).fetch == [1, 2]
