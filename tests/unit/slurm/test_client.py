"""The slurmrestd client against an HTTP-level stand-in (``httpx.MockTransport``): the requests
it sends, and what it makes of slurmrestd's answers."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from unittest import mock

import httpx
import pytest

from sunk import settings as settings_module
from sunk.settings import read_secret_file
from sunk.slurm.client import SlurmClient, SlurmError
from sunk.slurm.job import STARTED, PodIdentity, admin_comment, job_extra
from tests.mock_http import MockHttp

WHO = PodIdentity("ns", "p", "aaaa-0001", "sunk")
Handler = Callable[[httpx.Request], httpx.Response]


class Slurmrestd:
    """Answers each request with ``handler`` and keeps what was asked."""

    def __init__(self, handler: Handler | None = None) -> None:
        self.handler: Handler = handler or (lambda _: httpx.Response(200, json={}))
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.handler(request)

    def answer(self, status: int = 200, **body: Any) -> None:
        self.handler = lambda _: httpx.Response(status, json=body)

    @property
    def last(self) -> httpx.Request:
        return self.requests[-1]

    def sent(self) -> Any:
        return json.loads(self.last.content)


@pytest.fixture
def rest() -> Slurmrestd:
    return Slurmrestd()


@pytest.fixture
async def client(rest: Slurmrestd) -> AsyncIterator[SlurmClient]:
    c = SlurmClient("http://slurm.test:6820", token=lambda: "jwt-1", user="sunk",
                    transport=MockHttp(rest))
    yield c
    await c.aclose()


def refusal(status: int, *errors: dict[str, Any]) -> Handler:
    return lambda _: httpx.Response(status, json={"errors": list(errors)})


# -- submit -----------------------------------------------------------------------------------
async def test_submit_posts_the_job_and_returns_its_id(rest: Slurmrestd,
                                                       client: SlurmClient) -> None:
    rest.answer(job_id=4242, step_id="batch")
    description = {"name": "pod:ns/p", "extra": job_extra(WHO), "nodes": "1"}
    assert await client.submit(description) == 4242
    assert rest.last.method == "POST"
    assert rest.last.url == "http://slurm.test:6820/slurm/v0.0.42/job/submit"
    assert rest.sent() == {"job": description}


async def test_a_refused_submission_carries_slurms_words_and_numbers(
        rest: Slurmrestd, client: SlurmClient) -> None:
    rest.handler = refusal(500, {"description": "Batch job submission failed",
                                 "error": "Invalid node name specified", "error_number": 2018})
    with pytest.raises(SlurmError) as caught:
        await client.submit({"name": "x"})
    error = caught.value
    assert error.status == 500 and error.numbers == (2018,)
    assert error.slurm_message == "Batch job submission failed: Invalid node name specified"
    assert str(error) == ("POST /job/submit: 500 Batch job submission failed: "
                          "Invalid node name specified")
    assert error.permanent  # 5xx, yet asking again gets the same answer


async def test_a_busy_slurm_is_not_a_permanent_refusal(rest: Slurmrestd,
                                                       client: SlurmClient) -> None:
    rest.handler = refusal(500, {"error": "Requested nodes are busy", "error_number": 2016})
    with pytest.raises(SlurmError) as caught:
        await client.submit({"name": "x"})
    assert caught.value.numbers == (2016,) and not caught.value.permanent


async def test_errors_in_a_200_answer_are_errors(rest: Slurmrestd, client: SlurmClient) -> None:
    rest.handler = refusal(200, {"error": "Invalid account", "error_number": 2045},
                           {"error": "Invalid qos specification", "error_number": 2066})
    with pytest.raises(SlurmError) as caught:
        await client.submit({"name": "x"})
    error = caught.value
    assert error.status == 200 and error.numbers == (2045, 2066) and error.permanent
    assert error.slurm_message == "Invalid account; Invalid qos specification"


async def test_an_error_without_json_says_what_came_back(rest: Slurmrestd,
                                                         client: SlurmClient) -> None:
    rest.handler = lambda _: httpx.Response(401, text="  Authentication failure \n")
    with pytest.raises(SlurmError) as caught:
        await client.submit({"name": "x"})
    assert caught.value.status == 401 and caught.value.numbers == ()
    assert caught.value.slurm_message == "Authentication failure"
    assert not caught.value.permanent
    rest.handler = lambda _: httpx.Response(503)
    with pytest.raises(SlurmError) as caught:
        await client.submit({"name": "x"})
    assert caught.value.slurm_message == "Service Unavailable" and not caught.value.permanent


def test_slurm_error_is_permanent_only_when_slurm_answered_with_such_numbers() -> None:
    assert SlurmError("refused", status=500, numbers=(2018,)).permanent
    assert SlurmError("refused", status=400, numbers=(2045, 2066)).permanent
    assert not SlurmError("unreachable", status=0, numbers=(2018,)).permanent
    assert not SlurmError("busy", status=500, numbers=(2016,)).permanent
    assert not SlurmError("no numbers", status=500).permanent
    error = SlurmError("POST /job/submit: 500 x", status=500)
    assert error.slurm_message == "POST /job/submit: 500 x" and not error.permanent
    assert SlurmError("m", status=400, slurm_message="Invalid QOS").slurm_message == "Invalid QOS"


# -- reading jobs -----------------------------------------------------------------------------
def slurm_job(job_id: int, state: str = "RUNNING", extra: str = "", **more: Any) -> dict[str, Any]:
    return {"job_id": job_id, "name": f"job-{job_id}", "job_state": [state], "extra": extra,
            "nodes": "h100-000", "state_reason": "None", **more}


async def test_job_reads_one_job_with_its_owner(rest: Slurmrestd, client: SlurmClient) -> None:
    rest.answer(jobs=[slurm_job(7, extra=job_extra(WHO) + STARTED,
                                admin_comment=admin_comment(WHO))])
    job = await client.job(7)
    assert rest.last.method == "GET" and rest.last.url.path == "/slurm/v0.0.42/job/7"
    assert job is not None and job.job_id == 7 and job.state == "RUNNING"
    assert job.owner == WHO and job.started and job.admin_comment == admin_comment(WHO)
    assert job.raw["name"] == "job-7"


@pytest.mark.parametrize("answer", [
    httpx.Response(404, json={"errors": [{"error": "not found"}]}),
    httpx.Response(500, json={"errors": [{"description": "Failed to find job",
                                          "error": "Invalid job id specified",
                                          "error_number": 2017}]}),
    httpx.Response(200, json={"jobs": []}),
    httpx.Response(200, json={}),
])
async def test_a_job_slurm_no_longer_knows_is_none(rest: Slurmrestd, client: SlurmClient,
                                                   answer: httpx.Response) -> None:
    rest.handler = lambda _: answer
    assert await client.job(7) is None


async def test_other_errors_reading_a_job_are_raised(rest: Slurmrestd,
                                                     client: SlurmClient) -> None:
    rest.handler = refusal(500, {"error": "Unable to contact slurm controller",
                                 "error_number": 1007})
    with pytest.raises(SlurmError) as caught:
        await client.job(7)
    assert caught.value.status == 500 and caught.value.numbers == (1007,)


async def test_all_jobs_reads_every_job_in_full(rest: Slurmrestd, client: SlurmClient) -> None:
    rest.answer(jobs=[slurm_job(1, extra=job_extra(WHO)),
                      slurm_job(2, "COMPLETED", extra="someone's notes")])
    jobs = await client.all_jobs()
    assert rest.last.url.path == "/slurm/v0.0.42/jobs/"
    assert [(j.job_id, j.state, j.owner, j.started, j.finished) for j in jobs] == [
        (1, "RUNNING", WHO, False, False), (2, "COMPLETED", None, False, True)]
    rest.answer(jobs=None)
    assert await client.all_jobs() == []


async def test_job_states_is_the_cheap_listing(rest: Slurmrestd, client: SlurmClient) -> None:
    rest.answer(jobs=[{"job_id": 1, "state": ["RUNNING", "COMPLETING"]},
                      {"job_id": "2", "state": ["PENDING"]},
                      {"job_id": 3},  # no state: unknown
                      {"job_id": 4, "state": []},
                      {"state": ["RUNNING"]},  # no id: skipped
                      {"job_id": "x", "state": ["RUNNING"]},
                      {"job_id": None, "state": ["RUNNING"]},
                      "not a job"])
    assert await client.job_states() == {1: "RUNNING", 2: "PENDING", 3: "UNKNOWN",
                                         4: "UNKNOWN"}
    assert rest.last.method == "GET" and rest.last.url.path == "/slurm/v0.0.42/jobs/state/"
    rest.answer()
    assert await client.job_states() == {}


async def test_a_clean_job_state_listing_is_read_whole(rest: Slurmrestd,
                                                       client: SlurmClient) -> None:
    # slurmrestd 24.11 writes the ids as strings
    rest.answer(jobs=[{"job_id": str(n), "state": ["RUNNING"], "extra_field": {"a": 1}}
                      for n in range(1, 2001)] + [{"job_id": 2001, "state": []}])
    with mock.patch.object(SlurmClient, "_checked", side_effect=AssertionError("read slowly")):
        states = await client.job_states()
    assert len(states) == 2001 and states[1] == states[2000] == "RUNNING"
    assert states[2001] == "UNKNOWN"


# -- changing jobs and nodes ------------------------------------------------------------------
async def test_cancel_deletes_the_job(rest: Slurmrestd, client: SlurmClient) -> None:
    await client.cancel(7)
    assert rest.last.method == "DELETE" and rest.last.url.path == "/slurm/v0.0.42/job/7"


@pytest.mark.parametrize("answer", [
    httpx.Response(404),
    httpx.Response(500, json={"errors": [{"error": "Invalid job id specified"}]}),
    httpx.Response(500, json={"errors": [{"error": "Job/step already completed"}]}),
])
async def test_cancelling_a_job_that_is_gone_is_done(rest: Slurmrestd, client: SlurmClient,
                                                     answer: httpx.Response) -> None:
    rest.handler = lambda _: answer
    await client.cancel(7)


async def test_a_refused_cancel_is_raised(rest: Slurmrestd, client: SlurmClient) -> None:
    rest.handler = refusal(403, {"error": "Access/permission denied", "error_number": 2002})
    with pytest.raises(SlurmError) as caught:
        await client.cancel(7)
    assert caught.value.status == 403


async def test_a_cancel_that_never_reached_slurmctld_is_raised_as_such(
        rest: Slurmrestd, client: SlurmClient) -> None:
    """Slurm 24.11 to 26.05 answer any failed round trip of a cancel to slurmctld as "Operation
    not permitted" (error 1): a retry, not a refusal, and the message says so."""
    rest.handler = refusal(500, {"description": "Signal request failed",
                                 "error": "Operation not permitted", "error_number": 1})
    with pytest.raises(SlurmError) as caught:
        await client.cancel(7)
    assert caught.value.status == 500 and not caught.value.permanent
    assert "did not get slurmctld's answer" in str(caught.value)
    assert "refused nothing" in str(caught.value)


