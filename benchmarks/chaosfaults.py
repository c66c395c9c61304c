"""The soak's faults: what a seed asks for (pure) and doing them on the bed.

A fault is a kind (``kill <part>``: SIGKILL, the part started again once its outage is over;
``stop <part>``: SIGSTOP, then SIGCONT once it is over) and an outage: short (2 to 15 s) or,
one time in five, long (30 to 90 s; at most 80 % of the time between two faults, so that they
do not pile up). The scheduler killed is started again at once, as its
supervisor would, and must be ready within 30 s. A slurmd's fault picks one node's slurmd.
Faults come one at a time, spread evenly over the run with some jitter.

From a moment of the run on (``two_replicas_at``), the scheduler runs as two replicas with
leader election (:mod:`benchmarks.chaosreplicas`); a scheduler's fault then hits the leader, and
the replicas' supervisor starts again one that exited.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import time
from dataclasses import dataclass, field
from typing import Any

from benchmarks.chaosreplicas import Replicas
from testbed import cluster
from testbed.errors import TestbedError
from testbed.scheduler import RunningScheduler, start_scheduler

FAULTS = ("kill scheduler", "stop scheduler", "kill slurmctld", "stop slurmctld",
          "kill slurmrestd", "kill kube-apiserver", "kill etcd", "kill slurmd", "kill kwok")
SLURMCTLD_CRASH = "kill slurmctld"
#: How often a fault comes (per minute), and how often an outage is a long one.
PER_MINUTE, LONG_SHARE = 1.1, 0.2
#: How many times a supervisor starts a scheduler that fails to start before the soak gives up.
RESTARTS = 5


@dataclass(frozen=True)
class Fault:
    at: float
    kind: str
    #: How long the part is down (or stopped).
    down: float
    #: A slurmd's fault: which node (index).
    node: int = 0

    @property
    def part(self) -> str:
        return self.kind.split(" ", 1)[1]


def plan_faults(seed: int, minutes: float, *, slurmctld_crashes: int,
                kinds: tuple[str, ...] = FAULTS, per_minute: float = PER_MINUTE,
                nodes: int = 8) -> list[Fault]:
    """The faults a seed gives, in time order (pure); ``slurmctld_crashes`` of them at least
    are slurmctld's SIGKILLs (when ``kinds`` has them)."""
    rng = random.Random(seed)
    length = minutes * 60
    crashes = slurmctld_crashes if SLURMCTLD_CRASH in kinds else 0
    count = max(crashes, round(minutes * per_minute))
    chosen = [*([SLURMCTLD_CRASH] * crashes), *(rng.choice(kinds) for _ in range(count - crashes))]
    rng.shuffle(chosen)
    gap = length / (len(chosen) + 1)
    out = []
    for i, kind in enumerate(chosen):
        long = rng.random() < LONG_SHARE
        down = rng.uniform(30, 90) if long else rng.uniform(2, 15)
        out.append(Fault(round(gap * (i + 1) + rng.uniform(-gap / 3, gap / 3), 1), kind,
                         round(min(down, max(2.0, gap * 0.8)), 1), rng.randrange(nodes)))
    return out


