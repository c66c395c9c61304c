"""Is the API server there, is Slurm there: what /readyz, the dashboard and the metrics say.

A call to slurmrestd whose slurmctld is gone can hang for a while before it fails, and an API
server that shuts down gracefully stops taking requests at once but keeps its open watches for a
while: neither errors nor watches alone tell soon enough, so silence counts too.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

from sunk import kube
from sunk.model.state import SchedulerState
from sunk.runtime import metrics

log = logging.getLogger("sunk.model.health")

#: Seconds without an answer from Slurm (past the poll interval) after which it counts as down.
SLURM_SILENCE = 3.0

#: Seconds the API server may take to answer the probe's read before it counts as down. Under
#: load its reads take seconds (on the saturated test bed, over 2 s at times), and each false
#: outage re-queued every Pod when it "answered again".
KUBE_SILENCE = 5.0


class Health:
    def __init__(self, state: SchedulerState, *, poll_interval: float,
                 informers: Callable[[], Iterable[kube.Informer]]) -> None:
        self.state = state
        self.poll_interval = poll_interval
        self._informers = informers
        self._slurm_answered_at = time.monotonic()
        self._kube_probe_error = ""
        #: The API server stopped answering after it had answered: its return is a recovery.
        #: Coming up at start is not one (every Pod is looked at then anyway).
        self._kube_lost = False
        #: The problem now is in the log already (a warning once per outage, not every second).
        self._kube_problem_told = False
        #: Called when Slurm, or the API server, answers again after an outage.
        self.on_slurm_back: list[Callable[[], None]] = []
        self.on_kube_back: list[Callable[[], None]] = []

    # -- Slurm ------------------------------------------------------------------------------
    def slurm_answered(self, error: Exception | None) -> None:
        """What the last call to slurmrestd says of it."""
        recovered = error is None and not self.state.slurm_healthy
        if error is None:
            self._slurm_answered_at = time.monotonic()
        self.state.slurm_healthy, self.state.slurm_error = error is None, str(error or "")
        metrics.SLURM_UP.set(error is None)
        if recovered:
            for call in self.on_slurm_back:
                call()

    def slurm_problem(self) -> str:
        """What is wrong with Slurm ("" if nothing): its last error, or a silence of
        :data:`SLURM_SILENCE` seconds past the poll interval."""
        if not self.state.slurm_healthy:
            return self.state.slurm_error or "no answer yet"
        silent = time.monotonic() - self._slurm_answered_at - self.poll_interval
        if silent > SLURM_SILENCE:
            return f"no answer from slurmrestd for {silent:.0f}s"
        return ""

    # -- the API server -----------------------------------------------------------------------
    def kube_problem(self) -> str:
        """What is wrong with the API server, as the watches and the probe see it."""
        problems = [f"{i.resource}: {i.last_error}" for i in self._informers() if not i.healthy]
        if self._kube_probe_error:
            problems.append(f"a read failed: {self._kube_probe_error}")
        return "; ".join(problems)

    async def probe_kube(self, api: kube.Client, interval: float = 1.0,
                         silence: float = KUBE_SILENCE) -> None:
        """A small read every second (watches alone call a stopping API server healthy); one
        that fails, or has no answer within ``silence`` seconds, makes it a problem."""
        while True:
            try:
                async with asyncio.timeout(silence):
                    await kube.request(api, "GET", "nodes", params={"limit": "1"})
            except TimeoutError:
                self._kube_probe_error = f"no answer within {silence:g}s"
            except kube.KubeError as exc:
                self._kube_probe_error = str(exc) or type(exc).__name__
            else:
                self._kube_probe_error = ""
            self.note_kube()
            await asyncio.sleep(interval)

    def note_kube(self) -> None:
        problem = self.kube_problem()
        recovered = not problem and self._kube_lost
        if problem:
            if not self._kube_problem_told:
                log.warning("the API server does not answer: %s", problem)
                self._kube_problem_told = True
            self._kube_lost = self._kube_lost or self.state.kube_healthy
        else:
            if self._kube_problem_told:
                log.info("the API server answers again")
            self._kube_lost = self._kube_problem_told = False
        self.state.kube_healthy, self.state.kube_error = not problem, problem
        metrics.KUBE_UP.set(0 if problem else 1)
        if recovered:
            for call in self.on_kube_back:
                call()
