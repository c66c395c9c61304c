"""Whatever a Pod's author writes, and whatever reaches the hook API, nothing is believed or
done without proof, and nothing crashes."""

from __future__ import annotations

import asyncio
import functools
import json
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

import httpx
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sunk.hooks.auth import HookKeys, HookRefused, bearer, job_owner
from sunk.hooks.routes import create_hooks_app
from sunk.http.server import Handler
from sunk.plans import ownership, translate
from sunk.plans.locking import LockState
from sunk.slurm.client import SlurmClient, SlurmError, _error_text
from tests.mock_http import MockHttp
from tests.unit.core.hookclient import Answer, hook_server, send_raw

T = TypeVar("T")
PREFIX = "sunk.coreweave.com/"
KEYS = ownership.Keys.with_prefix(PREFIX)

text_values = st.one_of(
    st.sampled_from(["", "0", "1", "5", "007", "4294967295", "12345678901", "-1", " 5", "5\n",
                     "\u00b2", "\u0661\u0662", "uid-1", "uid-2"]),
    st.from_regex(r"[0-9]{1,12}", fullmatch=True),
    st.text(max_size=40),
    # huge, and any Unicode (built by repetition: drawing 5000 characters one by one is slow)
    st.builds(lambda t, n: t * n, st.text(st.characters(codec="utf-8"), min_size=1, max_size=8),
              st.integers(200, 1000)),
)
names = st.one_of(st.sampled_from(translate.POD_ANNOTATIONS + translate.OWNED_ANNOTATIONS),
                  st.sampled_from(["prioritty", "job_id", "jobid", "pod_uid", "Rejected"]),
                  st.text(max_size=30))
annotation_keys = st.one_of(names.map(lambda n: PREFIX + n), st.text(max_size=40))


@st.composite
def pod_annotations(draw: st.DrawFn) -> tuple[dict[str, str], str, int | None,
                                              dict[int, str | None]]:
    """Annotations, the Pod's uid, the job Slurm ties to the Pod, and what Slurm said of ids."""
    uid = draw(st.one_of(st.sampled_from(["uid-1", "", "0"]), st.text(max_size=40)))
    annotations = dict(draw(st.dictionaries(annotation_keys, text_values, max_size=8)))
    # The scheduler's own keys, often, with the values that matter most: the Pod's own uid,
    # and job ids that are digits in some sense but not Slurm's (Unicode digits, too many).
    odd_ids = st.sampled_from(["\u00b2", "\u0661\u0662", "\uff15", "1" * 11, "9" * 5000])
    values = {KEYS.job_id: st.one_of(odd_ids, st.from_regex(r"[0-9]{1,10}", fullmatch=True),
                                     text_values),
              KEYS.pod_uid: st.one_of(st.just(uid), text_values),
              KEYS.rejected: text_values}
    for key, value in values.items():
        if draw(st.booleans()):
            annotations[key] = draw(value)
    proven = draw(st.none() | st.integers(1, 2**32 - 1))
    ids = st.integers(0, 2**34) | st.sampled_from([0, 1, 5, 7, 12, 4294967295])
    owners = st.one_of(st.just(ownership.GONE), st.just(ownership.NOT_OURS), st.just(uid),
                       st.text(max_size=10))
    owner_of = draw(st.dictionaries(ids, owners, max_size=4))
    raw_job = annotations.get(KEYS.job_id, "")
    if raw_job.isascii() and raw_job.isdigit() and len(raw_job) <= 10 and draw(st.booleans()):
        owner_of[int(raw_job)] = draw(owners)  # Slurm was asked about the annotated id
    return annotations, uid, proven, owner_of


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pod_annotations())
@example(({KEYS.job_id: "\u00b2", KEYS.pod_uid: "u"}, "u", None, {}))
@example(({KEYS.job_id: "\x1f" * 1000}, "u", 5, {}))
def test_ownership_believes_nothing_without_proof(
        case: tuple[dict[str, str], str, int | None, dict[int, str | None]]) -> None:
    annotations, uid, proven, owner_of = case
    result = ownership.read(annotations, uid, KEYS, proven=proven, owner_of=owner_of)
    written_for_us = annotations.get(KEYS.pod_uid) == uid
    if proven is not None:
        assert result.job_id == proven and result.check_job is None
    elif result.job_id is not None:
        # Only an id the scheduler wrote for this Pod, that Slurm ties to it or no longer has,
        # or has given to another job (then said to be lost: never taken for the Pod's job).
        assert written_for_us
        assert annotations[KEYS.job_id] == str(result.job_id).zfill(len(annotations[KEYS.job_id]))
        assert (owner_of[result.job_id] in (ownership.GONE, uid)) != bool(result.lost)
    if result.check_job is not None:
        assert proven is None and written_for_us and result.job_id is None
        assert result.check_job not in owner_of
        assert int(annotations[KEYS.job_id]) == result.check_job
    if result.rejected:
        assert written_for_us and result.rejected == annotations[KEYS.rejected]
    assert set(result.ignored) <= set(KEYS.all)
    assert set(result.write) <= set(KEYS.all)
    # Values are cut short in messages (at most 40 characters, however they print).
    assert all(len(why) < 600 for why in result.ignored.values()), result.ignored


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(annotation_keys, text_values, max_size=8),
       st.sampled_from([PREFIX, "", "x/"]))
