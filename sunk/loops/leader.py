"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection does it.

Several replicas run; the one holding the Lease acts (schedules, syncs, answers the hook API and
serves the dashboard), the others wait, ready to take over. Safety rests on three rules:

- every write of the Lease is a compare-and-swap: a create fails if the Lease exists, an update
  carries the resourceVersion it read. Two candidates racing for a free Lease cannot both win.
- a candidate judges expiry by how long the record has stayed unchanged *on its own clock*, never
  by the holder's timestamps (machines' clocks differ; their rates do not, much).
- the leader stops acting when it has not renewed for ``renew_deadline``, which is shorter than
  ``lease_duration``: it stops before anyone else may start. It then exits (as kube-scheduler
  does), and its restart rejoins as a candidate with a fresh identity.

A graceful stop releases the Lease (empty holder), so a standby takes over at its next retry
instead of waiting for the Lease to expire.

The decisions (:func:`verdict`, :func:`claim`, :func:`released`, :class:`Observer`) are pure;
the I/O is in :class:`KubeLeases`, :class:`LeaderElector` and :class:`PodLabel`.
"""

from __future__ import annotations

import asyncio
import datetime
import enum
import logging
import os
import random
import socket
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from prometheus_client import Gauge

from sunk import kube

log = logging.getLogger("sunk.loops.leader")

LEADER = Gauge("sunk_leader", "1 while this replica holds the leader Lease, else 0")
#: client-go's JitterFactor: a candidate retries after retry_period * (1 + up to this).
JITTER = 0.2


class LeadershipLost(Exception):
    """The leader could not renew its Lease in time, or someone else holds it now."""


class LeaseConflict(Exception):
    """Someone else wrote the Lease first (HTTP 409), or it vanished under us."""


class LeaseError(Exception):
    """The Lease could not be read or written (API server unreachable, refused, ...)."""


# -- pure decisions ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """client-go's (and kube-scheduler's) defaults: a 15 s lease, renewed within 10 s, retried
    every 2 s."""

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if self.lease_duration < 1 or self.lease_duration != int(self.lease_duration):
            raise ValueError("the lease duration must be whole seconds, at least 1s "
                             "(a Lease counts whole seconds)")
        if self.retry_period <= 0:
            raise ValueError("the retry period must be positive")
        if not self.lease_duration > self.renew_deadline:
            raise ValueError("the lease duration must be longer than the renew deadline")
        if not self.renew_deadline > self.retry_period * (1 + JITTER):
            raise ValueError(f"the renew deadline must be longer than {1 + JITTER} times the "
                             "retry period")


@dataclass(frozen=True)
class LeaseRecord:
    """The Lease's spec, as leader election reads and writes it."""

    holder: str = ""
    lease_duration: int = 0
    acquire_time: str | None = None
    renew_time: str | None = None
    transitions: int = 0

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None) -> LeaseRecord:
        spec = spec or {}
        return cls(holder=spec.get("holderIdentity") or "",
                   lease_duration=int(spec.get("leaseDurationSeconds") or 0),
                   acquire_time=spec.get("acquireTime"), renew_time=spec.get("renewTime"),
                   transitions=int(spec.get("leaseTransitions") or 0))

    def to_spec(self) -> dict[str, Any]:
        return {"holderIdentity": self.holder, "leaseDurationSeconds": self.lease_duration,
                "acquireTime": self.acquire_time, "renewTime": self.renew_time,
                "leaseTransitions": self.transitions}


class Verdict(enum.Enum):
    CREATE = "create"  # there is no Lease yet
    TAKE = "take"      # released (no holder), or its holder let it expire
    RENEW = "renew"    # we hold it
    WAIT = "wait"      # someone else holds it, and it has not expired


class Observer:
    """The last record a candidate saw, and when it first saw it (the candidate's clock)."""

    def __init__(self) -> None:
        self.record: LeaseRecord | None = None
        self.at = 0.0
        self._seen = False

    def observe(self, record: LeaseRecord | None, now: float) -> None:
        if not self._seen or record != self.record:
            self.record, self.at, self._seen = record, now, True


def verdict(record: LeaseRecord | None, *, me: str, observed_at: float, now: float) -> Verdict:
    """What a candidate may do with the Lease it just read (``observed_at``: since when that
    record has stayed unchanged, on the candidate's clock)."""
    if record is None:
        return Verdict.CREATE
    if record.holder == me:
        return Verdict.RENEW
    if not record.holder:
        return Verdict.TAKE
    if now < observed_at + record.lease_duration:
        return Verdict.WAIT
    return Verdict.TAKE


