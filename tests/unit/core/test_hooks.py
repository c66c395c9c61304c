"""The hook API's contract: who may call what (node secret vs a job's own credential), input
checks, 404s, the scheduler's refusals passed on, and the in-flight bound."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Iterator, Sequence

import httpx
import pytest

from sunk.hooks.auth import HookKeys, HookRefused, job_owner
from sunk.hooks.inflight import waiting
from sunk.hooks.routes import MAX_BODY, create_hooks_app
from sunk.http.server import Handler
from sunk.plans.locking import LockState
from sunk.runtime.servers import serve_hooks
from testbed.procs import free_ports
from tests.unit.core.hookclient import Answer, HookClient, hook_client, port_of, send_raw

NAME = "sched"
TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
#: The jobs of this scheduler, and the uid of the Pod each is for. Job 9 exists nowhere.
JOBS = {7: "uid-7", 8: "uid-8"}
#: The hooks a placeholder job calls, as (method, path under /hooks/v1/jobs/<id>/).
JOB_HOOKS = [("POST", "terminating"), ("POST", "started"), ("POST", "drain"), ("GET", "pod")]
LOCK = "/hooks/v1/nodes/n1/lock"


def keys(*tokens: str) -> HookKeys:
    return HookKeys(lambda: tokens)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def credential(job_id: int, *, tokens: Sequence[str] = (TOKEN,), scheduler: str = NAME) -> str:
    """The credential the scheduler hands job ``job_id`` at submit time."""
    return HookKeys(lambda: tokens).job_credential(job_owner(scheduler, JOBS[job_id]))


class Scheduler:
    """The scheduler's answers, as plain data (what the hook API asks of it)."""

    scheduler_name = NAME

    def __init__(self) -> None:
        self.ready = asyncio.Event()
        self.ready.set()
        self.calls: list[tuple[str, int]] = []
        #: Jobs of ours that Slurm has and the job table does not know yet (or any more),
        #: learned by read_job; and whether Slurm answers that read.
        self.in_slurm_only: dict[int, str] = {}
        self.slurm_down = False
        #: Raised by every job hook while set (what the real scheduler raises on a mismatch
        #: with Slurm, or an outage).
        self.refusal: HookRefused | None = None
        self.release = asyncio.Event()
        self.block = False
        #: Whether a blocked long poll waits as the cluster's does (not counted as at work).
        self.block_waiting = False

    def job_owner(self, job_id: int) -> str | None:
        uid = JOBS.get(job_id)
        return None if uid is None else job_owner(NAME, uid)

    async def read_job(self, job_id: int) -> None:
        self.calls.append(("read", job_id))
        if self.slurm_down:
            raise HookRefused(503, f"reading job {job_id}: Slurm did not answer",
                              retry_after=5)
        if job_id in self.in_slurm_only:
            JOBS[job_id] = self.in_slurm_only.pop(job_id)

    def _answer(self, hook: str, job_id: int) -> tuple[str, bool] | None:
        self.calls.append((hook, job_id))
        if self.refusal is not None:
            raise self.refusal
        return (f"ns/p{job_id}", hook == "pod") if job_id in JOBS else None

    async def job_terminating(self, job_id: int, node: str) -> tuple[str, bool] | None:
        return self._answer("terminating", job_id)

    async def wait_pod_gone(self, job_id: int, within: float) -> tuple[str, bool] | None:
        if self.block:
            with waiting() if self.block_waiting else contextlib.nullcontext():
                await self.release.wait()
        return self._answer("pod", job_id)

    async def drain_for_job(self, job_id: int, node: str) -> tuple[str, bool] | None:
        return self._answer("drain", job_id)

    async def job_started(self, job_id: int, node: str) -> tuple[str, bool] | None:
        return self._answer("started", job_id)


class Locks:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int, bool]] = []
        self.refusal: HookRefused | None = None

    async def request_lock(self, node: str, job_id: int, strict: bool,
                           within: float) -> LockState | None:
        self.calls.append((node, job_id, strict))
        if self.refusal is not None:
            raise self.refusal
        return LockState.LOCKED_STRICT if node == "n1" else None


async def call(client: HookClient, method: str, hook: str, job_id: int,
               headers: dict[str, str]) -> Answer:
    url = f"/hooks/v1/jobs/{job_id}/{hook}"
    if method == "GET":
        return await client.get(url, headers=headers)
    return await client.post(url, json={"node": "n1"}, headers=headers)


