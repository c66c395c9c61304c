"""One connection pool to the Kubernetes API server, on aiohttp's connections.

The seam is built on aiohttp directly (:mod:`sunk.http`) rather than on kr8s's ``Api``: kr8s
makes its own httpx session, which can be swapped only through its private attributes, and
httpx's request and response objects cost as much CPU per call as aiohttp's own work (the
scheduler is CPU-bound on its calls). kr8s is kept for what it does well and publicly: reading a
kubeconfig or the in-cluster service account into credentials (``Api.auth``). The API server
never redirects a resource path, so no redirect is followed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar

import aiohttp
import kr8s.asyncio
import msgspec

from sunk import http
from sunk.runtime import metrics

log = logging.getLogger("sunk.kube")

Obj = dict[str, Any]
Params = Mapping[str, str]
T = TypeVar("T")

#: What the HTTP stack raises when the API server cannot be reached or drops the connection
#: (aiohttp's errors and the OS's; TimeoutError is an OSError).
UNREACHABLE = (OSError, aiohttp.ClientError)

#: A call waits at most this long for an answer; the API server gives up on its own after 60 s
#: (``--request-timeout``), so this only catches a connection that went silent.
TIMEOUT = http.Timeout(read=70.0, connect=10.0)
#: A watch may stay silent for minutes (the server ends it after ``timeoutSeconds``).
WATCH_TIMEOUT = http.Timeout(read=None, connect=10.0)

_HEADERS = {"Accept": "application/json", "User-Agent": "sunk"}
_HEADERS_JSON = {**_HEADERS, "Content-Type": "application/json"}

_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode


class Listing(msgspec.Struct):
    """A list call's answer: its metadata (``resourceVersion``), and each item as JSON."""

    metadata: dict[str, Any] = {}
    items: list[msgspec.Raw] | None = None


_decode_listing = msgspec.json.Decoder(Listing).decode


def _decoded(answer: http.Answer, decode: Callable[[bytes | bytearray], T]) -> T:
    """The answer decoded; an error answer, or one that is not a JSON object, raises
    KubeError with its status (and the server's message)."""
    where = f"{answer.method} {answer.path}"
    if answer.is_error:
        message = _message(answer.status, answer.reason, answer.body)
        raise KubeError(f"{where}: {answer.status} {message}", status=answer.status)
    try:
        body = decode(answer.body)
    except msgspec.ValidationError as exc:  # JSON, but not a list call's answer
        raise KubeError(f"{where}: the answer is not a list: {exc}",
                        status=answer.status) from exc
    except msgspec.DecodeError as exc:
        raise KubeError(f"{where}: the answer is not JSON: {exc}", status=answer.status) from exc
    if not isinstance(body, dict | Listing):
        raise KubeError(f"{where}: the answer is not an object", status=answer.status)
    return body


