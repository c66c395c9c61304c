"""The hook API's contract: auth, input checks, 404s and the in-flight bound."""

from __future__ import annotations

import asyncio

import httpx
from litestar.testing import AsyncTestClient

from sunk.hooks import create_hooks_app
from sunk.locking import LockState
from sunk.servers import serve
from testbed.procs import free_ports

TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


class Scheduler:
    """The scheduler's answers, as plain data (what the hook API asks of it)."""

    def __init__(self) -> None:
        self.ready = asyncio.Event()
        self.ready.set()
        self.deleted: list[int] = []
        self.release = asyncio.Event()

    async def job_terminating(self, job_id: int, node: str) -> tuple[str, bool] | None:
        if job_id != 7:
            return None
        self.deleted.append(job_id)
        return "ns/p", False

    async def wait_pod_gone(self, job_id: int, within: float) -> tuple[str, bool] | None:
        if job_id != 7:
            return None
        await self.release.wait()
        return "ns/p", True

    async def drain_for_job(self, job_id: int, node: str) -> tuple[str, bool] | None:
        return None

    async def job_started(self, job_id: int, node: str) -> tuple[str, bool] | None:
        return ("ns/p", False) if job_id == 7 else None


class Locks:
    async def request_lock(self, node: str, job_id: int, strict: bool,
                           within: float) -> LockState | None:
        return LockState.LOCKED_STRICT if node == "n1" else None


async def test_calls_need_the_token() -> None:
    app = create_hooks_app(Scheduler(), token=lambda: TOKEN, locks=Locks())
    async with AsyncTestClient(app) as client:
        r = await client.post("/hooks/v1/jobs/7/terminating", json={"node": "n1"})
        assert r.status_code == 401
        r = await client.post("/hooks/v1/jobs/7/terminating", json={"node": "n1"},
                              headers={"Authorization": "Bearer nope"})
        assert r.status_code == 401
        r = await client.post("/hooks/v1/jobs/7/terminating", json={"node": "n1"}, headers=AUTH)
        assert r.status_code == 200 and r.json() == {"pod": "ns/p", "gone": False}


async def test_no_configured_token_refuses_everything() -> None:
    app = create_hooks_app(Scheduler(), token=lambda: None)
    async with AsyncTestClient(app) as client:
        r = await client.post("/hooks/v1/jobs/7/terminating", json={"node": "n1"}, headers=AUTH)
    assert r.status_code == 503


async def test_bad_input_and_unknown_objects_are_4xx_with_a_message() -> None:
    app = create_hooks_app(Scheduler(), token=lambda: TOKEN, locks=Locks())
    async with AsyncTestClient(app) as client:
        bad = await client.post("/hooks/v1/jobs/7/terminating", json={"node": "x; rm -rf"},
                                headers=AUTH)
        assert bad.status_code == 400 and "node" in bad.text
        unknown = await client.post("/hooks/v1/jobs/8/terminating", json={"node": "n1"},
                                    headers=AUTH)
        assert unknown.status_code == 404 and "no such job" in unknown.json()["detail"]
        lock = await client.post("/hooks/v1/nodes/n1/lock", json={"job_id": 3, "strict": True},
                                 headers=AUTH)
        assert lock.json() == {"node": "n1", "state": "locked_strict", "locked": True}
        nolock = await client.post("/hooks/v1/nodes/zz/lock", json={"job_id": 3}, headers=AUTH)
        assert nolock.status_code == 404
        too_long = await client.get("/hooks/v1/jobs/7/pod?wait=999", headers=AUTH)
        assert too_long.status_code == 400


async def test_calls_beyond_the_bound_are_told_to_retry() -> None:
    """Served for real (the test client handles one request at a time), on loopback."""
    scheduler = Scheduler()
    app = create_hooks_app(scheduler, token=lambda: TOKEN, max_in_flight=2)
    [port] = free_ports(1)
    server = asyncio.create_task(serve(app, f"127.0.0.1:{port}"))
    url = f"http://127.0.0.1:{port}/hooks/v1/jobs/7/pod?wait=5"
    try:
        async with httpx.AsyncClient(timeout=10) as client:
            for _ in range(50):
                try:
                    await client.get(url.replace("7/pod?wait=5", "8/pod"), headers=AUTH)
                    break
                except httpx.ConnectError:
                    await asyncio.sleep(0.1)
            waiting = [asyncio.create_task(client.get(url, headers=AUTH)) for _ in range(2)]
            await asyncio.sleep(0.3)
            extra = await client.get(url, headers=AUTH)
            assert extra.status_code == 429 and extra.headers["retry-after"] == "1"
            scheduler.release.set()
            assert [(await w).json()["gone"] for w in waiting] == [True, True]
    finally:
        server.cancel()
        await asyncio.gather(server, return_exceptions=True)
