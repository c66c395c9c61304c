"""slurmrestd: the only module that talks to Slurm.

Calls are small and few on the hot path: one ``jobs?update_time=`` listing per poll returns just
the jobs that changed since the last one (a peer project listed every job in full per Pod and
starved its scheduler), and per-job calls only where a Pod needs one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from sunk.decide import FINISHED_STATES

log = logging.getLogger("sunk.slurm")


class SlurmError(Exception):
    """slurmrestd answered with an error (``status`` 0: it could not be reached)."""

    def __init__(self, message: str, *, status: int = 0) -> None:
        super().__init__(message)
        self.status = status

    @property
    def unreachable(self) -> bool:
        return self.status == 0 or self.status >= 500


@dataclass
class Job:
    """The fields of a Slurm job that sunk reads."""

    job_id: int
    name: str
    state: str
    extra: str
    nodes: str
    reason: str
    raw: dict[str, Any] = field(repr=False, default_factory=dict)

    @classmethod
    def from_api(cls, raw: dict[str, Any]) -> Job:
        states = raw.get("job_state") or []
        return cls(job_id=int(raw["job_id"]), name=raw.get("name") or "",
                   state=states[0] if states else "UNKNOWN", extra=raw.get("extra") or "",
                   nodes=raw.get("nodes") or "", reason=raw.get("state_reason") or "",
                   raw=raw)

    @property
    def finished(self) -> bool:
        return self.state in FINISHED_STATES


class SlurmClient:
    """An async slurmrestd client; the token is read through ``token()`` on every call, so a
    rotated token file takes effect without a restart."""

    def __init__(self, base_url: str, *, token: Callable[[], str], user: str = "root",
                 version: str = "v0.0.42", timeout: float = 30,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._token = token
        self._user = user
        self._prefix = f"/slurm/{version}"
        limits = httpx.Limits(max_connections=16, max_keepalive_connections=16)
        self._http = httpx.AsyncClient(base_url=base_url, timeout=timeout, limits=limits,
                                       transport=transport)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        headers = {"X-SLURM-USER-NAME": self._user, "X-SLURM-USER-TOKEN": self._token()}
        try:
            r = await self._http.request(method, self._prefix + path, headers=headers, **kwargs)
        except httpx.HTTPError as exc:
            raise SlurmError(f"slurmrestd unreachable: {exc!r}") from exc
        try:
            body: dict[str, Any] = r.json()
        except ValueError:
            body = {}
        errors = [e.get("description") or e.get("error") or str(e)
                  for e in body.get("errors") or []]
        if r.status_code >= 400 or errors:
            message = "; ".join(str(e) for e in errors) or r.text.strip() or r.reason_phrase
            raise SlurmError(f"{method} {path}: {r.status_code} {message}",
                             status=r.status_code)
        return body

    async def ping(self) -> bool:
        body = await self._call("GET", "/ping/")
        return any(p.get("pinged") == "UP" for p in body.get("pings") or [])

    async def submit(self, job: dict[str, Any]) -> int:
        body = await self._call("POST", "/job/submit", json={"job": job})
        return int(body["job_id"])

    async def job(self, job_id: int) -> Job | None:
        """One job, or None if Slurm no longer knows it."""
        try:
            body = await self._call("GET", f"/job/{job_id}")
        except SlurmError as exc:
            if exc.status == 404 or "Invalid job id" in str(exc):
                return None
            raise
        jobs = body.get("jobs") or []
        return Job.from_api(jobs[0]) if jobs else None

    async def jobs_changed_since(self, update_time: int) -> tuple[list[Job], int]:
        """Jobs updated after ``update_time`` (0: all), and the time to ask from next."""
        params = {"update_time": str(update_time)} if update_time else {}
        body = await self._call("GET", "/jobs/", params=params)
        last = int((body.get("last_update") or {}).get("number") or 0)
        return [Job.from_api(j) for j in body.get("jobs") or []], last

    async def cancel(self, job_id: int) -> None:
        try:
            await self._call("DELETE", f"/job/{job_id}")
        except SlurmError as exc:
            if exc.status == 404 or "Invalid job id" in str(exc) or "already completed" in str(exc):
                return
            raise

    async def update_job(self, job_id: int, fields: dict[str, Any]) -> None:
        await self._call("POST", f"/job/{job_id}", json=fields)

    async def nodes(self) -> list[dict[str, Any]]:
        body = await self._call("GET", "/nodes/")
        nodes: list[dict[str, Any]] = body.get("nodes") or []
        return nodes

    async def update_node(self, name: str, fields: dict[str, Any]) -> None:
        await self._call("POST", f"/node/{name}", json=fields)