async def test_the_node_secret_may_call_every_hook_for_any_job() -> None:
    scheduler, locks = Scheduler(), Locks()
    app = create_hooks_app(scheduler, keys=keys(TOKEN), locks=locks)
    async with hook_client(app) as client:
        for job_id in JOBS:
            for method, hook in JOB_HOOKS:
                r = await call(client, method, hook, job_id, AUTH)
                assert r.status_code == 200, (hook, job_id, r.text)
                assert r.json() == {"pod": f"ns/p{job_id}", "gone": hook == "pod"}
        lock = await client.post(LOCK, json={"job_id": 3, "strict": True}, headers=AUTH)
        assert lock.status_code == 200
        assert lock.json() == {"node": "n1", "state": "locked_strict", "locked": True}
    assert scheduler.calls == [(hook, j) for j in JOBS for _, hook in JOB_HOOKS]
    assert locks.calls == [("n1", 3, True)]


async def test_a_job_credential_calls_the_job_hooks_of_its_own_job_only() -> None:
    scheduler, locks = Scheduler(), Locks()
    app = create_hooks_app(scheduler, keys=keys(TOKEN), locks=locks)
    mine = bearer(credential(7))
    async with hook_client(app) as client:
        for method, hook in JOB_HOOKS:
            own = await call(client, method, hook, 7, mine)
            assert own.status_code == 200 and own.json()["pod"] == "ns/p7", (hook, own.text)
            other = await call(client, method, hook, 8, mine)
            assert other.status_code == 403, (hook, other.text)
            assert "not job 8's" in other.json()["detail"]
            not_ours = await call(client, method, hook, 9, mine)
            assert not_ours.status_code == 404, (hook, not_ours.text)
            assert "no such job of this scheduler: 9" in not_ours.json()["detail"]
    # Refused before the scheduler does anything for the job.
    assert scheduler.calls == [(hook, 7) for _, hook in JOB_HOOKS]


async def test_a_job_credential_may_not_lock_a_node() -> None:
    locks = Locks()
    app = create_hooks_app(Scheduler(), keys=keys(TOKEN), locks=locks)
    async with hook_client(app) as client:
        r = await client.post(LOCK, json={"job_id": 7, "strict": True},
                              headers=bearer(credential(7)))
    assert r.status_code == 403 and "node secret" in r.json()["detail"]
    assert locks.calls == []


@pytest.mark.parametrize("header", [
    None, "", "Bearer", "Bearer ", "Bearer nope", f"Basic {TOKEN}", TOKEN, f"Bearer {TOKEN}x",
    f"Bearer {TOKEN[:-1]}", f"Token {TOKEN}", f"Bearer\t{TOKEN}",
])
async def test_a_missing_or_wrong_credential_is_401(header: str | None) -> None:
    scheduler, locks = Scheduler(), Locks()
    app = create_hooks_app(scheduler, keys=keys(TOKEN), locks=locks)
    headers = {} if header is None else {"Authorization": header}
    async with hook_client(app) as client:
        for method, hook in JOB_HOOKS:
            r = await call(client, method, hook, 7, headers)
            assert r.status_code == 401, (hook, r.text)
            assert r.json()["detail"] == "missing or wrong hook credential"
        lock = await client.post(LOCK, json={"job_id": 7}, headers=headers)
        assert lock.status_code == 401
    assert scheduler.calls == [] and locks.calls == []


async def test_a_forged_job_credential_is_refused() -> None:
    """It has the prefix, so it reaches the job check, where it matches no job."""
    scheduler, locks = Scheduler(), Locks()
    app = create_hooks_app(scheduler, keys=keys(TOKEN), locks=locks)
    forged = bearer("sunk-job." + "0" * 64)
    async with hook_client(app) as client:
        for method, hook in JOB_HOOKS:
            r = await call(client, method, hook, 7, forged)
            assert r.status_code == 403, (hook, r.text)
        lock = await client.post(LOCK, json={"job_id": 7}, headers=forged)
        assert lock.status_code == 403
    assert scheduler.calls == [] and locks.calls == []