async def test_update_node_posts_its_fields(rest: Slurmrestd, client: SlurmClient) -> None:
    await client.update_node("h100-000", {"state": ["DRAIN"], "reason": "sunk"})
    assert rest.last.method == "POST" and rest.last.url.path == "/slurm/v0.0.42/node/h100-000"
    assert rest.sent() == {"state": ["DRAIN"], "reason": "sunk"}
    rest.handler = refusal(400, {"error": "Invalid node name specified", "error_number": 2018})
    with pytest.raises(SlurmError) as caught:
        await client.update_node("nope", {"state": ["DRAIN"]})
    assert caught.value.permanent


async def test_nodes(rest: Slurmrestd, client: SlurmClient) -> None:
    rest.answer(nodes=[{"name": "h100-000", "state": ["IDLE"]}])
    assert await client.nodes() == [{"name": "h100-000", "state": ["IDLE"]}]
    assert rest.last.url.path == "/slurm/v0.0.42/nodes/"
    rest.answer()
    assert await client.nodes() == []


# -- who is asking ----------------------------------------------------------------------------
async def test_every_call_sends_the_user_and_the_token(rest: Slurmrestd,
                                                       client: SlurmClient) -> None:
    rest.answer(job_id=1, jobs=[], nodes=[])
    await client.submit({})
    await client.job_states()
    await client.cancel(1)
    for request in rest.requests:
        assert request.headers["X-SLURM-USER-NAME"] == "sunk"
        assert request.headers["X-SLURM-USER-TOKEN"] == "jwt-1"


