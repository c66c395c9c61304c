"""The hook API's bound on calls at work (:mod:`sunk.hooks.routes`), which a call leaves while
it waits.

Two hooks are long polls: the prolog's lock waits until the node is locked, and an ending
placeholder waits until its Pod is gone. A job that starts on hundreds of nodes, or ends on
them, has as many of these waiting at once. Counted while they waited, they filled the bound
(64) and the rest were told to retry a second later (429), though a waiting call costs the
scheduler nothing: the bound is there so that a flood of calls at work cannot starve
scheduling. So the code that waits does it inside :func:`waiting`: the two long polls, and a
lock's read of its job from slurmrestd (one in twelve saturated runs, with slurmrestd slow,
filled the bound with those reads).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar


class InFlight:
    """How many hook calls are at work, against ``bound``."""

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self.working = 0

    @property
    def full(self) -> bool:
        return self.working >= self.bound

    @contextlib.contextmanager
    def working_on(self) -> Iterator[None]:
        """One call at work, until it ends (or waits: :func:`waiting`)."""
        self.working += 1
        token = _current.set(self)
        try:
            yield
        finally:
            _current.reset(token)
            self.working -= 1


#: The bound the hook call running in this task counts against (None: not a hook call).
_current: ContextVar[InFlight | None] = ContextVar("sunk_hook_in_flight", default=None)


@contextlib.contextmanager
def waiting() -> Iterator[None]:
    """Inside, the hook call this task serves (if any) is not counted as at work."""
    counted = _current.get()
    if counted is None:
        yield
        return
    counted.working -= 1
    try:
        yield
    finally:
        counted.working += 1
