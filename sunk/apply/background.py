"""What the executor sends without making a plan wait: Events, and a Pod's annotations written
in the background. Each task is held until it ends (the event loop keeps only a weak
reference), and tests can wait for them all (:attr:`Background.tasks`)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from sunk import kube
from sunk.apply.ports import KubePort
from sunk.model.state import PodRecord


class Background:
    """The executor's background tasks."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[None]] = set()

    def keep(self, task: asyncio.Task[None]) -> None:
        """Hold ``task`` until it ends."""
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def fire(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` in the background (Events: never on the hot path)."""
        self.keep(asyncio.create_task(coro))


class PodEvents:
    """A Pod's Events: noted on its dashboard line at once, sent in the background."""

    def __init__(self, kube_port: KubePort, background: Background) -> None:
        self.kube = kube_port
        self.background = background

    def send(self, pod: kube.Obj, record: PodRecord | None, reason: str, message: str, *,
             warning: bool = False) -> None:
        if record is not None:
            record.last_event = f"{reason}: {message}"
            record.note(reason, message)
        self.background.fire(self.kube.event(pod, kind="Pod", reason=reason, message=message,
                                             warning=warning))
