"""What the scheduler knows, in memory, for the dashboard and its JSON API (no I/O).

The scheduler writes here as things happen; views read it, so a page view costs no API call.
"""

from __future__ import annotations

import bisect
import time
import zlib
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

HISTORY = 50

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(dict[str, Any]).decode
#: What the JSON of the jobs sunk submits has in common (``sunk.plans.translate``'s fields and fixed
#: values), preset as the compression's dictionary: a record's job takes about 160 bytes
#: instead of 370 (11,000 Pods: 2 MB less).
_JOB_ZDICT = (
    b'{"name":"pod:","admin_comment":"sunk-pod-uid= scheduler=","script":"#!/bin/sh\\nexec ",'
    b'"extra":"sunk-pod= uid= scheduler=","nodes":"1","tasks":1,"cpus_per_task":1,'
    b'"memory_per_node":{"set":true,"number":},"current_working_directory":"/tmp",'
    b'"environment":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",'
    b'"SUNK_JOB_EXTRA=sunk-pod= uid= scheduler=","SUNK_POD_NAMESPACE=","SUNK_POD_NAME=",'
    b'"SUNK_POD_UID=","SUNK_KILL_WAIT="],"user_id":"0","group_id":"0","excluded_nodes":[],'
    b'"partition":"","account":"","qos":"","exclusive":"user","time_limit":')


def pack_job(job: Mapping[str, Any]) -> bytes:
    """A submitted job as compressed JSON (against :data:`_JOB_ZDICT`)."""
    packer = zlib.compressobj(1, zdict=_JOB_ZDICT)
    return packer.compress(_encode(job)) + packer.flush()


def unpack_job(packed: bytes) -> dict[str, Any]:
    unpacker = zlib.decompressobj(zdict=_JOB_ZDICT)
    return _decode(unpacker.decompress(packed) + unpacker.flush())


@dataclass(slots=True)
class Transition:
    at: float
    what: str
    detail: str = ""


@dataclass(slots=True)
class PodRecord:
    """A Pod as the dashboard shows it. Slotted and compact: one for each of 10,000 Pods."""

    namespace: str
    name: str
    uid: str
    created: float
    phase: str = "Pending"
    job_id: int | None = None
    job_state: str = ""
    pending_reason: str = ""
    slurm_node: str = ""
    k8s_node: str = ""
    bound_at: float | None = None
    rejected: str = ""
    last_event: str = ""
    #: Why it waits, as its PodScheduled condition says it, and Slurm's expected start
    #: (epoch seconds) if it gave one.
    waiting: str = ""
    expected_start: float | None = None
    #: The job sunk submitted for it, as compressed JSON (:attr:`job_description`,
    #: :func:`pack_job`): about 0.2 kB a Pod, where the JSON took 1.1 kB and the dict 2.3 kB
    #: (the dashboard's Pod page reads it, one Pod at a time).
    job_description_packed: bytes = b""
    #: Its transitions, the newest last, at most :data:`HISTORY` (a list: a deque takes 0.8 kB).
    history: list[Transition] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def time_to_bound(self) -> float | None:
        return None if self.bound_at is None else self.bound_at - self.created

    @property
    def job_description(self) -> dict[str, Any] | None:
        """The job sunk submitted for it (None: none yet)."""
        packed = self.job_description_packed
        return unpack_job(packed) if packed else None

    @job_description.setter
    def job_description(self, job: Mapping[str, Any] | None) -> None:
        self.job_description_packed = pack_job(job) if job is not None else b""

    def note(self, what: str, detail: str = "") -> None:
        self.history.append(Transition(time.time(), what, detail))
        if len(self.history) > HISTORY:
            del self.history[0]


@dataclass
class GangMember:
    key: str
    rank: int
    #: The Slurm node its rank was given, and the Kubernetes Node it is bound to ("" if not).
    slurm_node: str = ""
    k8s_node: str = ""
    phase: str = "Pending"
    #: Its component of the gang's heterogeneous job (None: the job is of one shape).
    component: int | None = None


@dataclass
class GangRecord:
    """A gang as the dashboard shows it (:mod:`sunk.plans.gang`)."""

    namespace: str
    name: str
    size: int | None
    members: list[GangMember] = field(default_factory=list)
    job_id: int | None = None
    job_state: str = ""
    #: What it waits for, or why it cannot be scheduled ("" when every member is bound).
    waiting: str = ""
    problem: str = ""
    history: deque[Transition] = field(default_factory=lambda: deque(maxlen=HISTORY))
    #: The status last written on its PodGroup (:mod:`sunk.plans.podgroup`), if it has one.
    podgroup_status: dict[str, Any] | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def note(self, what: str, detail: str = "") -> None:
        if not self.history or (self.history[-1].what, self.history[-1].detail) != (what,
                                                                                      detail):
            self.history.append(Transition(time.time(), what, detail))


@dataclass
class SchedulerState:
    #: Pod key -> its record. Added through :meth:`record` or :meth:`keep`, removed through
    #: :meth:`forget` (they keep the sorted keys the dashboard pages through), never directly.
    pods: dict[str, PodRecord] = field(default_factory=dict)
    started: float = field(default_factory=time.time)
    kube_healthy: bool = False
    kube_error: str = ""
    slurm_healthy: bool = False
    slurm_error: str = ""
    #: Slurm node name -> slurmrestd's node record (state, reason, cpus, alloc_cpus, ...).
    slurm_nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Slurm node name -> how its definition disagrees with Kubernetes' room (if it does).
    capacity: dict[str, str] = field(default_factory=dict)
    #: Slurm node name -> the Pods on its Node that Slurm does not count, as last seen when
    #: a Pod could not be bound there (until a Pod is bound there again).
    not_counted: dict[str, str] = field(default_factory=dict)
    #: Gang key (``namespace/source:name``) -> the gang; Pod key -> its gang's key.
    gangs: dict[str, GangRecord] = field(default_factory=dict)
    gang_of: dict[str, str] = field(default_factory=dict)
    #: The keys of :attr:`pods`, sorted, and how many Pods each namespace has: the dashboard
    #: pages through 10,000 Pods in order, which must not mean a sort per page.
    _keys: list[str] = field(default_factory=list, repr=False)
    _namespaces: Counter[str] = field(default_factory=Counter, repr=False)

    def record(self, namespace: str, name: str, uid: str, created: float) -> PodRecord:
        key = f"{namespace}/{name}"
        rec = self.pods.get(key)
        if rec is None or rec.uid != uid:
            rec = PodRecord(namespace, name, uid, created)
            rec.note("seen")
            self.keep(rec)
        return rec

    def keep(self, rec: PodRecord) -> None:
        """Hold ``rec`` (in place of any record of the same Pod name)."""
        if rec.key not in self.pods:
            bisect.insort(self._keys, rec.key)
            self._namespaces[rec.namespace] += 1
        self.pods[rec.key] = rec

    def forget(self, key: str) -> None:
        if (rec := self.pods.pop(key, None)) is not None:
            del self._keys[bisect.bisect_left(self._keys, key)]
            self._namespaces[rec.namespace] -= 1
            if not self._namespaces[rec.namespace]:
                del self._namespaces[rec.namespace]
        self.gang_of.pop(key, None)

    def pod_keys(self) -> Sequence[str]:
        """The keys of :attr:`pods`, sorted (read only)."""
        return self._keys

    def namespaces(self) -> list[str]:
        """The namespaces of the Pods held, sorted."""
        return sorted(self._namespaces)