@dataclass
class Injector:
    """Does the faults; keeps the scheduler now running (a kill replaces it) and whether a part
    is down now (the checker does not count that time against an invariant's grace)."""

    tb: cluster.Testbed
    scheduler: RunningScheduler
    name: str
    started: float = field(default_factory=time.monotonic)
    log: list[dict[str, Any]] = field(default_factory=list)
    ready_after: list[float] = field(default_factory=list)
    down_now: bool = False
    #: The scheduler's flags beyond the bed's.
    extra: list[str] = field(default_factory=list)
    #: The two replicas, once the scheduler runs as two; when they came.
    replicas: Replicas | None = None
    replicas_at: float | None = None
    #: Held during each fault, so that a switch to two replicas waits for none to be on.
    busy: asyncio.Lock = field(default_factory=asyncio.Lock)

    def now(self) -> float:
        return round(time.monotonic() - self.started, 1)

    async def run(self, faults: list[Fault]) -> None:
        for fault in faults:
            await asyncio.sleep(max(0.0, fault.at - (time.monotonic() - self.started)))
            began = self.now()
            part = self._part(fault)
            print(f"[chaos] {began:7.1f}s  {fault.kind} ({part}) for {fault.down:.0f}s",
                  flush=True)
            async with self.busy:
                self.down_now = True
                try:
                    await self._one(fault, part)
                finally:
                    self.down_now = False
            self.log.append({"kind": fault.kind, "part": part, "at": began,
                             "back_at": self.now()})

    def _part(self, fault: Fault) -> str:
        if fault.part == "slurmd":
            return f"slurmd:{self.tb.nodes[fault.node % len(self.tb.nodes)].slurm_name}"
        return fault.part

    async def _one(self, fault: Fault, part: str) -> None:
        stop = fault.kind.startswith("stop ")
        if part == "scheduler" and self.replicas is not None:
            await self._hit_leader(self.replicas, fault, stop)
            return
        if part == "scheduler" and not stop:
            self.scheduler.stop(signal.SIGKILL)
            await asyncio.to_thread(self._restart_scheduler)
            return
        if part == "scheduler":
            self.scheduler.process.send_signal(signal.SIGSTOP)
            await asyncio.sleep(fault.down)
            self.scheduler.process.send_signal(signal.SIGCONT)
            return
        sig = signal.SIGSTOP if stop else signal.SIGKILL
        await asyncio.to_thread(cluster.kill_part, self.tb, part, sig, wait=not stop)
        await asyncio.sleep(fault.down)
        if stop:
            await asyncio.to_thread(cluster.kill_part, self.tb, part, signal.SIGCONT,
                                    wait=False)
        else:
            await asyncio.to_thread(cluster.start_part, self.tb, part, timeout=120)

    async def _hit_leader(self, replicas: Replicas, fault: Fault, stop: bool) -> None:
        """The leading replica killed (its supervisor starts it again) or stopped a while (once
        it runs again it finds its Lease taken, and exits)."""
        leader = replicas.leader()
        if not stop:
            leader.stop(signal.SIGKILL)
            return
        leader.process.send_signal(signal.SIGSTOP)
        await asyncio.sleep(fault.down)
        leader.process.send_signal(signal.SIGCONT)

    def _restart_scheduler(self) -> None:
        """As a supervisor would: at once, and again while it fails to start (the time to
        ready counts them all: it must be ready within 30 s)."""
        restarted = time.monotonic()
        for attempt in range(RESTARTS):
            try:
                self.scheduler = start_scheduler(self.tb, name=self.name, extra=self.extra,
                                                 hooks_port=self.tb.ports["hooks"],
                                                 log_name=self.name)
                break
            except TestbedError as exc:
                print(f"[chaos] {self.now():7.1f}s  the scheduler did not start: {exc}",
                      flush=True)
                if attempt == RESTARTS - 1:
                    raise
                time.sleep(2)
        self.ready_after.append(round(time.monotonic() - restarted, 1))

    async def two_replicas(self, at: float) -> None:
        """At ``at`` (seconds after the start; between two faults), the one scheduler stopped
        and two replicas with leader election started in its place."""
        await asyncio.sleep(max(0.0, at - (time.monotonic() - self.started)))
        async with self.busy:
            print(f"[chaos] {self.now():7.1f}s  the scheduler runs as two replicas from here",
                  flush=True)
            await asyncio.to_thread(self.scheduler.stop)
            self.replicas = Replicas(self.tb, self.name, self.extra)
            await self.replicas.start()
            self.replicas_at = self.now()

    async def close(self) -> None:
        """The replicas' forwarder and supervisor stopped (the replicas run on)."""
        if self.replicas is not None:
            await self.replicas.close()
            self.ready_after += self.replicas.ready_after

    def running(self) -> RunningScheduler | Replicas:
        """What runs the scheduler now: one process, or the replicas."""
        return self.replicas or self.scheduler

    def resume_all(self) -> None:
        """Nothing left stopped (a soak cut short mid-fault)."""
        for each in self.replicas.running if self.replicas else [self.scheduler]:
            each.process.send_signal(signal.SIGCONT)
        with contextlib.suppress(TestbedError):
            cluster.kill_part(self.tb, "slurmctld", signal.SIGCONT, wait=False)
