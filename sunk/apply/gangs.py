"""Carries out a gang's plan (:mod:`sunk.plans.gangplan`): its members' actions through the
executor, the gang's one job submitted or the gang rejected as a whole, and the members'
bindings last, all at once."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Protocol

from sunk import kube, objects
from sunk.apply.binding import Binder
from sunk.apply.claims import ClaimsNotAllocated
from sunk.apply.submissions import Submitter
from sunk.model.podmemory import PodMemory
from sunk.model.state import GangRecord, PodRecord
from sunk.plans import actions as do
from sunk.plans.gangplan import Step
from sunk.slurm.client import SlurmError

log = logging.getLogger("sunk.gangs")


class PodApplier(Protocol):
    """What a gang's steps need of the executor that owns this part: a member's actions
    applied as a Pod's, and the executor's binder and submitter."""

    binder: Binder
    submitter: Submitter

    async def apply_pod(self, pod: kube.Obj, record: PodRecord,
                        actions: Iterable[do.PodAction], *, tries: int = 0
                        ) -> do.RetryLater | None: ...

    async def cancel(self, job_id: int, key: str, why: str) -> bool: ...

    def record(self, pod: kube.Obj) -> PodRecord: ...

    def write_job_id_soon(self, pod: kube.Obj, job_id: int) -> None: ...


class GangExecutor:
    """A gang's steps, in order: ``(None, action)`` is the gang's, ``(Pod key, action)`` one
    member's (applied as a Pod's, each Event told once)."""

    def __init__(self, executor: PodApplier, memory: PodMemory) -> None:
        self.executor = executor
        self.memory = memory

    async def apply(self, gang_id: str, record: GangRecord, pods: dict[str, kube.Obj],
                    steps: Iterable[Step]) -> do.RetryLater | None:
        """Apply the steps in order; the binds go last, all at once; a wait is handed back
        last."""
        binds: list[tuple[kube.Obj, do.Reserve, do.Bind]] = []
        reserved: dict[str, do.Reserve] = {}
        later: do.RetryLater | None = None
        for target, action in steps:
            if target is not None:
                if isinstance(action, do.Reserve):
                    reserved[target] = action  # taken with its binding, below
                elif isinstance(action, do.Bind):
                    binds.append((pods[target], reserved.pop(target), action))
                elif not isinstance(action, do.SubmitGang | do.RejectGang):
                    later = await self._apply_member(pods[target], action) or later
                continue
            match action:
                case do.Replace(lost_job, counted):
                    into = self.memory.replaced if counted else self.memory.withdrawn
                    into.setdefault(gang_id, set()).add(lost_job)
                case do.CancelJob(job_id, why):
                    await self.executor.cancel(job_id, f"gang {gang_id[:8]}", why)
                    self.memory.gang_cancelled.setdefault(gang_id, set()).add(job_id)
                case do.RetryLater():
                    later = action
                case do.SubmitGang():
                    await self._submit(action, record, pods)
                case do.RejectGang():
                    await self._reject(action, record, pods)
        no_room = await self._bind_all(binds)
        return no_room or later

    async def _apply_member(self, pod: kube.Obj, action: do.PodAction
                            ) -> do.RetryLater | None:
        if isinstance(action, do.PodEvent):
            told = self.memory.told_gang.setdefault(objects.pod(pod).metadata.uid, set())
            if (action.reason, action.message) in told:
                return None
            told.add((action.reason, action.message))
        return await self.executor.apply_pod(pod, self.executor.record(pod), (action,))

    async def _bind_all(self, binds: list[tuple[kube.Obj, do.Reserve, do.Bind]]
                        ) -> do.RetryLater | None:
        """Every member reserved and bound at once. The members' Scheduled Events are sent
        once every binding has been answered: sent as each member was bound, they competed
        with the last bindings for the API server."""
        events: list[Callable[[], None]] = []
        binder = self.executor.binder

        async def reserve_and_bind(pod: kube.Obj, reserve: do.Reserve, bind: do.Bind
                                   ) -> do.RetryLater | None:
            if (no_room := binder.reserve(pod, reserve.k8s_node)) is not None:
                return no_room
            try:
                await binder.bind(pod, self.executor.record(pod), bind.k8s_node,
                                  bind.slurm_node, bind.job_id, bind.annotations, events=events)
            except ClaimsNotAllocated as exc:  # not bound: looked at again soon
                return do.RetryLater(str(exc))
            return None

        results = await asyncio.gather(*(reserve_and_bind(*each) for each in binds),
                                       return_exceptions=True)
        for send in events:
            send()
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return next((r for r in results if isinstance(r, do.RetryLater)), None)

    async def _submit(self, submit: do.SubmitGang, record: GangRecord,
                      pods: dict[str, kube.Obj]) -> None:
        """The gang's job; its id goes onto every member as a Pod's does. A refusal Slurm
        would repeat rejects the gang; any other failure is retried."""
        members = [pods[key] for key, _ in submit.members]
        try:
            job_id = await self.executor.submitter.submit(
                submit.gang.uid, dict(submit.job), tuple(dict(c) for c in submit.components))
        except SlurmError as exc:
            if not exc.permanent:
                raise
            await self._reject(do.RejectGang(submit.gang.name, "SlurmRefused",
                                             f"Slurm refused the job: {exc.slurm_message}",
                                             tuple(key for key, _ in submit.members)),
                               record, pods)
            return
        log.info("gang %s: submitted job %d for %d Pods", submit.gang.key, job_id, len(members))
        for pod in members:
            self.executor.write_job_id_soon(pod, job_id)
        record.job_id = job_id
        # No Event: the job id's write says it, with the member's PodScheduled condition
        # (the gang's job and why it waits); the binding's Event is a member's one Event.
        record.note("JobSubmitted", f"Slurm job {job_id} for {len(members)} nodes")

    async def _reject(self, reject: do.RejectGang, record: GangRecord,
                      pods: dict[str, kube.Obj]) -> None:
        """One member can never run: the whole gang is rejected, with an Event on each."""
        record.problem = f"{reject.reason}: {reject.message}"
        log.info("gang %s rejected: %s: %s", reject.name, reject.reason, reject.message)
        for key in reject.members:
            await self._apply_member(pods[key], do.Reject(
                reject.reason, f"gang {reject.name}: {reject.message}"))
