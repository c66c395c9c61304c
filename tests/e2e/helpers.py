"""Small helpers for end-to-end tests against the real test bed."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import kr8s.asyncio
from kr8s.asyncio.objects import APIObject

T = TypeVar("T")


async def eventually(check: Callable[[], Awaitable[T]], within: float = 30) -> T:
    """Poll ``check`` (a real system's state: nothing to subscribe to) until it is truthy."""
    async with asyncio.timeout(within):
        while True:
            if result := await check():
                return result
            await asyncio.sleep(0.2)


async def kube_list(kube: kr8s.asyncio.Api, kind: str, **kwargs: Any) -> list[dict[str, Any]]:
    """Objects of ``kind`` as plain dicts."""
    return [o.raw if isinstance(o, APIObject) else o async for o in kube.async_get(kind, **kwargs)]


async def close_api(api: kr8s.asyncio.Api) -> None:
    """kr8s has no close(); its httpx session must still be closed before the loop ends."""
    if api._session is not None:
        await api._session.aclose()
