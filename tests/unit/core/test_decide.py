"""The per-Pod state machine, on plain data."""

from __future__ import annotations

import pytest

from sunk.plans.decide import JobView, PodView, Step, decide, waiting

RUNNING_STARTED = JobView(state="RUNNING", started=True, node="h100-000")


@pytest.mark.parametrize(("pod", "job", "step"), [
    # first pass: no job yet
    (PodView(), None, Step.SUBMIT),
    (PodView(rejected=True), None, Step.NOTHING),
    # waiting for Slurm
    (PodView(job_id=7), JobView(state="PENDING"), Step.WAIT),
    (PodView(job_id=7), JobView(state="RUNNING", started=False, node="h100-000"), Step.WAIT),
    # second pass: the script started
    (PodView(job_id=7), RUNNING_STARTED, Step.BIND),
    (PodView(job_id=7, bound=True, phase="Running"), RUNNING_STARTED, Step.NOTHING),
    # Kubernetes side ends it
    (PodView(job_id=7, deleting=True), RUNNING_STARTED, Step.CANCEL_JOB),
    (PodView(job_id=7, deleting=True), JobView(state="PENDING"), Step.CANCEL_JOB),
    (PodView(job_id=7, bound=True, phase="Succeeded"), RUNNING_STARTED, Step.CANCEL_JOB),
    (PodView(job_id=7, bound=True, phase="Failed"), RUNNING_STARTED, Step.CANCEL_JOB),
    (None, RUNNING_STARTED, Step.CANCEL_JOB),
    (None, JobView(state="CANCELLED"), Step.NOTHING),
    (PodView(job_id=7, deleting=True), JobView(state="COMPLETED"), Step.NOTHING),
    # Slurm side ends it
    (PodView(job_id=7, bound=True, phase="Running"), JobView(state="CANCELLED"),
     Step.DELETE_POD),
    (PodView(job_id=7, bound=True, phase="Running"), JobView(state="PREEMPTED"),
     Step.DELETE_POD),
    (PodView(job_id=7, bound=True, phase="Running"), JobView(state="TIMEOUT"), Step.DELETE_POD),
    (PodView(job_id=7), JobView(state="CANCELLED"), Step.DELETE_POD),
    (PodView(job_id=7, bound=True, phase="Running"), None, Step.DELETE_POD),
    # Slurm lost the job before it ran (or purged it): a new job, the Pod holds nothing yet
    (PodView(job_id=7), None, Step.SUBMIT),
    (PodView(job_id=7), JobView(state="FAILED"), Step.SUBMIT),
    (PodView(job_id=7), JobView(state="NODE_FAIL"), Step.SUBMIT),
    (PodView(job_id=7), JobView(state="FAILED", started=True), Step.DELETE_POD),
    (PodView(job_id=7, bound=True, phase="Running"), JobView(state="FAILED"), Step.DELETE_POD),
])
def test_decide(pod: PodView | None, job: JobView | None, step: Step) -> None:
    assert decide(pod, job) is step


def test_a_job_held_after_a_failed_launch_is_replaced_only_before_the_pod_is_bound() -> None:
    held = JobView(state="PENDING", reason="launch_failed_requeued_held")
    assert held.launch_failed
    assert decide(PodView(job_id=7), held) is Step.SUBMIT
    assert decide(PodView(job_id=7, bound=True), held) is Step.NOTHING
    assert not JobView(state="PENDING", reason="JobHeldAdmin").launch_failed
    assert not JobView(state="PENDING", started=True,
                       reason="launch_failed_requeued_held").launch_failed


# -- jobs that leave their Pod waiting --------------------------------------------------------

STATES = ["PENDING", "RUNNING", "COMPLETING", "SUSPENDED", "CANCELLED", "COMPLETED", "FAILED",
          "NODE_FAIL", "TIMEOUT", "PREEMPTED"]
REASONS = ["", "Priority", "Resources", "launch_failed_requeued_held", "JobHeldAdmin"]
JOBS = [None, *(JobView(state=s, started=started, node=node, reason=r)
                for s in STATES for started in (False, True) for node in ("", "h100-000")
                for r in REASONS)]
PODS = [None, *(PodView(phase=phase, bound=bound, deleting=deleting, job_id=job_id,
                        rejected=rejected)
                for phase in ("Pending", "Running", "Succeeded", "Failed")
                for bound in (False, True) for deleting in (False, True)
                for job_id in (None, 7) for rejected in (False, True))]


def test_between_two_waiting_jobs_every_pod_gets_the_same_step() -> None:
    """What lets the scheduler skip a Pod's reconcile when its job only moved between two
    waiting states (the dashboard line is all that changes)."""
    waiting_jobs = [j for j in JOBS if waiting(j)]
    assert {(j.state, j.started) for j in waiting_jobs if j} >= {
        ("PENDING", False), ("RUNNING", False)}
    for pod in PODS:
        steps = {decide(pod, job) for job in waiting_jobs}
        assert len(steps) == 1, (pod, steps)


@pytest.mark.parametrize("job", [
    None, JobView(state="RUNNING", started=True, node="h100-000"), JobView(state="CANCELLED"),
    JobView(state="PENDING", reason="launch_failed_requeued_held"), JobView(state="NODE_FAIL"),
])
def test_a_job_gone_started_ended_or_held_after_its_launch_is_not_waiting(
        job: JobView | None) -> None:
    assert not waiting(job)