def test_unknown_annotations_never_raises(annotations: dict[str, str], prefix: str) -> None:
    found = translate.unknown_annotations(annotations, prefix)
    for key, hint in found:
        assert key.startswith(prefix) and len(key) <= 200
        assert hint is None or hint[len(prefix):] in translate.POD_ANNOTATIONS


# -- the hook API ------------------------------------------------------------------------------
NAME = "sched"
TOKENS = ("new", "old")
JOBS = {7: "uid-7", 8: "uid-8"}  # job 9 and every other id: not ours
JOB_HOOKS = ("terminating", "started", "drain", "pod")


def _minted(job_id: int, token: str, scheduler: str = NAME) -> str:
    return HookKeys(lambda: [token]).job_credential(job_owner(scheduler, JOBS[job_id]))


#: Authorization headers, and what they may do: "node" (every hook), a job id (that job's
#: hooks), None (nothing).
LABELLED: list[tuple[str, int | str | None]] = [
    ("Bearer new", "node"), ("Bearer old", "node"), ("bearer  old ", "node"),
    (f"Bearer {_minted(7, 'old')}", 7), (f"Bearer {_minted(7, 'new')}", 7),
    (f"Bearer {_minted(8, 'new')}", 8),
    (f"Bearer {_minted(7, 'new', 'another')}", None),
    (f"Bearer {_minted(7, 'retired')}", None),
    ("Bearer sunk-job." + "0" * 64, None), ("Bearer sunk-job.", None), ("Bearer nope", None),
    ("Basic new", None), ("new", None), ("", None), (f"Bearer {_minted(7, 'new')}x", None),
    # bytes beyond ASCII (a header is bytes: the server must not choke on any of them)
    ("Bearer n\xe9w", None), ("Bearer sunk-job.\xff\x80", None),
]


def _authority(header: str | None) -> int | str | None:
    for labelled, authority in LABELLED:
        if header == labelled:
            return authority
    return "node" if header is not None and bearer(header) in TOKENS else None


class FakeScheduler:
    """Jobs 7 and 8 are ours; node "down" is an outage (503), node "n2" a mismatch (409)."""

    def __init__(self) -> None:
        self.ready = asyncio.Event()
        self.ready.set()
        self.calls: list[tuple[str, int]] = []
        self.outages = 0

    scheduler_name = NAME

    def job_owner(self, job_id: int) -> str | None:
        uid = JOBS.get(job_id)
        return None if uid is None else job_owner(NAME, uid)

    async def read_job(self, job_id: int) -> None:
        """Slurm has no job of ours the table does not know."""
        self.calls.append(("read", job_id))

    def _answer(self, hook: str, job_id: int, node: str) -> tuple[str, bool] | None:
        self.calls.append((hook, job_id))
        if node == "down":
            self.outages += 1
            raise HookRefused(503, "Slurm did not answer", retry_after=5)
        if node == "n2":
            raise HookRefused(409, f"Slurm runs job {job_id} on n1, not on n2")
        return (f"ns/p{job_id}", False) if job_id in JOBS else None

    async def job_terminating(self, job_id: int, node: str) -> tuple[str, bool] | None:
        return self._answer("terminating", job_id, node)

    async def wait_pod_gone(self, job_id: int, within: float) -> tuple[str, bool] | None:
        return self._answer("pod", job_id, "down" if within == 13 else "n1")

    async def drain_for_job(self, job_id: int, node: str) -> tuple[str, bool] | None:
        return self._answer("drain", job_id, node)

    async def job_started(self, job_id: int, node: str) -> tuple[str, bool] | None:
        return self._answer("started", job_id, node)

    async def request_lock(self, node: str, job_id: int, strict: bool,
                           within: float) -> LockState | None:
        self.calls.append(("lock", job_id))
        if node == "down":
            self.outages += 1
            raise HookRefused(503, "the API server did not answer", retry_after=5)
        return LockState.LOCKED if node == "n1" else None


@functools.cache
def _hooks() -> tuple[Handler, FakeScheduler]:
    fake = FakeScheduler()
    return create_hooks_app(fake, keys=HookKeys(lambda: TOKENS), locks=fake), fake


