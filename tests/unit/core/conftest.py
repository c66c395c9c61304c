"""Shared by the core's unit tests."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def short_job_id_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new job's id waits 2 s for the Pod's binding to carry it
    (sunk.apply.annotations.JOB_ID_WAIT): a few milliseconds here, unless a test sets its own."""
    monkeypatch.setattr("sunk.apply.annotations.JOB_ID_WAIT", 0.02)