async def test_no_configured_secret_refuses_everything() -> None:
    scheduler, locks = Scheduler(), Locks()
    app = create_hooks_app(scheduler, keys=keys(), locks=locks)
    async with hook_client(app) as client:
        for headers in (AUTH, bearer(credential(7)), {}):
            r = await client.post("/hooks/v1/jobs/7/terminating", json={"node": "n1"},
                                  headers=headers)
            assert r.status_code == 503 and "no secret configured" in r.json()["detail"]
            lock = await client.post(LOCK, json={"job_id": 7}, headers=headers)
            assert lock.status_code == 503
    assert scheduler.calls == [] and locks.calls == []


async def test_the_schedulers_refusals_reach_the_caller() -> None:
    scheduler, locks = Scheduler(), Locks()
    app = create_hooks_app(scheduler, keys=keys(TOKEN), locks=locks)
    async with hook_client(app) as client:
        scheduler.refusal = HookRefused(409, "Slurm runs job 7 on n2, not on n1")
        for method, hook in JOB_HOOKS:
            r = await call(client, method, hook, 7, bearer(credential(7)))
            assert r.status_code == 409, (hook, r.text)
            assert r.json()["detail"] == "Slurm runs job 7 on n2, not on n1"
            assert "retry-after" not in r.headers
        scheduler.refusal = HookRefused(503, "reading job 7: Slurm did not answer",
                                        retry_after=5)
        for method, hook in JOB_HOOKS:
            r = await call(client, method, hook, 7, AUTH)
            assert r.status_code == 503, (hook, r.text)
            assert r.json()["detail"] == "reading job 7: Slurm did not answer"
            assert r.headers["retry-after"] == "5"
        locks.refusal = HookRefused(409, "Slurm has no job 3: no lock for it")
        lock = await client.post(LOCK, json={"job_id": 3}, headers=AUTH)
        assert lock.status_code == 409
        assert lock.json()["detail"] == "Slurm has no job 3: no lock for it"


async def test_a_starting_scheduler_or_a_missing_syncer_says_retry() -> None:
    scheduler = Scheduler()
    scheduler.ready.clear()
    app = create_hooks_app(scheduler, keys=keys(TOKEN))
    async with hook_client(app) as client:
        r = await client.post("/hooks/v1/jobs/7/started", json={"node": "n1"}, headers=AUTH)
        assert r.status_code == 503 and r.headers["retry-after"] == "2"
        lock = await client.post(LOCK, json={"job_id": 7}, headers=AUTH)
        assert lock.status_code == 503 and lock.headers["retry-after"] == "5"
        assert "syncer" in lock.json()["detail"]
    assert scheduler.calls == []


async def test_a_starting_scheduler_tells_a_placeholder_to_retry_not_that_its_job_is_gone(
        job_10_unknown: Scheduler) -> None:
    """Restarted, the scheduler has not adopted its jobs yet: a job it does not know proves
    nothing then, and a 404 would make the placeholder let its node go under its Pod."""
    scheduler = job_10_unknown
    scheduler.ready.clear()
    app = create_hooks_app(scheduler, keys=keys(TOKEN))
    async with hook_client(app) as client:
        for headers in (placeholder_of("uid-10"), bearer(credential(7))):
            for method, hook in JOB_HOOKS:
                r = await call(client, method, hook, 10, headers)
                assert r.status_code == 503, (hook, r.text)
                assert r.headers["retry-after"] == "2"
    assert scheduler.calls == [], "nothing read or answered before the jobs are adopted"


async def test_rotation_keeps_old_credentials_and_the_old_node_secret_working() -> None:
    tokens = ["old"]
    scheduler = Scheduler()
    app = create_hooks_app(scheduler, keys=HookKeys(lambda: tokens), locks=Locks())
    minted_before = credential(7, tokens=["old"])
    async with hook_client(app) as client:
        assert (await call(client, "POST", "started", 7, bearer(minted_before))).status_code == 200
        tokens[:] = ["new", "old"]  # the secret file is rotated: read again on every call
        for method, hook in JOB_HOOKS:
            r = await call(client, method, hook, 7, bearer(minted_before))
            assert r.status_code == 200, (hook, r.text)
        minted_after = credential(7, tokens=tokens)
        assert minted_after == credential(7, tokens=["new"]) != minted_before
        assert (await call(client, "GET", "pod", 7, bearer(minted_after))).status_code == 200
        for node_secret in ("old", "new"):
            lock = await client.post(LOCK, json={"job_id": 7}, headers=bearer(node_secret))
            assert lock.status_code == 200, node_secret
            r = await call(client, "POST", "drain", 8, bearer(node_secret))
            assert r.status_code == 200, node_secret
        tokens[:] = ["new"]  # the old one retired: what it minted stops working
        assert (await call(client, "GET", "pod", 7, bearer(minted_before))).status_code == 403
        assert (await call(client, "GET", "pod", 7, bearer("old"))).status_code == 401
        assert (await call(client, "GET", "pod", 7, bearer(minted_after))).status_code == 200


