"""The HTTP plumbing both clients share (the API server's, :mod:`sunk.kube.client`, and
slurmrestd's, :mod:`sunk.slurm.client`): httpx's requests and responses, sent straight to a
transport on aiohttp's connections.

``httpx.AsyncClient`` wraps every call in layers the scheduler does not use: base-URL merging
(the URL parsed twice more), cookie extraction, auth and redirect loops, event hooks. Measured
against the test bed's API server, 8 calls at a time: 370 µs of CPU per call through the
client, 255 µs through its transport (docs/benchmarks.md). The scheduler is CPU-bound on its
calls, so it builds the request itself and hands it to the transport. Tests hand the clients an
``httpx.MockTransport`` instead.
"""

from __future__ import annotations

import ssl
import urllib.request
from collections.abc import Mapping
from urllib.parse import urlsplit

import httpx
from httpx_aiohttp import AiohttpTransport


def env_proxy(url: str) -> str | None:
    """The proxy the environment names for ``url`` (``HTTPS_PROXY``/``HTTP_PROXY``, unless
    ``NO_PROXY`` covers its host), as httpx's client honoured it."""
    parts = urlsplit(url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme or "https")
    if not proxy or urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return proxy


def transport(url: str, *, verify: ssl.SSLContext | bool = True, proxy: str | None = None,
              connections: int = 100) -> httpx.AsyncBaseTransport:
    """aiohttp's connection pool for ``url`` (through ``proxy``, or the environment's)."""
    chosen = proxy or env_proxy(url)
    return AiohttpTransport(verify=verify, proxy=httpx.Proxy(chosen) if chosen else None,
                            limits=httpx.Limits(max_connections=connections,
                                                max_keepalive_connections=connections))


async def send(via: httpx.AsyncBaseTransport, request: httpx.Request, *,
               stream: bool = False) -> httpx.Response:
    """Send ``request``; its answer read whole unless ``stream`` (then the caller closes it)."""
    response = await via.handle_async_request(request)
    response.request = request
    if not stream:
        await response.aread()
    return response


def request(method: str, url: str, *, timeout: httpx.Timeout,
            headers: Mapping[str, str] | httpx.Headers, content: bytes | None = None,
            params: Mapping[str, str] | None = None,
            sni_hostname: str | None = None) -> httpx.Request:
    extensions: dict[str, object] = {"timeout": timeout.as_dict()}
    if sni_hostname:
        extensions["sni_hostname"] = sni_hostname
    return httpx.Request(method, url, params=params, headers=headers, content=content,
                         extensions=extensions)
