"""slurmrestd: the only module that talks to Slurm.

Calls are small and few on the hot path: one ``jobs/state`` listing per poll (ids and states
only), and a job's full record only where it matters (:mod:`sunk.model.jobpoll`). The full listing,
``GET /jobs/``, is read once, at start-up, to adopt jobs: its ``update_time`` filter returns
every job as soon as any one changed, and a peer project that listed every job per Pod starved
its scheduler.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import aiohttp
import msgspec

from sunk import http
from sunk.runtime import metrics
from sunk.slurm.job import READ_FIELDS, Job, gres_by_node
from sunk.slurm.text import permanent_error

log = logging.getLogger(__name__)

#: msgspec decodes slurmrestd's job listings several times faster than json does.
_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode


class _JobState(msgspec.Struct, gc=False):
    """Not tracked by the garbage collector: a poll makes one per job in the cluster."""

    #: A number, or a heterogeneous job component's ``"<id>+<offset>"``.
    job_id: int | str
    state: tuple[str, ...] = ()


def _leader_id(job_id: object) -> int | None:
    """A job id as ``/jobs/state/`` writes it: a number (or its text) is the job's; a
    heterogeneous job's component is ``"<its own id>+<offset>"``, followed through its leader
    (offset 0, which is the job's id): None for the others."""
    if isinstance(job_id, bool) or not isinstance(job_id, int | str):
        raise ValueError(f"job id {job_id!r}")
    with contextlib.suppress(ValueError):
        return int(job_id)
    own, plus, offset = str(job_id).partition("+")
    if plus and offset.strip() != "0":
        return None
    return int(own)


class _JobStates(msgspec.Struct):
    jobs: list[_JobState] = []
    errors: list[Any] = []


#: Not strict: slurmrestd writes job ids as strings here ("job_id": "1").
_decode_states = msgspec.json.Decoder(_JobStates, strict=False).decode

#: A job of the full listing, only the fields sunk reads (about 20 of its 150): the rest are
#: skipped while decoding, never built. Adopting 11,000 jobs read into dicts left the
#: scheduler at 458 MiB; the listing itself is about 18 kB a job.
_JobRecord = msgspec.defstruct("_JobRecord", [(name, Any, msgspec.UNSET) for name in READ_FIELDS])


class _JobListing(msgspec.Struct):
    jobs: list[_JobRecord] = []  # type: ignore[valid-type]
    errors: list[Any] = []


_decode_listing = msgspec.json.Decoder(_JobListing).decode


def _record(job: Any) -> dict[str, Any]:
    """A :data:`_JobRecord` as the dict :meth:`Job.from_api` reads (absent fields left out)."""
    return {name: value for name in READ_FIELDS
            if (value := getattr(job, name)) is not msgspec.UNSET}


_Listing = TypeVar("_Listing", _JobStates, _JobListing)


def _typed(r: http.Answer, decode: Callable[[bytes | bytearray], _Listing]) -> _Listing | None:
    """A listing read into typed records; None if it failed, says errors or has anything odd
    in it (then it is read as plain JSON, field by field, or its error raised)."""
    if r.is_error:
        return None
    try:
        listing = decode(r.body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return None if listing.errors else listing


def _readable(records: list[dict[str, Any]]) -> list[Job]:
    """The jobs of a listing, a heterogeneous job as its leader (:meth:`Job.folded`); a
    record without a usable job id is skipped (and logged), not a reason to fail adopting
    every other job."""
    jobs = []
    for raw in records:
        try:
            jobs.append(Job.from_api(raw))
        except (KeyError, TypeError, ValueError):
            log.warning("skipping a job record slurmrestd listed without a usable job_id: %.200r",
                        raw)
    return Job.folded(jobs)


#: The error number slurmrestd gives a cancel that never reached slurmctld, or whose answer
#: was lost (Slurm's ``slurm_kill_jobs`` returns ``send_recv(...) < 0``: 1, EPERM's number).
CANCEL_NOT_DELIVERED = 1


class SlurmError(Exception):
    """slurmrestd answered with an error (``status`` 0: it could not be reached).

    ``slurm_message`` is Slurm's own text (what slurmctld said, not only slurmrestd's summary),
    for Events; ``numbers`` are Slurm's error numbers (slurm_errno.h)."""

    def __init__(self, message: str, *, status: int = 0, slurm_message: str = "",
                 numbers: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.status = status
        self.slurm_message = slurm_message or message
        self.numbers = numbers

    @property
    def permanent(self) -> bool:
        """Slurm refused the request as it stands: asking again gets the same answer."""
        return self.status != 0 and permanent_error(list(self.numbers))


def _error_text(error: dict[str, Any]) -> str:
    """slurmrestd's summary and slurmctld's reason: "Batch job submission failed: Invalid node
    name specified" (the summary alone hides what was wrong)."""
    parts = [str(error.get(k) or "").strip() for k in ("description", "error")]
    parts = [p for i, p in enumerate(parts) if p and p not in parts[:i]]
    return ": ".join(parts) or str(error)


def _error_number(error: dict[str, Any]) -> int | None:
    """An error's ``error_number`` (slurm_errno.h), if it is one: ASCII digits, few of them
    (``"²".isdigit()`` holds, and ``int()`` refuses it; it refuses 5000 digits too)."""
    text = str(error.get("error_number", ""))
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 9 else None


class SlurmClient:
    """An async slurmrestd client; the token is read through ``token()`` on every call, so a
    rotated token file takes effect without a restart."""

    def __init__(self, base_url: str, *, token: Callable[[], str], user: str = "root",
                 version: str = "v0.0.42", timeout: float = 30,
                 transport: http.Transport | None = None) -> None:
        self._token = token
        self._user = user
        self._base = base_url.rstrip("/") + f"/slurm/{version}"
        self._timeout = http.Timeout(read=timeout, connect=timeout)
        # kept-open connections of sunk.http's own: the scheduler is CPU-bound on its calls.
        # Tests hand in a transport of their own.
        self._http: http.Transport = (transport if transport is not None
                                      else http.ConnectionPool(base_url, connections=16))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _request(self, method: str, path: str, call: str,
                       json: dict[str, Any] | None = None) -> http.Answer:
        """``call`` names the request for the request counter (``GET /job/{id}``)."""
        metrics.child(metrics.SLURM_REQUESTS, call).inc()
        headers = {"X-SLURM-USER-NAME": self._user, "X-SLURM-USER-TOKEN": self._token(),
                   "Accept": "application/json"}
        content = None
        if json is not None:
            headers["Content-Type"] = "application/json"
            content = _encode(json)
        try:
            return await self._http.call(method, self._base + path, headers=headers,
                                         body=content, timeouts=self._timeout)
        except (OSError, aiohttp.ClientError) as exc:
            raise SlurmError(f"slurmrestd unreachable: {exc!r}") from exc

    @staticmethod
    def _checked(method: str, path: str, r: http.Answer) -> dict[str, Any]:
        """The answer's body; an error status or listed errors raise SlurmError."""
        try:
            body = _decode(r.body)
        except msgspec.DecodeError:
            body = {}
        if not isinstance(body, dict):
            body = {}
        listed = body.get("errors")
        errors = [e for e in listed if isinstance(e, dict)] if isinstance(listed, list) else []
        if r.is_error or errors:
            said = "; ".join(_error_text(e) for e in errors)
            message = said or r.text.strip()[:500] or r.reason
            numbers = tuple(n for e in errors if (n := _error_number(e)) is not None)
            raise SlurmError(f"{method} {path}: {r.status} {message}",
                             status=r.status, slurm_message=message, numbers=numbers)
        return body

    async def _call(self, method: str, path: str, call: str,
                    json: dict[str, Any] | None = None) -> dict[str, Any]:
        return self._checked(method, path, await self._request(method, path, call, json))

    async def submit(self, job: dict[str, Any],
                     components: tuple[dict[str, Any], ...] = ()) -> int:
        """Submit a job; with ``components``, one heterogeneous job of ``job`` and them (its
        id is its leader's, ``job``'s)."""
        body = await self._call("POST", "/job/submit", "POST /job/submit",
                                json={"jobs": [job, *components]} if components
                                else {"job": job})
        return int(body["job_id"])

    async def job(self, job_id: int) -> Job | None:
        """One job, or None if Slurm no longer knows it. Read into a typed record, as the full
        listing is: the answer is about 18 kB, and a prolog's lock reads one for every job
        (as dicts, about 0.3 ms of CPU). A heterogeneous job's component is read as its
        leader, with every component's nodes (Slurm answers a leader with all of them)."""
        jobs = [Job.from_api(raw) for raw in await self._job_records(job_id)]
        if jobs and jobs[0].component:
            jobs = [Job.from_api(raw) for raw in await self._job_records(jobs[0].het_job_id)]
        folded = Job.folded(jobs)
        return folded[0] if folded else None

    async def _job_records(self, job_id: int) -> list[dict[str, Any]]:
        path = f"/job/{job_id}"
        try:
            r = await self._request("GET", path, "GET /job/{id}")
            if (listing := _typed(r, _decode_listing)) is not None:
                return [_record(j) for j in listing.jobs]
            # an error (raised here), or a record with something odd in it
            records = self._checked("GET", path, r).get("jobs") or []
        except SlurmError as exc:
            if exc.status == 404 or "Invalid job id" in str(exc):
                return []
            raise
        return [j for j in records if isinstance(j, dict)]

    async def job_gres(self, job_id: int) -> dict[str, str]:
        """Each node's GRES of a running job, with their indexes (:func:`gres_by_node`; a
        heterogeneous job's every component). Read whole, for a Pod whose claims take the
        job's GPUs: the other reads keep only the fields sunk follows."""
        body = await self._call("GET", f"/job/{job_id}", "GET /job/{id}")
        return gres_by_node([j for j in body.get("jobs") or () if isinstance(j, dict)])

    async def all_jobs(self) -> list[Job]:
        """Every job Slurm knows, in full (about 18 kB each): for start-up only."""
        r = await self._request("GET", "/jobs/", "GET /jobs/")
        if (listing := _typed(r, _decode_listing)) is not None:
            return _readable([_record(j) for j in listing.jobs])
        body = self._checked("GET", "/jobs/", r)  # raises, or a listing with odd parts
        return _readable([j for j in body.get("jobs") or [] if isinstance(j, dict)])

    async def job_states(self) -> dict[int, str]:
        """Every job's id and state: the cheap listing, about 80 bytes a job. Read into typed
        records (no dict per job: the listing is every job in the cluster, every poll); a
        listing with anything odd in it is read field by field instead, skipping what is odd."""
        r = await self._request("GET", "/jobs/state/", "GET /jobs/state/")
        states: dict[int, str] = {}
        if (listing := _typed(r, _decode_states)) is not None:
            with contextlib.suppress(ValueError):  # an odd id: read field by field, below
                for state in listing.jobs:
                    raw = state.job_id  # nearly always a number's text: read without a call
                    job_id = (int(raw) if type(raw) is str and raw.isdigit() and raw.isascii()
                              else _leader_id(raw))
                    if job_id is not None:
                        states[job_id] = state.state[0] if state.state else "UNKNOWN"
                return states
            states.clear()
        body = self._checked("GET", "/jobs/state/", r)
        for j in body.get("jobs") or []:
            if not isinstance(j, dict):
                continue  # a listing that says something odd must not stop the poll
            with contextlib.suppress(KeyError, TypeError, ValueError):
                if (job_id := _leader_id(j["job_id"])) is not None:
                    states[job_id] = (j.get("state") or ["UNKNOWN"])[0]
        return states

    async def cancel(self, job_id: int) -> None:
        try:
            await self._call("DELETE", f"/job/{job_id}", "DELETE /job/{id}")
        except SlurmError as exc:
            if exc.status == 404 or "Invalid job id" in str(exc) or "already completed" in str(exc):
                return
            if exc.numbers == (CANCEL_NOT_DELIVERED,):
                # Slurm 24.11 to 26.05 (slurm_kill_jobs in src/api/cancel.c) turn any failed
                # round trip to slurmctld into rc 1, which reads "Operation not permitted".
                raise SlurmError(
                    f"DELETE /job/{job_id}: slurmrestd did not get slurmctld's answer (Slurm "
                    "says 'Operation not permitted', error 1, for any failed round trip of a "
                    "cancel; slurmctld refused nothing): retried", status=exc.status,
                    slurm_message=exc.slurm_message, numbers=exc.numbers) from exc
            raise

    async def nodes(self) -> list[dict[str, Any]]:
        body = await self._call("GET", "/nodes/", "GET /nodes/")
        nodes: list[dict[str, Any]] = body.get("nodes") or []
        return nodes

    async def update_node(self, name: str, fields: dict[str, Any]) -> None:
        await self._call("POST", f"/node/{name}", "POST /node/{name}", json=fields)