async def test_a_credential_for_another_scheduler_pod_or_secret_is_refused() -> None:
    scheduler = Scheduler()
    app = create_hooks_app(scheduler, keys=keys(TOKEN), locks=Locks())
    others = [
        credential(7, scheduler="another-sched"),  # same Pod uid, another scheduler's name
        HookKeys(lambda: [TOKEN]).job_credential(job_owner(NAME, "uid-9")),  # another Pod
        credential(7, tokens=["another secret"]),
    ]
    async with hook_client(app) as client:
        for other in others:
            for method, hook in JOB_HOOKS:
                r = await call(client, method, hook, 7, bearer(other))
                assert r.status_code == 403, (hook, r.text)
                assert "own job" in r.json()["detail"]
    assert scheduler.calls == []


async def test_bad_input_and_unknown_objects_are_4xx_with_a_message() -> None:
    app = create_hooks_app(Scheduler(), keys=keys(TOKEN), locks=Locks())
    async with hook_client(app) as client:
        bad = await client.post("/hooks/v1/jobs/7/terminating", json={"node": "x; rm -rf"},
                                headers=AUTH)
        assert bad.status_code == 400 and "node" in bad.text
        unknown = await client.post("/hooks/v1/jobs/9/terminating", json={"node": "n1"},
                                    headers=AUTH)
        assert unknown.status_code == 404
        assert "no such job of this scheduler" in unknown.json()["detail"]
        nolock = await client.post("/hooks/v1/nodes/zz/lock", json={"job_id": 3}, headers=AUTH)
        assert nolock.status_code == 404 and "zz" in nolock.json()["detail"]
        too_long = await client.get("/hooks/v1/jobs/7/pod?wait=999", headers=AUTH)
        assert too_long.status_code == 400
        for job_id in ("0", "-1", str(2**32)):
            r = await client.get(f"/hooks/v1/jobs/{job_id}/pod", headers=AUTH)
            assert r.status_code == 400, job_id
        not_a_number = await client.get("/hooks/v1/jobs/x/pod", headers=AUTH)
        assert not_a_number.status_code == 404


async def test_a_400_says_which_input_and_where_it_was_read() -> None:
    """The body names the call, and each refused input by name and where it was read."""
    locks = Locks()
    app = create_hooks_app(Scheduler(), keys=keys(TOKEN), locks=locks)
    async with hook_client(app) as client:
        r = await client.get("/hooks/v1/jobs/0/pod?wait=99", headers=AUTH)
        assert r.status_code == 400 and r.json() == {
            "status_code": 400, "detail": "Validation failed for GET /hooks/v1/jobs/0/pod?wait=99",
            "errors": [{"message": "Expected `int` >= 1", "key": "job_id", "source": "path"},
                       {"message": "Expected `float` <= 30.0", "key": "wait",
                        "source": "query"}]}
        r = await client.post(LOCK, json={"job_id": 0, "strict": "maybe"}, headers=AUTH)
        assert r.status_code == 400
        assert [(e["key"], e["message"]) for e in r.json()["errors"]] == [
            ("job_id", "Input should be greater than or equal to 1"),
            ("strict", "Input should be a valid boolean, unable to interpret input")]
        r = await client.post("/hooks/v1/jobs/7/started", content=b"{", headers=AUTH)
        assert r.status_code == 400 and r.json() == {
            "status_code": 400, "detail": "Input data was truncated", "errors": None}
        r = await client.post("/hooks/v1/jobs/7/started", headers=AUTH)
        assert r.status_code == 400
        assert r.json()["errors"] == [{"message": "'data'", "key": "data", "source": "body"}]
        # As lenient as ever: a job id as text or 3.0, "yes" for true.
        r = await client.post(LOCK, json={"job_id": "3", "strict": "yes"}, headers=AUTH)
        assert r.status_code == 200 and r.json()["locked"] is True
        r = await client.post(LOCK, json={"job_id": 4.0}, headers=AUTH)
        assert r.status_code == 200
    assert locks.calls == [("n1", 3, True), ("n1", 4, False)]


