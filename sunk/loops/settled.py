"""What each Pod's last successful reconcile left, to tell a change from the echo of the
scheduler's own writes.

A watch event that shows the Pod as its last reconcile read it (with the scheduler's writes on
top) is the echo of those writes, or a change no reconcile reads (kwok's container statuses, a
running phase); a job's change between two waiting states (:func:`sunk.plans.decide.waiting`)
cannot change its Pod's step. Either only brings the Pod's dashboard line up to date: about
half the looks a Pod took. A Pod whose reconcile starts, fails or finds it gone is forgotten
here, and a Pod not here is always looked at.
"""

from __future__ import annotations

from typing import NamedTuple

from sunk import kube, objects
from sunk.model.cluster import Cluster
from sunk.plans import ownership
from sunk.plans.decide import ENDED_PHASES, JobView, waiting
from sunk.plans.keys import PodKey


class Settled(NamedTuple):
    """What a Pod's last successful reconcile left: the Pod as it read it with its own writes
    on top (:meth:`SettledPods.as_reconciled`), its job, and whether that job was waiting. A
    plain tuple: one for each of 10,000 Pods."""

    pod: tuple[object, ...]
    job_id: int | None
    job_waiting: bool


class SettledPods:
    def __init__(self, cluster: Cluster, owned: ownership.Keys) -> None:
        self.cluster = cluster
        self.owned = owned
        self._settled: dict[PodKey, Settled] = {}

    def keep(self, key: PodKey, pod: kube.Obj, job_id: int | None,
             job: JobView | None) -> None:
        """The Pod's reconcile ran through, its job as the job table has it now."""
        self._settled[key] = Settled(self.as_reconciled(pod), job_id,
                                     job is not None and waiting(job))

    def forget(self, key: PodKey) -> None:
        self._settled.pop(key, None)

    def is_echo(self, key: PodKey, pod: kube.Obj) -> bool:
        """The event shows ``pod`` as its last reconcile left it: nothing to reconcile."""
        settled = self._settled.get(key)
        return settled is not None and settled.pod == self.as_reconciled(pod)

    def only_waits(self, key: PodKey, uid: str, job_id: int | None,
                   job: JobView | None) -> bool:
        """The Pod's job went from one waiting state to another, the same job as when the Pod
        settled: its step cannot have changed."""
        settled = self._settled.get(key)
        return (settled is not None and settled.job_waiting and settled.pod[0] == uid
                and job_id == settled.job_id and job is not None and waiting(job))

    def as_reconciled(self, pod: kube.Obj) -> tuple[object, ...]:
        """What a reconcile reads of the Pod itself, with the scheduler's writes not yet
        watched on top (its job comes from Slurm, and wakes the Pod when it changes): the
        Pod's identity and spec (a spec change bumps ``generation``), whether it is deleted,
        ended or bound, and the annotations the scheduler owns."""
        typed = objects.pod(pod)
        meta = typed.metadata
        written = self.cluster.assumed.pending_annotations(meta.uid)
        return (meta.uid, meta.generation, meta.terminating,
                typed.status.phase in ENDED_PHASES,
                self.cluster.assumed.is_bound(pod),
                *(written[k] if k in written else meta.annotations.get(k)
                  for k in self.owned.all))
