"""What the scheduler's work queue holds, typed: a Pod, a gang, or the job of a Pod that is
gone. A reconcile dispatches on the type, never on the characters of a string."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sunk import objects


@dataclass(frozen=True, slots=True)
class PodKey:
    """A Pod that names the scheduler, reconciled alone (or handed to its gang)."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def of(cls, pod: Mapping[str, Any]) -> PodKey:
        meta = objects.pod(pod).metadata
        return cls(meta.namespace, meta.name)

    @classmethod
    def parse(cls, key: str) -> PodKey:
        """``namespace/name``."""
        namespace, _, name = key.partition("/")
        return cls(namespace, name)


@dataclass(frozen=True, slots=True)
class GangKey:
    """A gang: its namespace and its name, ``source:name`` (:func:`sunk.plans.gang.gang_name`:
    ``label:train``, ``job:train``, ``podgroup:g``, ``lws:lws-0``)."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def parse(cls, key: str) -> GangKey:
        """``namespace/source:name``, as the cluster model names a gang."""
        namespace, _, name = key.partition("/")
        return cls(namespace, name)


@dataclass(frozen=True, slots=True)
class ReleaseJob:
    """The job of a Pod whose object is gone: released (cancelled) unless it ended."""

    pod: PodKey
    uid: str
    job_id: int

    def __str__(self) -> str:
        return f"{self.pod} (uid {self.uid}, job {self.job_id})"


QueueKey = PodKey | GangKey | ReleaseJob