async def test_unknown_routes_and_methods_are_404_and_405() -> None:
    app = create_hooks_app(Scheduler(), keys=keys(TOKEN), locks=Locks())
    async with hook_client(app) as client:
        for path in ("/", "/hooks/v1/jobs/7", "/hooks/v1/jobs/7/other", "/schema/openapi.json"):
            r = await client.get(path, headers=AUTH)
            assert r.status_code == 404, path
            assert r.json() == {"status_code": 404, "detail": "Not Found", "errors": None}
        r = await client.get("/hooks/v1/jobs/7/started", headers=AUTH)
        assert r.status_code == 405 and r.headers["allow"] == "POST, OPTIONS"
        assert r.json()["detail"] == "Method Not Allowed"
        r = await client.request("DELETE", "/hooks/v1/jobs/7/pod", headers=AUTH)
        assert r.status_code == 405 and r.headers["allow"] == "GET, OPTIONS"
        # A trailing or doubled slash is the same route.
        r = await client.get("/hooks/v1//jobs/7/pod/", headers=AUTH)
        assert r.status_code == 200 and r.json()["pod"] == "ns/p7"


async def test_header_bytes_beyond_ascii_are_refused_not_a_crash() -> None:
    """A header is bytes, read as Latin-1: no byte makes a credential check fail with 500."""
    scheduler = Scheduler()
    app = create_hooks_app(scheduler, keys=keys(TOKEN), locks=Locks())
    job7 = ("Bearer " + credential(7)).encode()
    async with hook_client(app) as client:
        port = port_of(client)
        for value in (b"Bearer s3cret\xe9", b"Bearer \xff\x80", b"Bearer sunk-job.\xe9"):
            r = await send_raw(port, "GET", "/hooks/v1/jobs/7/pod", [(b"Authorization", value)])
            assert r.status_code in (401, 403), (value, r.text)
        r = await send_raw(port, "GET", "/hooks/v1/jobs/8/pod",
                           [(b"Authorization", job7), (b"X-Sunk-Pod-Uid", b"uid-7\xe9")])
        assert r.status_code == 403, r.text
    assert scheduler.calls == []


async def test_serving_on_a_taken_port_says_so() -> None:
    app = create_hooks_app(Scheduler(), keys=keys(TOKEN))
    async with hook_client(app) as client:
        taken = f"127.0.0.1:{port_of(client)}"
        with pytest.raises(OSError, match=f"could not serve on {taken} \\(address in use"):
            await serve_hooks(create_hooks_app(Scheduler(), keys=keys(TOKEN)), taken,
                              max_body=MAX_BODY)


@contextlib.asynccontextmanager
async def served(app: Handler) -> AsyncIterator[tuple[asyncio.Task[None], str]]:
    """``app`` served as the scheduler serves it (``serve_hooks``, on loopback), once it
    answers: the server's task and its URL. Stopped afterwards."""
    [port] = free_ports(1)
    server = asyncio.create_task(serve_hooks(app, f"127.0.0.1:{port}", max_body=MAX_BODY))
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(timeout=10) as probe:
            for _ in range(50):
                try:
                    await probe.get(f"{url}/hooks/v1/jobs/x/pod", headers=AUTH)
                    break
                except httpx.ConnectError:
                    await asyncio.sleep(0.1)
        yield server, url
    finally:
        server.cancel()
        await asyncio.gather(server, return_exceptions=True)


@pytest.mark.parametrize("block_waiting", [False, True])
async def test_calls_beyond_the_bound_are_told_to_retry(block_waiting: bool) -> None:
    """Calls at once, on loopback. Two long polls fill a bound of two while at work, not while
    they wait as the cluster's do (a big job starting or ending has a prolog or a placeholder
    waiting on every node)."""
    scheduler = Scheduler()
    scheduler.block, scheduler.block_waiting = True, block_waiting
    app = create_hooks_app(scheduler, keys=keys(TOKEN), max_in_flight=2)
    async with served(app) as (_, url), httpx.AsyncClient(timeout=10) as client:
        poll, started = f"{url}/hooks/v1/jobs/7/pod?wait=5", f"{url}/hooks/v1/jobs/8/started"
        polls = [asyncio.create_task(client.get(poll, headers=AUTH)) for _ in range(2)]
        await asyncio.sleep(0.3)
        extra = await client.post(started, json={"node": "n1"}, headers=AUTH)
        if block_waiting:
            assert extra.status_code == 200 and extra.json() == {"pod": "ns/p8", "gone": False}
        else:
            assert extra.status_code == 429 and extra.headers["retry-after"] == "1"
        scheduler.release.set()
        assert [(await p).json()["gone"] for p in polls] == [True, True]
        again = await client.post(started, json={"node": "n1"}, headers=AUTH)
        assert again.status_code == 200  # the bound is whole again once the polls end