async def test_the_token_is_asked_for_on_every_call(rest: Slurmrestd) -> None:
    tokens = iter(["jwt-1", "jwt-2"])
    client = SlurmClient("http://slurm.test", token=lambda: next(tokens), version="v0.0.41",
                         transport=MockHttp(rest))
    try:
        await client.nodes()
        await client.nodes()
    finally:
        await client.aclose()
    assert [r.headers["X-SLURM-USER-TOKEN"] for r in rest.requests] == ["jwt-1", "jwt-2"]
    assert rest.last.headers["X-SLURM-USER-NAME"] == "root"  # the default user
    assert rest.last.url.path == "/slurm/v0.0.41/nodes/"


async def test_a_rotated_token_file_takes_effect_without_a_restart(
        rest: Slurmrestd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings_module, "SECRET_FILE_TTL", 0)
    path = tmp_path / "token"
    path.write_text("jwt-old\n")
    client = SlurmClient("http://slurm.test", token=lambda: read_secret_file(path),
                         transport=MockHttp(rest))
    try:
        await client.nodes()
        path.write_text("jwt-new\n")
        await client.nodes()
    finally:
        await client.aclose()
    assert [r.headers["X-SLURM-USER-TOKEN"] for r in rest.requests] == ["jwt-old", "jwt-new"]


# -- unreachable ------------------------------------------------------------------------------
async def test_unreachable_is_status_zero(rest: Slurmrestd, client: SlurmClient) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    rest.handler = refuse
    with pytest.raises(SlurmError) as caught:
        await client.submit({"name": "x"})
    error = caught.value
    assert error.status == 0 and not error.permanent and error.numbers == ()
    assert not error.permanent
    assert "slurmrestd unreachable" in str(error)


