"""What the scheduler remembers of each Pod and gang between reconciles, beyond what the API
server and Slurm say: Events already sent, jobs already replaced or cancelled. One writer, the
executor (:mod:`sunk.apply`), as it acts; the loops read it into a plan's facts through
:class:`PodMemoryView`, and ask the executor to forget a Pod or a gang that is gone."""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from typing import Protocol

from sunk.plans.waiting import Shown


class PodMemoryView(Protocol):
    """:class:`PodMemory` read-only: what every part but the executor sees of it."""

    @property
    def replaced(self) -> Mapping[str, Set[int]]: ...

    @property
    def told_ignored(self) -> Set[str]: ...

    @property
    def refitted(self) -> Mapping[str, Set[int]]: ...

    @property
    def withdrawn(self) -> Mapping[str, Set[int]]: ...

    @property
    def gang_cancelled(self) -> Mapping[str, Set[int]]: ...

    @property
    def told_gang(self) -> Mapping[str, Set[tuple[str, str]]]: ...

    @property
    def told_not_counted(self) -> Mapping[str, tuple[str, ...]]: ...

    @property
    def shown(self) -> Mapping[str, Shown]: ...


@dataclass
class PodMemory:
    """What the scheduler remembers of a Pod between reconciles (dropped when it goes)."""

    #: Pod uid -> its jobs that were lost or failed to launch, and were replaced.
    replaced: dict[str, set[int]] = field(default_factory=dict)
    #: Pod uids already told that annotations on them were ignored (one Event each).
    told_ignored: set[str] = field(default_factory=set)
    #: Pod uid -> its jobs cancelled because their Node had no room for it.
    refitted: dict[str, set[int]] = field(default_factory=dict)
    #: Gang id -> its jobs sunk cancelled because the gang changed before they started.
    withdrawn: dict[str, set[int]] = field(default_factory=dict)
    #: Gang id -> its jobs sunk has asked Slurm to cancel (once: Slurm takes a moment).
    gang_cancelled: dict[str, set[int]] = field(default_factory=dict)
    #: Pod uid -> the (reason, message) of gang Events told it (a gang's reconcile repeats).
    told_gang: dict[str, set[tuple[str, str]]] = field(default_factory=dict)
    #: Node -> the Pods Slurm does not count last reported on it (told once while the same).
    told_not_counted: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: Pod uid -> why it waits, as last written on it (its PodScheduled condition).
    shown: dict[str, Shown] = field(default_factory=dict)

    def forget(self, uid: str) -> None:
        """The Pod is gone."""
        self.refitted.pop(uid, None)
        self.replaced.pop(uid, None)
        self.told_ignored.discard(uid)
        self.told_gang.pop(uid, None)
        self.shown.pop(uid, None)

    def forget_gang(self, gang_id: str) -> None:
        """The gang has no Pod and no live job left."""
        for kept in (self.replaced, self.withdrawn, self.gang_cancelled):
            kept.pop(gang_id, None)