def micro_time(moment: datetime.datetime) -> str:
    """A Kubernetes MicroTime (RFC 3339 with microseconds, UTC)."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def claim(record: LeaseRecord | None, *, me: str, lease_duration: int,
          now: datetime.datetime) -> LeaseRecord:
    """The record that acquires (or renews) the Lease for ``me``."""
    stamp = micro_time(now)
    if record is not None and record.holder == me:
        return replace(record, lease_duration=lease_duration, renew_time=stamp)
    return LeaseRecord(holder=me, lease_duration=lease_duration, acquire_time=stamp,
                       renew_time=stamp,
                       transitions=record.transitions + 1 if record is not None else 0)


def released(record: LeaseRecord, *, now: datetime.datetime) -> LeaseRecord:
    """The record that gives the Lease up at once (as client-go's ReleaseOnCancel writes it)."""
    stamp = micro_time(now)
    return LeaseRecord(holder="", lease_duration=1, acquire_time=stamp, renew_time=stamp,
                       transitions=record.transitions)


def renewal_overdue(renewed_at: float, now: float, timing: Timing) -> bool:
    """Whether a leader that last renewed at ``renewed_at`` must stop acting."""
    return now - renewed_at >= timing.renew_deadline


def default_identity() -> str:
    """The Pod's name (or the host's) with a random suffix, as client-go makes it: a restarted
    process is a new candidate, never mistaken for the leader it was."""
    base = os.environ.get("POD_NAME") or socket.gethostname()
    return f"{base}_{uuid.uuid4().hex[:8]}"


# -- I/O -----------------------------------------------------------------------------------------


class LeaseClient(Protocol):
    """Reads and compare-and-swap writes of one Lease."""

    async def get(self) -> tuple[LeaseRecord, str] | None:
        """The record and its resourceVersion; None if there is no Lease."""

    async def create(self, record: LeaseRecord) -> tuple[LeaseRecord, str]:
        """Create the Lease; LeaseConflict if it exists."""

    async def update(self, record: LeaseRecord, resource_version: str) -> tuple[LeaseRecord, str]:
        """Replace the record; LeaseConflict if the Lease changed since ``resource_version``."""


class KubeLeases:
    """A Lease in the API server (``coordination.k8s.io/v1``)."""

    VERSION = "coordination.k8s.io/v1"

    def __init__(self, api: kube.Client, *, namespace: str, name: str) -> None:
        self.api, self.namespace, self.name = api, namespace, name
        self._metadata: dict[str, Any] = {}

    async def _call(self, method: str, url: str, **kwargs: Any) -> kube.Obj | None:
        try:
            return await kube.request(self.api, method, url, namespace=self.namespace,
                                      version=self.VERSION, **kwargs)
        except kube.KubeError as exc:
            if exc.status == 404 and method == "GET":
                return None
            if exc.status in (404, 409):
                raise LeaseConflict(str(exc)) from exc
            raise LeaseError(str(exc)) from exc

    def _result(self, obj: kube.Obj) -> tuple[LeaseRecord, str]:
        meta = obj.get("metadata") or {}
        self._metadata = {k: meta[k] for k in ("labels", "annotations") if k in meta}
        return LeaseRecord.from_spec(obj.get("spec")), str(meta.get("resourceVersion", ""))

    def _body(self, record: LeaseRecord, resource_version: str | None = None) -> kube.Obj:
        meta: dict[str, Any] = {**self._metadata, "name": self.name,
                                "namespace": self.namespace}
        if resource_version is not None:
            meta["resourceVersion"] = resource_version
        return {"apiVersion": self.VERSION, "kind": "Lease", "metadata": meta,
                "spec": record.to_spec()}

    async def get(self) -> tuple[LeaseRecord, str] | None:
        obj = await self._call("GET", f"leases/{self.name}")
        return None if obj is None else self._result(obj)

    async def create(self, record: LeaseRecord) -> tuple[LeaseRecord, str]:
        obj = await self._call("POST", "leases", json=self._body(record))
        assert obj is not None
        return self._result(obj)

    async def update(self, record: LeaseRecord, resource_version: str) -> tuple[LeaseRecord, str]:
        obj = await self._call("PUT", f"leases/{self.name}",
                               json=self._body(record, resource_version))
        assert obj is not None
        return self._result(obj)


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class LeaderElector:
    """Acquire the Lease (:meth:`acquire`), keep it (:meth:`hold`), give it up (:meth:`release`)."""

    def __init__(self, leases: LeaseClient, *, identity: str, timing: Timing | None = None,
                 describe: str = "the lease", clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], datetime.datetime] = _utcnow,
                 jitter: Callable[[], float] = random.random) -> None:
        self.leases, self.identity = leases, identity
        self.timing = timing or Timing()
        self.describe = describe
        self.clock, self.wall, self.jitter = clock, wall, jitter
        self.observer = Observer()
        self.leading = False
        #: The holder of the Lease when last read ("" if none).
        self.holder = ""
        self.lost_reason = ""
        self._renewed_at = 0.0
        self._contact_at: float | None = None
        LEADER.set(0)

    # -- one attempt ---------------------------------------------------------------------------
    async def _attempt(self, within: float) -> bool:
        """Read the Lease and acquire or renew it if we may; True if we hold it afterwards."""
        now = self.clock()
        try:
            async with asyncio.timeout(max(within, 0.05)):
                return await self._try(now)
        except TimeoutError:
            log.warning("%s: the API server did not answer within %.1fs", self.describe, within)
        except LeaseConflict as exc:
            log.info("%s: another replica wrote it first (%s)", self.describe, exc)
        except LeaseError as exc:
            log.warning("%s: %s", self.describe, exc)
        return False

    async def _try(self, now: float) -> bool:
        fetched = await self.leases.get()
        self._contact_at = now
        record, version = fetched if fetched is not None else (None, "")
        self.observer.observe(record, now)
        self.holder = record.holder if record is not None else ""
        step = verdict(record, me=self.identity, observed_at=self.observer.at, now=now)
        if step is Verdict.WAIT:
            return False
        wanted = claim(record, me=self.identity,
                       lease_duration=int(self.timing.lease_duration), now=self.wall())
        if step is Verdict.CREATE:
            written, _ = await self.leases.create(wanted)
        else:
            written, _ = await self.leases.update(wanted, version)
        self.observer.observe(written, now)
        self.holder = self.identity
        self._renewed_at = now
        if step is not Verdict.RENEW:
            previous = record.holder if record is not None and record.holder else "nobody"
            log.info("%s: acquired as %s (previous holder: %s, transitions: %d)",
                     self.describe, self.identity, previous, written.transitions)
        return True

    def _period(self) -> float:
        return self.timing.retry_period * (1 + JITTER * self.jitter())

    # -- the three phases ----------------------------------------------------------------------
    async def acquire(self) -> None:
        """Wait until this replica holds the Lease."""
        log.info("%s: standing by as %s", self.describe, self.identity)
        announced = ""
        while not await self._attempt(self.timing.renew_deadline):
            if self.holder and self.holder != announced:
                log.info("%s: %s leads; waiting", self.describe, self.holder)
                announced = self.holder
            await asyncio.sleep(self._period())
        self.leading = True
        LEADER.set(1)

    async def hold(self) -> None:
        """Renew every retry period. Returns when leadership is lost: someone else holds the
        Lease, or it could not be renewed within the renew deadline. The caller must then stop
        acting at once."""
        while self.leading:
            await asyncio.sleep(self.timing.retry_period)
            while True:
                left = self._renewed_at + self.timing.renew_deadline - self.clock()
                if renewal_overdue(self._renewed_at, self.clock(), self.timing):
                    self._lose(f"not renewed within the renew deadline "
                               f"({self.timing.renew_deadline:g}s)")
                    return
                if await self._attempt(left):
                    break
                if self.holder and self.holder != self.identity:
                    self._lose(f"{self.holder} holds it now")
                    return
                await asyncio.sleep(max(0.0, min(self.timing.retry_period,
                                                 left - self.timing.retry_period / 4)))

    def _lose(self, why: str) -> None:
        self.leading = False
        self.lost_reason = f"{self.describe}: leadership lost: {why}"
        LEADER.set(0)
        log.error("%s", self.lost_reason)

    async def release(self) -> None:
        """Give the Lease up (graceful stop), so a standby takes over at its next retry."""
        if not self.leading:
            return
        self.leading = False
        LEADER.set(0)
        try:
            async with asyncio.timeout(self.timing.renew_deadline):
                fetched = await self.leases.get()
                if fetched is None or fetched[0].holder != self.identity:
                    return
                await self.leases.update(released(fetched[0], now=self.wall()), fetched[1])
        except (TimeoutError, LeaseConflict, LeaseError) as exc:
            log.warning("%s: could not release it (%s); it expires on its own", self.describe,
                        exc or type(exc).__name__)
            return
        log.info("%s: released", self.describe)

    def standby_status(self) -> tuple[bool, str]:
        """Readiness of a replica that does not lead: ready to take over while it can read the
        Lease (a rolling update needs standbys Ready; Services for the hook API and the
        dashboard select the leader by its Pod label instead)."""
        if self._contact_at is None:
            return False, "standby: the Lease has not been read yet"
        if self.clock() - self._contact_at > self.timing.lease_duration:
            return False, "standby: cannot read the Lease"
        return True, f"standby: {self.holder or 'nobody'} leads"


class PodLabel:
    """A label on this replica's own Pod saying whether it leads, for Services that must reach
    the leader (hook API, dashboard). Best effort: failures are logged, never fatal."""

    def __init__(self, api: kube.Client, *, namespace: str, pod: str | None,
                 key: str) -> None:
        self.api, self.namespace, self.pod, self.key = api, namespace, pod, key

    async def set(self, leading: bool) -> None:
        if not self.pod:
            return
        body = {"metadata": {"labels": {self.key: "true" if leading else None}}}
        try:
            async with asyncio.timeout(5):
                await kube.request(self.api, "PATCH", f"pods/{self.pod}",
                                   namespace=self.namespace, json=body,
                                   headers={"Content-Type": "application/merge-patch+json"})
        except (kube.KubeError, TimeoutError) as exc:
            log.warning("could not %s the label %s on Pod %s/%s: %s",
                        "set" if leading else "remove", self.key, self.namespace, self.pod,
                        exc or "timed out")
