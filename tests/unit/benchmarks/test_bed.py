"""A benchmark stopped by hand still stops the scheduler it started."""

from __future__ import annotations

import os
import signal

import pytest

from benchmarks.bed import stopped_cleanly


def test_sigterm_runs_the_cleanup_and_the_old_handler_comes_back() -> None:
    before = signal.getsignal(signal.SIGTERM)
    cleaned = []
    with pytest.raises(SystemExit) as stopped, stopped_cleanly():
        try:
            os.kill(os.getpid(), signal.SIGTERM)  # handled at the next bytecode
            for _ in range(1000):
                pass
        finally:
            cleaned.append(True)
    assert stopped.value.code == 128 + signal.SIGTERM
    assert cleaned == [True]
    assert signal.getsignal(signal.SIGTERM) is before