async def test_unreachable_over_a_real_connection_is_status_zero() -> None:
    """The product's own transport (aiohttp's connections): a port nothing listens on."""
    client = SlurmClient("http://127.0.0.1:1", token=lambda: "t", timeout=5)
    try:
        with pytest.raises(SlurmError) as caught:
            await client.job_states()
    finally:
        await client.aclose()
    assert caught.value.status == 0 and not caught.value.permanent


async def test_all_jobs_keeps_the_fields_it_reads_and_skips_unusable_records(
        rest: Slurmrestd, client: SlurmClient, caplog: pytest.LogCaptureFixture) -> None:
    full = slurm_job(1, extra=job_extra(WHO))
    full.update(account="research", qos="low", batch_host="n1", environment=["A=1"])
    rest.answer(jobs=[full, {"name": "no id"}, {"job_id": "x"}])
    [job] = await client.all_jobs()
    assert (job.job_id, job.raw["account"], job.raw["qos"]) == (1, "research", "low")
    assert "batch_host" not in job.raw and "environment" not in job.raw
    assert caplog.text.count("without a usable job_id") == 2
    rest.answer(jobs=[full, "not a record"])  # odd parts: read field by field
    assert [j.job_id for j in await client.all_jobs()] == [1]


async def test_job_keeps_the_fields_it_reads_whatever_else_the_record_says(
        rest: Slurmrestd, client: SlurmClient) -> None:
    full = slurm_job(7, extra=job_extra(WHO), admin_comment=admin_comment(WHO))
    full.update(account="research", qos="low", batch_host="n1", environment=["A=1"])
    rest.answer(jobs=[full])
    job = await client.job(7)
    assert job is not None and (job.job_id, job.owner, job.admin_comment) == (
        7, WHO, admin_comment(WHO))
    assert (job.raw["account"], job.raw["qos"]) == ("research", "low")
    assert "batch_host" not in job.raw and "environment" not in job.raw
    rest.answer(jobs=[full, "not a record"])  # odd parts: read as plain JSON
    job = await client.job(7)
    assert job is not None and job.owner == WHO and job.raw["account"] == "research"


# -- heterogeneous jobs -----------------------------------------------------------------------
def _het(job_id: int, leader: int, nodes: str) -> dict[str, Any]:
    return slurm_job(job_id, nodes=nodes, het_job_id={"set": True, "number": leader},
                     het_job_offset={"set": True, "number": job_id - leader})


async def test_a_heterogeneous_job_is_submitted_as_its_components(rest: Slurmrestd,
                                                                   client: SlurmClient) -> None:
    rest.answer(job_id=30, step_id="batch")
    first, second = {"name": "gang:ns/g", "nodes": "1"}, {"name": "gang:ns/g", "nodes": "2"}
    assert await client.submit(first, (second,)) == 30
    assert rest.sent() == {"jobs": [first, second]}


async def test_a_component_is_read_as_its_leader_with_every_components_nodes(
        rest: Slurmrestd, client: SlurmClient) -> None:
    records = {30: [_het(30, 30, "c1"), _het(31, 30, "g[1-2]")], 31: [_het(31, 30, "g[1-2]")]}
    rest.handler = lambda request: httpx.Response(
        200, json={"jobs": records[int(request.url.path.rsplit("/", 1)[1])]})
    for asked in (30, 31):
        job = await client.job(asked)
        assert job is not None and job.job_id == 30
        assert job.nodes == "c1,g[1-2]" and job.components == ("c1", "g[1-2]")
    assert [r.url.path.rsplit("/", 1)[1] for r in rest.requests] == ["30", "31", "30"]


async def test_all_jobs_folds_components_into_their_leader(rest: Slurmrestd,
                                                           client: SlurmClient) -> None:
    rest.answer(jobs=[_het(30, 30, "c1"), _het(31, 30, "g1"), slurm_job(32)])
    assert [(j.job_id, j.components) for j in await client.all_jobs()] == [
        (30, ("c1", "g1")), (32, ())]


async def test_job_states_follow_a_heterogeneous_job_by_its_leader(rest: Slurmrestd,
                                                                   client: SlurmClient) -> None:
    # /jobs/state/ writes a component as "<its own id>+<offset>" (data_parser v0.0.42)
    listing = [{"job_id": "30+0", "state": ["RUNNING"]}, {"job_id": "31+1", "state": ["RUNNING"]},
               {"job_id": "29", "state": ["PENDING"]}]
    rest.answer(jobs=listing)
    assert await client.job_states() == {30: "RUNNING", 29: "PENDING"}
    rest.answer(jobs=[*listing, {"job_id": "x+0", "state": ["RUNNING"]}])
    assert await client.job_states() == {30: "RUNNING", 29: "PENDING"}