json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
json_values = st.recursive(
    json_scalars,
    lambda children: (st.lists(children, max_size=4)
                      | st.dictionaries(st.text(max_size=10), children, max_size=4)),
    max_leaves=12)


def mostly(plausible: st.SearchStrategy[T], anything: st.SearchStrategy[T]) -> st.SearchStrategy[T]:
    """``plausible`` three times in four: a request must get past the door (credential, path,
    body) to test what lies behind it, and random parts rarely all do."""
    return st.integers(0, 3).flatmap(lambda i: anything if i == 0 else plausible)


nodes = st.one_of(st.sampled_from(["n1", "n2", "down", "zz", "", "a b", "x" * 300, "n1\n"]),
                  st.text(max_size=20))
job_ids = mostly(
    st.sampled_from(["7", "8", "9", "07", "%37"]),
    st.one_of(st.sampled_from(["0", "-1", "-7", "+7", "7.0", "x", "", "4294967295",
                               "4294967296", "1" * 30, "9" * 5000]),
              st.integers(-(2**70), 2**70).map(str),
              st.text(max_size=12).map(lambda t: quote(t, safe=""))))
bodies = st.one_of(
    st.none(),
    st.builds(lambda node: {"node": node}, nodes),
    st.fixed_dictionaries({"job_id": st.one_of(st.integers(-5, 2**40), json_values)},
                          optional={"strict": st.one_of(st.booleans(), json_values)}),
    json_values,
    st.binary(max_size=50))
job_bodies = mostly(st.sampled_from(["n1", "n2", "down"]).map(lambda n: {"node": n}), bodies)
lock_bodies = mostly(st.fixed_dictionaries({"job_id": st.integers(1, 10)},
                                           optional={"strict": st.booleans()}), bodies)
lock_nodes = mostly(st.sampled_from(["n1", "down", "zz"]), nodes)
waits = mostly(
    st.sampled_from([None, "0", "13", "30"]),
    st.one_of(st.sampled_from(["1", "31", "-1", "nan", "inf", "-0", "", "abc", "1e400", "0x10"]),
              st.floats().map(str), st.text(max_size=10)))
headers = mostly(
    st.sampled_from([h for h, authority in LABELLED if authority is not None]),
    st.one_of(st.none(), st.sampled_from([h for h, authority in LABELLED if authority is None]),
              st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF), max_size=80)))


@st.composite
def hook_requests(draw: st.DrawFn) -> tuple[str, str, Any, str | None, str | None]:
    """(method, path, body, wait, Authorization)"""
    hook = draw(st.sampled_from([*JOB_HOOKS, "lock"]))
    if hook == "lock":
        path = f"/hooks/v1/nodes/{quote(draw(lock_nodes), safe='') or 'n1'}/lock"
        body = draw(lock_bodies)
    else:
        path = f"/hooks/v1/jobs/{draw(job_ids)}/{hook}"
        body = draw(job_bodies)
    method = "GET" if hook == "pod" else "POST"
    if draw(st.integers(0, 9)) == 0:
        method = draw(st.sampled_from(["GET", "POST", "PUT", "DELETE"]))
    return method, path, body, draw(waits), draw(headers)


async def _send(port: int, method: str, path: str, body: Any, wait: str | None,
                authorization: str | None) -> Answer:
    """As bytes on a socket: the header's bytes as drawn (an HTTP client would refuse some)."""
    target = path if wait is None else f"{path}?{urlencode({'wait': wait})}"
    sent: list[tuple[bytes, bytes]] = []
    if authorization is not None:
        sent.append((b"Authorization", authorization.encode("latin-1")))
    if isinstance(body, bytes):
        return await send_raw(port, method, target, sent, body)
    if body is None:
        return await send_raw(port, method, target, sent)
    return await send_raw(port, method, target, [*sent, (b"Content-Type", b"application/json")],
                          json.dumps(body).encode())


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(hook_requests(), min_size=1, max_size=4))
async def test_hook_calls_never_crash_and_never_act_without_the_right_credential(
        requests: list[tuple[str, str, Any, str | None, str | None]]) -> None:
    app, fake = _hooks()
    async with hook_server(app) as port:
        for method, path, body, wait, authorization in requests:
            fake.calls.clear()
            outages = fake.outages
            r = await _send(port, method, path, body, wait, authorization)
            authority = _authority(authorization)
            said = (method, path, body, wait, authorization, r.status_code, r.text[:300])
            if r.status_code >= 500:
                assert r.status_code == 503 and fake.outages > outages, said
                assert r.headers["retry-after"] == "5", said
            assert r.status_code != 429, said  # one call at a time
            # Whatever the scheduler was asked to do, the caller was allowed to ask it.
            for hook, job_id in fake.calls:
                assert authority == "node" or (hook != "lock" and authority == job_id), said
            if r.status_code == 200:
                assert len(fake.calls) == 1, said
                hook, job_id = fake.calls[0]
                assert hook == "lock" or job_id in JOBS, said
            elif r.status_code in (401, 403, 404, 409):
                assert isinstance(r.json()["detail"], str) and r.json()["detail"], said
            if r.status_code == 401:
                assert authority is None and fake.calls == [], said


