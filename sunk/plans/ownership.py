"""Which of a Pod's scheduler-owned annotations to believe (pure).

The scheduler writes a few annotations onto the Pods it schedules (``job-id``, ``rejected``, and
``pod-uid``, the uid of the Pod it wrote them for). Anyone who can create Pods can write them too:
by hand, or by copying a running Pod with ``kubectl get pod -o yaml``. Acting on them as they
stand would let one Pod take over another's Slurm job (bind to its node, cancel it on delete).

So they are never taken as input on their own word:

- a Pod's job is the job whose ``extra`` names the Pod's uid: Slurm holds what the scheduler
  itself wrote at submit time (``proven``);
- a ``job-id`` that Slurm does not tie to this Pod is believed only when the scheduler wrote it
  for this very Pod (``pod-uid`` is the Pod's uid) and Slurm no longer has that job: it ended
  and was purged, or a slurmctld that crashed before saving its state lost it, and may have
  given its id to another job since (``lost``). The Pod is then handled as one whose job is
  gone: deleted if bound, given a new job if not;
- a ``rejected`` mark is believed only when written for this Pod;
- anything else is ignored and reported, and the Pod is scheduled from scratch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

#: ``owner_of[job_id]``: Slurm has no such job.
GONE = None
#: ``owner_of[job_id]``: Slurm has the job, but it is not a job of this scheduler.
NOT_OURS = ""


@dataclass(frozen=True)
class Keys:
    job_id: str
    rejected: str
    pod_uid: str

    @classmethod
    def with_prefix(cls, prefix: str) -> Keys:
        return cls(f"{prefix}job-id", f"{prefix}rejected", f"{prefix}pod-uid")

    @property
    def all(self) -> tuple[str, str, str]:
        return self.job_id, self.rejected, self.pod_uid


@dataclass(frozen=True)
class Ownership:
    #: The Pod's job (None: it has none yet).
    job_id: int | None = None
    #: The rejection to honour ("" for none).
    rejected: str = ""
    #: Annotations ignored, and why (for one Warning Event).
    ignored: Mapping[str, str] = field(default_factory=dict)
    #: A job id to read from Slurm before the answer can be given (then ask again).
    check_job: int | None = None
    #: Annotations to write so that the Pod shows what is proven (None removes one).
    write: Mapping[str, str | None] = field(default_factory=dict)
    #: ``job_id`` was the Pod's, but Slurm lost that job and gave its id to another: what
    #: the id is now ("" otherwise).
    lost: str = ""


def read(annotations: Mapping[str, str], uid: str, keys: Keys, *, proven: int | None,
         owner_of: Mapping[int, str | None]) -> Ownership:
    """What to believe of ``annotations`` on the Pod ``uid``.

    ``proven``: the newest job of ours whose ``extra`` names this uid. ``owner_of``: what Slurm
    said of other job ids (the Pod uid the job names, :data:`NOT_OURS`, or :data:`GONE`); an
    annotated id missing from it is asked for through ``check_job``.
    """
    written_for_us = annotations.get(keys.pod_uid) == uid
    raw_job = annotations.get(keys.job_id)
    ignored: dict[str, str] = {}
    job_id: int | None = proven
    lost = ""

    if proven is not None:
        if raw_job != str(proven) or not written_for_us:
            if raw_job is not None and raw_job != str(proven):
                ignored[keys.job_id] = (f"{raw_job[:40]!r} is not this Pod's job; Slurm ties job "
                                        f"{proven} to it")
            return Ownership(job_id=proven, ignored=ignored,
                             write={keys.job_id: str(proven), keys.pod_uid: uid,
                                    keys.rejected: None})
    elif raw_job is not None:
        if not (raw_job.isascii() and raw_job.isdigit()) or len(raw_job) > 10:
            ignored[keys.job_id] = f"{raw_job[:40]!r} is not a Slurm job id"
        elif not written_for_us:
            ignored[keys.job_id] = (f"job {raw_job} was not given to this Pod by the scheduler "
                                    f"({keys.pod_uid} is not this Pod's uid: copied from "
                                    "another Pod?)")
        elif int(raw_job) not in owner_of:
            return Ownership(check_job=int(raw_job))
        elif (owner := owner_of[int(raw_job)]) is GONE:
            job_id = int(raw_job)  # ours, ended and purged (or lost) by Slurm: the Pod goes too
        elif owner != uid:
            # The scheduler gave this id to this very Pod, so Slurm once ran it for the Pod:
            # a crashed slurmctld lost the job and gave its id to a newer one.
            job_id = int(raw_job)
            lost = "its id is now " + (
                "a job not of this scheduler's" if owner == NOT_OURS else "another Pod's job")
        else:  # Slurm ties it to this Pod (the caller had not learned it yet)
            job_id = int(raw_job)

    rejected = annotations.get(keys.rejected)
    if rejected is not None and not written_for_us:
        ignored[keys.rejected] = ("not written by the scheduler for this Pod (copied from "
                                  "another Pod?); checking the Pod again")
        rejected = None
    if keys.pod_uid in annotations and not written_for_us:
        ignored.setdefault(keys.pod_uid, f"{annotations[keys.pod_uid][:40]!r} is not this "
                                         "Pod's uid")
    return Ownership(job_id=job_id, rejected=rejected or "", ignored=ignored,
                     write=dict.fromkeys(ignored), lost=lost)
