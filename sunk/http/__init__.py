"""The HTTP plumbing both clients share (the API server's, :mod:`sunk.kube.client`, and
slurmrestd's, :mod:`sunk.slurm.client`): a call goes out on a kept-open connection of
:class:`ConnectionPool`, and its answer comes back read whole as an :class:`Answer`.

The scheduler is CPU-bound on its calls (five or so per Pod). Measured against the test bed's
API server, 8 calls at a time: 310 µs of CPU per call through httpx's request and response
objects on aiohttp's connections, 145 µs through aiohttp alone, 75 µs on the pool's own
connections, whose answers httptools parses. Watches, and calls through a
proxy, still go through aiohttp. Tests hand the clients a :class:`Transport` of their own
(``tests/mock_http.py``: httpx's ``MockTransport`` behind this interface).

The modules: :mod:`~sunk.http.base` (what every transport shares), :mod:`~sunk.http.pool`
(the kept-open connections), :mod:`~sunk.http.streams` (aiohttp's, for watches and proxies);
:mod:`~sunk.http.server` is the hook API's server, not a client's.
"""

from sunk.http.base import (
    Answer,
    Streamed,
    Timeout,
    Transport,
    env_proxy,
    split_lines,
    with_query,
)
from sunk.http.pool import ConnectionPool
from sunk.http.streams import AiohttpTransport

__all__ = [
    "AiohttpTransport",
    "Answer",
    "ConnectionPool",
    "Streamed",
    "Timeout",
    "Transport",
    "env_proxy",
    "split_lines",
    "with_query",
]