async def test_the_fuzzed_hook_api_gives_every_answer() -> None:
    """The fake and the credentials above are not all refused at the door: each answer the
    fuzz test checks is reachable with them."""
    app, _ = _hooks()
    seen = set()
    async with hook_server(app) as port:
        for request in [
            ("POST", "/hooks/v1/jobs/7/started", {"node": "n1"}, None, LABELLED[3][0]),
            ("POST", "/hooks/v1/jobs/8/started", {"node": "n1"}, None, LABELLED[3][0]),
            ("POST", "/hooks/v1/jobs/9/drain", {"node": "n1"}, None, "Bearer new"),
            ("POST", "/hooks/v1/jobs/7/drain", {"node": "n2"}, None, "Bearer new"),
            ("GET", "/hooks/v1/jobs/7/pod", None, "13", "Bearer old"),
            ("POST", "/hooks/v1/nodes/down/lock", {"job_id": 1}, None, "Bearer old"),
            ("POST", "/hooks/v1/nodes/n1/lock", {"job_id": 1}, "x", "Bearer old"),
            ("POST", "/hooks/v1/nodes/n1/lock", {"job_id": 1}, None, "Bearer nope"),
        ]:
            seen.add((await _send(port, *request)).status_code)
    assert seen == {200, 400, 401, 403, 404, 409, 503}


# -- Slurm's error messages ----------------------------------------------------------------------
error_dicts = st.dictionaries(
    st.one_of(st.sampled_from(["description", "error", "error_number", "source"]),
              st.text(max_size=10)),
    json_values, max_size=6)


@settings(max_examples=200, deadline=None)
@given(error_dicts)
def test_slurm_error_text_never_raises(error: dict[str, Any]) -> None:
    said = _error_text(error)
    assert isinstance(said, str) and said
    for key in ("description", "error"):
        if isinstance(error.get(key), str) and error[key].strip():
            assert error[key].strip() in said


def test_slurm_error_text_joins_the_summary_and_the_reason_once() -> None:
    assert _error_text({"description": "Batch job submission failed",
                        "error": "Invalid node name specified", "error_number": 2018}) == (
        "Batch job submission failed: Invalid node name specified")
    assert _error_text({"description": "same", "error": " same "}) == "same"
    assert _error_text({"error_number": 5}) == "{'error_number': 5}"


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.integers(200, 599), st.one_of(
    st.fixed_dictionaries({"errors": st.one_of(st.lists(error_dicts, max_size=3),
                                               json_values)}),
    json_values.map(lambda v: {"anything": v}),
    json_values))
async def test_slurm_answers_are_a_body_or_a_slurm_error(status: int, body: Any) -> None:
    """Whatever slurmrestd answers, a call returns its body or raises SlurmError: never
    another exception (callers catch SlurmError alone)."""
    def answer(_: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=json.dumps(body).encode())

    client = SlurmClient("http://slurm.invalid", token=lambda: "t",
                         transport=MockHttp(answer))
    try:
        got = await client._call("GET", "/ping/", "GET /ping/")
    except SlurmError as exc:
        errors = body.get("errors") if isinstance(body, dict) else None
        listed = [e for e in errors if isinstance(e, dict)] if isinstance(errors, list) else []
        assert status >= 400 or listed
        assert exc.status == status and exc.slurm_message
        assert all(isinstance(n, int) and n >= 0 for n in exc.numbers)
    else:
        assert status < 400 and isinstance(got, dict)
    finally:
        await client.aclose()


async def test_odd_error_numbers_are_not_numbers() -> None:
    body = {"errors": [{"error_number": "\u00b2", "error": "a"},
                       {"error_number": "9" * 5000, "error": "b"},
                       {"error_number": 2018, "error": "Invalid node name specified"},
                       {"error_number": "2045", "error": "Invalid account"}]}

    def answer(_: httpx.Request) -> httpx.Response:
        return httpx.Response(500, json=body)

    client = SlurmClient("http://slurm.invalid", token=lambda: "t",
                         transport=MockHttp(answer))
    try:
        await client._call("POST", "/job/submit", "POST /job/submit")
    except SlurmError as exc:
        assert exc.numbers == (2018, 2045) and exc.permanent
        assert exc.slurm_message.endswith("Invalid node name specified; Invalid account")
    else:
        raise AssertionError("a 500 with errors must raise")
    finally:
        await client.aclose()