async def test_a_cancelled_server_stops_listening_and_finishes_the_calls_in_flight() -> None:
    scheduler = Scheduler()
    scheduler.block = True
    app = create_hooks_app(scheduler, keys=keys(TOKEN))
    async with served(app) as (server, url), httpx.AsyncClient(timeout=10) as client:
        poll = f"{url}/hooks/v1/jobs/7/pod?wait=5"
        waiting = asyncio.create_task(client.get(poll, headers=AUTH))
        await asyncio.sleep(0.3)
        server.cancel()
        await asyncio.sleep(0.3)
        assert not server.done()  # the call in flight is not cut short
        async with httpx.AsyncClient(timeout=10) as another:
            with pytest.raises(httpx.ConnectError):
                await another.get(poll, headers=AUTH)
        scheduler.release.set()
        answered = await waiting
        assert answered.status_code == 200 and answered.json()["gone"] is True
        with pytest.raises(asyncio.CancelledError):
            await server


async def test_a_call_still_waiting_at_the_shutdown_timeout_is_cut_short() -> None:
    """A long poll (a prolog's lock waits up to 30 s) must not hold the scheduler's exit, and
    so its Lease, for the next leader: the script asks again."""
    scheduler = Scheduler()
    scheduler.block = True  # never released
    app = create_hooks_app(scheduler, keys=keys(TOKEN))
    async with served(app) as (server, url), httpx.AsyncClient(timeout=10) as client:
        polling = asyncio.create_task(client.get(f"{url}/hooks/v1/jobs/7/pod?wait=30",
                                                 headers=AUTH))
        await asyncio.sleep(0.3)
        server.cancel()
        stopping = time.monotonic()
        await asyncio.wait_for(asyncio.gather(server, return_exceptions=True), 10)
        assert time.monotonic() - stopping < 6  # the default: 5 s, well within the grace
        with pytest.raises(httpx.HTTPError):
            await asyncio.wait_for(polling, 3)


async def test_a_job_whose_id_slurm_gave_to_another_pod_is_told_to_let_go_not_refused() -> None:
    """A placeholder whose job Slurm lost finds its id now names another Pod's job: proving
    which Pod it is for (its credential and X-Sunk-Pod-Uid), it gets 404 and releases its node
    at once instead of draining it at KillWait. A claim its credential does not prove: 403."""
    scheduler = Scheduler()
    app = create_hooks_app(scheduler, keys=keys(TOKEN))
    mine = bearer(credential(7))
    async with hook_client(app) as client:
        for method, hook in JOB_HOOKS:
            lost = await call(client, method, hook, 8, {**mine, "X-Sunk-Pod-Uid": JOBS[7]})
            assert lost.status_code == 404, (hook, lost.text)
            assert "another Pod's now" in lost.json()["detail"]
            lying = await call(client, method, hook, 8, {**mine, "X-Sunk-Pod-Uid": JOBS[8]})
            assert lying.status_code == 403, (hook, lying.text)
    assert scheduler.calls == []


def placeholder_of(uid: str) -> dict[str, str]:
    """The headers a placeholder job of the Pod ``uid`` sends: its credential and its Pod."""
    return {**bearer(HookKeys(lambda: (TOKEN,)).job_credential(job_owner(NAME, uid))),
            "X-Sunk-Pod-Uid": uid}


@pytest.fixture
def job_10_unknown() -> Iterator[Scheduler]:
    """Job 10 is Pod uid-10's: Slurm has it, the job table does not (not yet learned, or
    forgotten by a relist)."""
    scheduler = Scheduler()
    scheduler.in_slurm_only = {10: "uid-10"}
    yield scheduler
    JOBS.pop(10, None)


