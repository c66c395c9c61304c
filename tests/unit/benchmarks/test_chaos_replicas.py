"""The soak's stand-in for the chart's hook Service: each connection goes to the replica whose
readiness says it leads, none while no replica does; a replica that exited is started again.
Two small local servers per replica stand in for its probes and its hook API (sockets on
127.0.0.1, no bed)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks import chaosreplicas
from benchmarks.chaosreplicas import Replicas
from testbed.scheduler import RunningScheduler


class Replica:
    """A replica's probes (``/readyz`` says ``ok`` when it leads) and its hook API (answers
    with its own name)."""

    def __init__(self, name: str) -> None:
        self.name, self.leads = name, False
        self.servers: list[asyncio.Server] = []

    async def start(self) -> dict[str, int]:
        health = await asyncio.start_server(self._health, "127.0.0.1", 0)
        hooks = await asyncio.start_server(self._hooks, "127.0.0.1", 0)
        self.servers = [health, hooks]
        return {"health": _port(health), "hooks": _port(hooks)}

    async def _health(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        body = b"ok" if self.leads else b"standby: the other leads"
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                     % (len(body), body))
        await writer.drain()
        writer.close()

    async def _hooks(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        asked = await reader.readline()
        writer.write(f"{self.name} heard {asked.decode().strip()}\n".encode())
        await writer.drain()
        writer.close()

    def close(self) -> None:
        for server in self.servers:
            server.close()


def _port(server: asyncio.Server) -> int:
    port: int = server.sockets[0].getsockname()[1]
    return port


def _process() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


@pytest.fixture
async def replicas(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> AsyncIterator[
        tuple[Replicas, list[Replica], int]]:
    monkeypatch.setattr(chaosreplicas, "PROBE_EVERY", 0.05)
    fakes = [Replica("r0"), Replica("r1")]
    running = [RunningScheduler("s", _process(), tmp_path / "log", await f.start())
               for f in fakes]
    front = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = _port(front)
    front.close()
    await front.wait_closed()
    tb: Any = type("Bed", (), {"ports": {"hooks": port}})()
    made = Replicas(tb, "s")
    started: list[int] = []

    def start(index: int, hooks_port: int) -> RunningScheduler:
        started.append(index)
        return running[index]

    monkeypatch.setattr(made, "_start", start)
    await made.start()
    assert started == [0, 1]
    yield made, fakes, port
    await made.close()
    made.stop()
    for fake in fakes:
        fake.close()


async def ask(port: int) -> str:
    """What the replica the call reached answered ("" if it was refused)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"lock node-1\n")
        await writer.drain()
        heard = await asyncio.wait_for(reader.read(), 5)
    except ConnectionResetError:
        return ""
    finally:
        writer.close()
    return heard.decode()


async def until(check: Any) -> None:
    """Poll ``check`` (the forwarder's probe and supervisor run on their own) until true."""
    async with asyncio.timeout(5):
        while True:
            if check():
                return
            await asyncio.sleep(0.01)


async def test_each_call_goes_to_the_leader_and_none_while_no_replica_leads(
        replicas: tuple[Replicas, list[Replica], int]) -> None:
    made, (r0, r1), port = replicas
    assert await ask(port) == "", "no leader: refused at once"
    r1.leads = True
    await until(lambda: made.leading == 1)
    assert await ask(port) == "r1 heard lock node-1\n"
    assert made.leader() is made.running[1]
    r1.leads, r0.leads = False, True
    await until(lambda: made.leading == 0)
    assert await ask(port) == "r0 heard lock node-1\n"


async def test_a_replica_that_exited_is_started_again_and_its_time_to_ready_kept(
        replicas: tuple[Replicas, list[Replica], int]) -> None:
    made, _, _ = replicas
    first = made.running[0]
    first.process.kill()
    first.process.wait()
    again = RunningScheduler("s", _process(), first.log, first.ports)
    made._start = lambda index, hooks_port: again  # type: ignore[method-assign]
    await until(lambda: made.running[0] is again)
    assert len(made.ready_after) == 1 and made.running[1].process.poll() is None
