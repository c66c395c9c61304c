"""Two replicas of the scheduler with leader election, as the chart runs them, for the soak.

Each replica has its own hook port, as each Pod has its own address. The chart's hook Service
sends the prolog's and the placeholder's calls to the leader only; here a forwarder on the bed's
hook port does the same: it sends each connection to the replica whose ``/readyz`` says it leads
(a standby says ``standby: ...``), and refuses it while none does, as a Service without
endpoints would. A supervisor starts a replica that exited again at once, as the kubelet would
(a leader that lost its Lease exits; so does one killed).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from dataclasses import dataclass, field

import httpx

from testbed import cluster, procs
from testbed.scheduler import RunningScheduler, start_scheduler

#: How often the forwarder asks the replicas which one leads, and the supervisor looks at them.
PROBE_EVERY = 0.5
#: Leader election timing: a Lease of 15 s renewed every 2 s (the chart's defaults).
ELECTION = ["--leader-elect", "--leader-elect-lease-duration=15s",
            "--leader-elect-renew-deadline=10s", "--leader-elect-retry-period=2s"]


@dataclass
class Replicas:
    """The replicas (``name-0``, ``name-1``), the forwarder and the supervisor."""

    tb: cluster.Testbed
    name: str
    extra: list[str] = field(default_factory=list)
    running: list[RunningScheduler] = field(default_factory=list)
    #: Seconds from each restart by the supervisor until the replica was ready.
    ready_after: list[float] = field(default_factory=list)
    leading: int | None = None
    _server: asyncio.Server | None = None
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _pipes: set[asyncio.Task[None]] = field(default_factory=set)

    async def start(self) -> None:
        """Both replicas (each waits until ready), then the forwarder on the bed's hook port."""
        ports = procs.free_ports(2)
        self.running = [await asyncio.to_thread(self._start, i, port)
                        for i, port in enumerate(ports)]
        self._server = await asyncio.start_server(self._forward, "127.0.0.1",
                                                  self.tb.ports["hooks"])
        self._tasks = [asyncio.create_task(self._probe()), asyncio.create_task(self._supervise())]

    def _start(self, index: int, hooks_port: int) -> RunningScheduler:
        return start_scheduler(self.tb, name=self.name, hooks_port=hooks_port,
                               log_name=f"{self.name}-{index}", extra=[*ELECTION, *self.extra])

    def leader(self) -> RunningScheduler:
        """The replica that leads now (the first one while none does)."""
        return self.running[self.leading if self.leading is not None else 0]

    async def _probe(self) -> None:
        async with httpx.AsyncClient(timeout=PROBE_EVERY) as client:
            while True:
                found = None
                for index, replica in enumerate(self.running):
                    with contextlib.suppress(httpx.HTTPError):
                        r = await client.get(replica.url("health") + "/readyz")
                        if r.status_code == 200 and not r.text.startswith("standby"):
                            found = index
                self.leading = found
                await asyncio.sleep(PROBE_EVERY)

    async def _supervise(self) -> None:
        while True:
            for index, replica in enumerate(self.running):
                if replica.process.poll() is not None:
                    restarted = time.monotonic()
                    self.running[index] = await asyncio.to_thread(
                        self._start, index, replica.ports["hooks"])
                    self.ready_after.append(round(time.monotonic() - restarted, 1))
            await asyncio.sleep(PROBE_EVERY)

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
                       ) -> None:
        leading = self.leading
        try:
            if leading is None:
                raise OSError("no replica leads")  # refused, as by a Service without endpoints
            up_reader, up_writer = await asyncio.open_connection(
                "127.0.0.1", self.running[leading].ports["hooks"])
        except OSError:
            writer.close()
            return
        # Held here until they end: a task only a closed connection refers to is collected.
        pipes = {asyncio.create_task(_pipe(reader, up_writer)),
                 asyncio.create_task(_pipe(up_reader, writer))}
        self._pipes |= pipes
        try:
            await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in (writer, up_writer):
                w.close()
            for task in pipes:
                task.cancel()
            await asyncio.gather(*pipes, return_exceptions=True)
            self._pipes -= pipes

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Every replica stopped, and the forwarder (call :meth:`close` from the loop first)."""
        for replica in self.running:
            replica.stop(sig)

    async def close(self) -> None:
        for task in [*self._tasks, *self._pipes]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._pipes, return_exceptions=True)
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(TimeoutError):  # a long poll may still be open
                async with asyncio.timeout(5):
                    await self._server.wait_closed()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """One direction of a connection, until its end closes or fails."""
    with contextlib.suppress(OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