async def test_a_job_the_table_does_not_know_is_read_from_slurm_before_any_404(
        job_10_unknown: Scheduler) -> None:
    """A 404 makes a placeholder let its node go: its own job, which the table does not know
    at that moment, is read from Slurm first, then answered as any job of ours."""
    scheduler = job_10_unknown
    app = create_hooks_app(scheduler, keys=keys(TOKEN))
    own = placeholder_of("uid-10")
    async with hook_client(app) as client:
        r = await call(client, "POST", "terminating", 10, own)
        assert r.status_code == 200, r.text
        assert r.json() == {"pod": "ns/p10", "gone": False}
        r = await call(client, "GET", "pod", 10, own)
        assert r.status_code == 200 and r.json()["pod"] == "ns/p10"
    assert scheduler.calls == [("read", 10), ("terminating", 10), ("pod", 10)], \
        "read once, then known"


async def test_slurm_not_answering_that_read_is_a_503_never_a_404(
        job_10_unknown: Scheduler) -> None:
    scheduler = job_10_unknown
    scheduler.slurm_down = True
    app = create_hooks_app(scheduler, keys=keys(TOKEN))
    own = placeholder_of("uid-10")
    async with hook_client(app) as client:
        for method, hook in JOB_HOOKS:
            r = await call(client, method, hook, 10, own)
            assert r.status_code == 503, (hook, r.text)
            assert r.headers["Retry-After"] == "5"


async def test_slurm_is_read_only_for_a_caller_that_proves_its_pod(
        job_10_unknown: Scheduler) -> None:
    """A job Slurm does not have is 404 after one read; a caller whose credential proves no
    Pod (none claimed, or another's) gets 404 with no read: anyone reaching the port cannot
    make the scheduler read Slurm."""
    scheduler = job_10_unknown
    app = create_hooks_app(scheduler, keys=keys(TOKEN))
    own = placeholder_of("uid-10")
    async with hook_client(app) as client:
        gone = await call(client, "POST", "terminating", 9, own)
        assert gone.status_code == 404
        for headers in ({k: v for k, v in own.items() if k != "X-Sunk-Pod-Uid"},
                        {**own, "X-Sunk-Pod-Uid": "uid-7"},
                        {**bearer("sunkjob-forged"), "X-Sunk-Pod-Uid": "uid-10"}):
            r = await call(client, "POST", "terminating", 10, headers)
            assert r.status_code in (401, 404), r.text
    assert scheduler.calls == [("read", 9)]


async def test_a_request_that_is_not_http_is_one_warning_line_not_a_traceback(
        caplog: pytest.LogCaptureFixture) -> None:
    """Anyone who reaches the port could otherwise fill the log with tracebacks."""
    app = create_hooks_app(Scheduler(), keys=keys(TOKEN))
    async with served(app) as (_, url):
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        with caplog.at_level(logging.DEBUG, logger="sunk.http.server"):
            writer.write(b"GET /hooks/v1/jobs/7/pod HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n")
            await writer.drain()
            answer = await asyncio.wait_for(reader.read(), 5)
            writer.close()
    assert answer.split(b" ", 2)[1] == b"400"
    [record] = [r for r in caplog.records if r.name == "sunk.http.server"]
    assert record.levelno == logging.WARNING and record.exc_info is None
    said = record.getMessage()
    assert said.startswith("invalid HTTP request from 127.0.0.1:"), said
    assert "Invalid header" in said, said
    assert "\n" not in said


async def test_a_bug_in_the_scheduler_is_a_500_and_its_traceback_and_the_api_goes_on(
        caplog: pytest.LogCaptureFixture) -> None:
    class Broken(Scheduler):
        async def job_started(self, job_id: int, node: str) -> tuple[str, bool] | None:
            raise RuntimeError("a bug")

    app = create_hooks_app(Broken(), keys=keys(TOKEN))
    with caplog.at_level(logging.ERROR, logger="sunk.http.server"):
        async with hook_client(app) as client:
            failed = await client.post("/hooks/v1/jobs/7/started", json={"node": "n1"},
                                       headers=AUTH)
            fine = await client.post("/hooks/v1/jobs/7/terminating", json={"node": "n1"},
                                     headers=AUTH)
    assert failed.status_code == 500
    assert failed.json() == {"status_code": 500, "detail": "Internal Server Error"}
    assert fine.status_code == 200
    assert any(r.exc_info and "a bug" in str(r.exc_info[1]) for r in caplog.records)
