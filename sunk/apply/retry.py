"""What the executor raises when nothing can be done for an object yet: the worker backs off."""

from __future__ import annotations


class RetryLater(LookupError):
    """Nothing can be done for this object yet: the worker backs off and looks again.
    ``room``: it waits for room on a Node (a Pod leaving a Node wakes it early)."""

    def __init__(self, why: str, *, room: bool = False) -> None:
        super().__init__(why)
        self.room = room