class KubeError(Exception):
    """A call that failed: ``status`` is the HTTP status, or 0 if the server was not reached."""

    def __init__(self, message: str, *, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class Credentials(Protocol):
    """What kr8s's ``KubeAuth`` offers publicly, and all :class:`Client` needs of it."""

    server: str
    token: str | None
    tls_server_name: str | None

    @property
    def proxy(self) -> str | None: ...

    async def ssl_context(self) -> ssl.SSLContext | bool: ...

    async def reauthenticate(self) -> None: ...


def api_path(url: str, *, namespace: str | None = None, version: str = "v1") -> str:
    """The path of ``url`` as kr8s's ``call_api`` builds it: core ``v1`` under ``/api``, a group
    version under ``/apis``, a namespace in ``/namespaces/<ns>/``; a path that starts with ``/``
    (``/version``) is taken as it is."""
    if url.startswith("/"):
        return url
    if version == "v1":
        base = "/api"
    elif "/" in version:
        base = "/apis"
    else:
        raise ValueError(f"not an API version: {version!r} (v1, or group/version)")
    parts = [base, version]
    if namespace:
        parts += ["namespaces", namespace]
    parts.append(url)
    return "/".join(parts)


def resource(path: str) -> str:
    """The resource a request path names, for the request counter: ``pods``,
    ``pods/binding``, ``events``, ``nodes`` (``/version``: the path itself)."""
    parts = path.split("?", 1)[0].strip("/").split("/")
    if parts[0] == "api":
        parts = parts[2:]
    elif parts[0] == "apis":
        parts = parts[3:]
    else:
        return "/" + "/".join(parts)
    if len(parts) >= 2 and parts[0] == "namespaces" and len(parts) != 2:
        parts = parts[2:]  # a namespaced resource (namespaces/<ns> alone is the Namespace)
    if not parts:
        return "/"
    return parts[0] + (f"/{parts[2]}" if len(parts) >= 3 else "")


def _message(status: int, reason: str, content: bytes | bytearray) -> str:
    """The ``message`` of a Kubernetes Status body, or what the body says otherwise."""
    try:
        body = _decode(content)
    except msgspec.DecodeError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return str(body["message"])
    return content.decode("utf-8", "replace")[:500] or reason or f"HTTP {status}"


async def _lines(streamed: http.Streamed, path: str) -> AsyncIterator[str]:
    """The answer's lines; a stream that breaks raises KubeError with status 0."""
    try:
        async for line in streamed.lines():
            yield line
    except UNREACHABLE as exc:
        raise KubeError(f"watch {path}: the stream broke: {exc!r}") from exc


class Client:
    """The API server's client: one connection pool, credentials re-read once on a 401 (bound
    service-account tokens rotate; kr8s did the same for us)."""

    def __init__(self, credentials: Credentials, *,
                 transport: http.Transport | None = None) -> None:
        #: Tests pass a transport of their own; otherwise :class:`sunk.http.ConnectionPool`.
        self.credentials = credentials
        self._transport = transport
        self._session: http.Transport | None = None
        #: Pools replaced by a re-authentication; a watch may still read from one.
        self._retired: list[http.Transport] = []
        self._renewals = 0
        self._renewing = asyncio.Lock()

    async def _new_session(self) -> http.Transport:
        if self._transport is not None:
            return self._transport
        return http.ConnectionPool(self.credentials.server,
                                   verify=await self.credentials.ssl_context(),
                                   proxy=self.credentials.proxy)

    async def _current(self) -> tuple[http.Transport, int]:
        if self._session is None:
            async with self._renewing:
                if self._session is None:
                    self._session = await self._new_session()
        return self._session, self._renewals

    async def _reauthenticate(self, seen: int) -> None:
        """Read the credentials again (unless a concurrent call just did) and start a new
        pool with them: a rotated client certificate needs new connections."""
        async with self._renewing:
            if self._renewals != seen:
                return
            log.info("the API server refused our credentials (401); reading them again")
            await self.credentials.reauthenticate()
            for old in self._retired:  # older than one renewal: no watch still needs them
                if old is not self._transport:
                    await old.aclose()
            self._retired = [self._session] if self._session is not None else []
            self._session = await self._new_session()
            self._renewals += 1

    def _headers(self, json: bool, headers: Mapping[str, str] | None) -> dict[str, str]:
        sent = dict(_HEADERS_JSON if json else _HEADERS)
        if self.credentials.token:
            sent["Authorization"] = f"Bearer {self.credentials.token}"
        if headers:  # a caller's header replaces ours of the same name, whatever its case
            given = {name.lower() for name in headers}
            sent = {k: v for k, v in sent.items() if k.lower() not in given}
            sent.update(headers)
        return sent

    def _url(self, path: str, params: Params | None) -> str:
        return http.with_query(self.credentials.server.rstrip("/") + path, params)

    async def send(self, method: str, url: str, *, namespace: str | None = None,
                   version: str = "v1", params: Params | None = None,
                   json: Mapping[str, object] | None = None,
                   headers: Mapping[str, str] | None = None) -> http.Answer:
        """One call, its answer read whatever its status (for callers that judge the status
        themselves). Raises KubeError with status 0 if the server cannot be reached."""
        path = api_path(url, namespace=namespace, version=version)
        metrics.child(metrics.KUBE_REQUESTS, method, resource(path)).inc()
        target = self._url(path, params)
        body = _encode(json) if json is not None else None
        try:
            for attempt in (1, 2):
                session, seen = await self._current()
                answer = await session.call(
                    method, target, headers=self._headers(json is not None, headers),
                    body=body, timeouts=TIMEOUT,
                    server_hostname=self.credentials.tls_server_name)
                if answer.status != 401 or attempt == 2:
                    return answer
                await self._reauthenticate(seen)
        except UNREACHABLE as exc:  # the API server is down, restarting or out of reach
            raise KubeError(f"{method} {path}: {exc!r}") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def request(self, method: str, url: str, *, namespace: str | None = None,
                      version: str = "v1", params: Params | None = None,
                      json: Mapping[str, object] | None = None,
                      headers: Mapping[str, str] | None = None) -> Obj:
        """One call and its decoded answer; an error answer raises KubeError with its status
        and the server's message."""
        answer = await self.send(method, url, namespace=namespace, version=version,
                                 params=params, json=json, headers=headers)
        if not answer.body and not answer.is_error:
            return {}
        return _decoded(answer, _decode)

    async def write(self, method: str, url: str, *, namespace: str | None = None,
                    version: str = "v1", json: Mapping[str, object] | None = None,
                    headers: Mapping[str, str] | None = None) -> None:
        """One call whose answer is not needed (an Event, a Binding): only an error answer is
        read, and raises KubeError as :meth:`request` does. Two of a Pod's calls, whose
        answers were decoded for nothing."""
        answer = await self.send(method, url, namespace=namespace, version=version, json=json,
                                 headers=headers)
        if answer.is_error:
            _decoded(answer, _decode)

    async def list(self, url: str, *, namespace: str | None = None, version: str = "v1",
                   params: Params | None = None) -> Listing:
        """A list call, its items left as JSON: the caller decodes them one at a time. A list
        of 11,000 Pods decoded whole took about 130 MB at once before the Pod cache trimmed
        them, and the freed pieces kept the scheduler's memory that high after a restart."""
        answer = await self.send("GET", url, namespace=namespace, version=version,
                                 params=params)
        return _decoded(answer, _decode_listing)

    @contextlib.asynccontextmanager
    async def watch_lines(self, url: str, *, namespace: str | None = None,
                          version: str = "v1", params: Params | None = None,
                          ) -> AsyncIterator[AsyncIterator[str]]:
        """A streamed GET (a watch), read line by line with no read timeout. An error answer
        raises KubeError with its status; a dropped stream raises KubeError with status 0."""
        path = api_path(url, namespace=namespace, version=version)
        metrics.child(metrics.KUBE_REQUESTS, "WATCH", resource(path)).inc()
        target = self._url(path, params)
        async with contextlib.AsyncExitStack() as stack:
            try:
                for attempt in (1, 2):
                    session, seen = await self._current()
                    answer = contextlib.AsyncExitStack()
                    streamed = await answer.enter_async_context(session.stream(
                        "GET", target, headers=self._headers(False, None),
                        timeouts=WATCH_TIMEOUT,
                        server_hostname=self.credentials.tls_server_name))
                    if streamed.status != 401 or attempt == 2:
                        stack.push_async_exit(answer)
                        break
                    await answer.aclose()
                    await self._reauthenticate(seen)
                error = await streamed.read() if streamed.status >= 400 else None
            except UNREACHABLE as exc:
                raise KubeError(f"watch {path}: {exc!r}") from exc
            if error is not None:
                raise KubeError(f"watch {path}: {streamed.status} "
                                f"{_message(streamed.status, '', error)}",
                                status=streamed.status)
            yield _lines(streamed, path)

    async def aclose(self) -> None:
        """Close every connection (before the event loop ends)."""
        for session in {*self._retired, *([self._session] if self._session else [])}:
            await session.aclose()
        self._retired, self._session = [], None


async def load_credentials(kubeconfig: Path | None) -> Credentials:
    """Credentials from ``kubeconfig``, or the in-cluster service account, read by kr8s.

    ``kr8s.asyncio.api()`` would also ask the server's version through an httpx session that kr8s
    offers no public way to close (an open socket left behind); the ``Api`` class it returns,
    made directly, reads only the credentials."""
    api = kr8s.asyncio.Api(kubeconfig=str(kubeconfig) if kubeconfig else None,
                           bypass_factory=True)
    credentials: Credentials = api.auth
    await credentials.reauthenticate()
    return credentials


async def connect(kubeconfig: Path | None) -> Client:
    """An API client from ``kubeconfig``, or the in-cluster service account, once the API
    server answers."""
    client = Client(await load_credentials(kubeconfig))
    try:
        await client.request("GET", "/version")
    except BaseException:
        await client.aclose()
        raise
    return client


async def connect_waiting(kubeconfig: Path | None) -> Client:
    """:func:`connect`, waiting out an API server that is not up yet (a control-plane restart
    while the scheduler starts is no reason to crash-loop)."""
    delay = 0.5
    while True:
        try:
            return await connect(kubeconfig)
        except KubeError as exc:
            log.warning("the API server does not answer (%s); trying again in %.0fs", exc, delay)
            await asyncio.sleep(delay)
            delay = min(30.0, delay * 2)


async def close(client: Client) -> None:
    """Close the client's connections before the event loop ends."""
    await client.aclose()


async def request(client: Client, method: str, url: str, *, namespace: str | None = None,
                  version: str = "v1", params: Params | None = None,
                  json: Mapping[str, object] | None = None,
                  headers: Mapping[str, str] | None = None) -> Obj:
    """:meth:`Client.request`, as a function (tests replace it)."""
    return await client.request(method, url, namespace=namespace, version=version,
                                params=params, json=json, headers=headers)
