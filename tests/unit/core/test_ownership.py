"""Which scheduler-owned annotations to believe (sunk.plans.ownership), branch by branch."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from sunk.plans.ownership import GONE, NOT_OURS, Keys, Ownership, read

K = Keys.with_prefix("sunk.coreweave.com/")
JOB, REJECTED, POD_UID = K.all
UID = "uid-1"


def ours(**extra: str) -> dict[str, str]:
    """Annotations as the scheduler writes them for this Pod."""
    return {POD_UID: UID, **{getattr(K, k): v for k, v in extra.items()}}


def owned(annotations: Mapping[str, str], *, proven: int | None = None,
          owner_of: Mapping[int, str | None] | None = None) -> Ownership:
    return read(annotations, UID, K, proven=proven, owner_of=owner_of or {})


def test_keys_follow_the_prefix() -> None:
    assert K.all == ("sunk.coreweave.com/job-id", "sunk.coreweave.com/rejected",
                     "sunk.coreweave.com/pod-uid")
    assert Keys.with_prefix("x/").job_id == "x/job-id"


def test_nothing_annotated_means_nothing_believed() -> None:
    assert owned({}) == Ownership()
    assert owned({"other.io/job-id": "5"}) == Ownership()
    assert owned({POD_UID: UID}) == Ownership()


# -- a job Slurm ties to the Pod (proven) -------------------------------------------------------
def test_proven_job_with_matching_annotations_needs_nothing() -> None:
    assert owned(ours(job_id="5"), proven=5) == Ownership(job_id=5)


def test_proven_job_without_annotations_is_written_onto_the_pod() -> None:
    assert owned({}, proven=5) == Ownership(
        job_id=5, write={JOB: "5", POD_UID: UID, REJECTED: None})


def test_proven_job_wins_over_a_different_annotated_one() -> None:
    result = owned(ours(job_id="6"), proven=5, owner_of={6: "uid-2"})
    assert result.job_id == 5 and result.check_job is None
    assert set(result.ignored) == {JOB}
    assert "'6'" in result.ignored[JOB] and "job 5" in result.ignored[JOB]
    assert result.write == {JOB: "5", POD_UID: UID, REJECTED: None}


def test_proven_job_repairs_a_copied_pod_uid_and_drops_a_copied_rejection() -> None:
    copied = {JOB: "5", POD_UID: "uid-2", REJECTED: "PolicyDenied: no"}
    result = owned(copied, proven=5)
    assert result == Ownership(job_id=5, write={JOB: "5", POD_UID: UID, REJECTED: None})


# -- no proven job: the annotated id ----------------------------------------------------------
@pytest.mark.parametrize("raw", ["abc", "", "-5", "+5", "5 ", " 5", "1.0", "0x10", "12345678901",
                                 "\u00b2", "\u0661\u0662", "9" * 5000])
def test_an_annotated_id_that_is_not_a_slurm_job_id_is_ignored(raw: str) -> None:
    result = owned(ours(job_id=raw))
    assert result.job_id is None and result.check_job is None
    assert set(result.ignored) == {JOB} and "is not a Slurm job id" in result.ignored[JOB]
    assert len(result.ignored[JOB]) < 100  # the value is cut short in the message


def test_ten_digits_are_still_a_job_id() -> None:
    assert owned(ours(job_id="4294967295")) == Ownership(check_job=4294967295)


def test_an_id_not_written_for_this_pod_is_ignored_even_if_slurm_ties_it_to_the_pod() -> None:
    for copied in ({JOB: "5"}, {JOB: "5", POD_UID: "uid-2"}):
        result = owned(copied, owner_of={5: UID})
        assert result.job_id is None and result.check_job is None
        assert "was not given to this Pod" in result.ignored[JOB]
        assert result.write == dict.fromkeys(copied)


def test_an_id_written_for_this_pod_that_slurm_was_not_asked_about_is_checked_first() -> None:
    assert owned(ours(job_id="5")) == Ownership(check_job=5)
    # Only the annotated id is asked about: what Slurm said of other ids does not answer it.
    assert owned(ours(job_id="5"), owner_of={6: UID}) == Ownership(check_job=5)


def test_an_id_of_ours_that_slurm_no_longer_has_is_believed() -> None:
    assert owned(ours(job_id="5"), owner_of={5: GONE}) == Ownership(job_id=5)


def test_an_id_slurm_ties_to_this_pod_is_believed() -> None:
    assert owned(ours(job_id="5"), owner_of={5: UID}) == Ownership(job_id=5)


@pytest.mark.parametrize(("owner", "now"), [
    (NOT_OURS, "its id is now a job not of this scheduler's"),
    ("uid-2", "its id is now another Pod's job"),
])
def test_an_id_written_for_this_pod_that_slurm_gave_to_another_job_is_a_lost_job(
        owner: str, now: str) -> None:
    """The scheduler wrote it for this very Pod, so Slurm once had it for the Pod: a crashed
    slurmctld lost the job and gave its id to a newer one. Believed, and said to be lost (the
    Pod is then deleted if bound, given a new job if not), never ignored."""
    result = owned(ours(job_id="5"), owner_of={5: owner})
    assert result == Ownership(job_id=5, lost=now)


@pytest.mark.parametrize("owner", [NOT_OURS, UID, GONE])
def test_an_id_not_written_for_this_pod_is_never_a_lost_job(owner: str | None) -> None:
    result = owned({JOB: "5"}, owner_of={5: owner})
    assert result.job_id is None and result.lost == "" and set(result.ignored) == {JOB}


# -- the rejection mark and a stray pod-uid ----------------------------------------------------
def test_a_rejection_written_for_this_pod_is_honoured() -> None:
    assert owned(ours(rejected="PolicyDenied: no GPUs")) == Ownership(
        rejected="PolicyDenied: no GPUs")


@pytest.mark.parametrize("annotations", [
    {REJECTED: "PolicyDenied: no"},
    {REJECTED: "PolicyDenied: no", POD_UID: "uid-2"},
])
def test_a_copied_rejection_is_ignored_and_removed(annotations: dict[str, str]) -> None:
    result = owned(annotations)
    assert result.rejected == "" and result.job_id is None
    assert "not written by the scheduler for this Pod" in result.ignored[REJECTED]
    assert result.write == dict.fromkeys(annotations)


def test_a_stray_pod_uid_is_ignored_and_removed() -> None:
    result = owned({POD_UID: "uid-2" + "x" * 100, "other.io/keep": "v"})
    assert set(result.ignored) == {POD_UID} and "is not this Pod's uid" in result.ignored[POD_UID]
    assert len(result.ignored[POD_UID]) < 100
    assert result.write == {POD_UID: None}  # only keys of the scheduler's are ever written


def test_a_copied_pod_is_scheduled_from_scratch_with_every_foreign_key_removed() -> None:
    copied = {JOB: "5", REJECTED: "SlurmRefused: x", POD_UID: "uid-2", "app": "web"}
    result = owned(copied, owner_of={5: "uid-2"})
    assert result.job_id is None and result.rejected == "" and result.check_job is None
    assert set(result.ignored) == {JOB, REJECTED, POD_UID}
    assert result.write == {JOB: None, REJECTED: None, POD_UID: None}


def test_a_purged_job_and_a_rejection_written_for_this_pod_are_both_believed() -> None:
    result = owned({JOB: "5", POD_UID: UID, REJECTED: "x"}, owner_of={5: GONE})
    assert result == Ownership(job_id=5, rejected="x")
