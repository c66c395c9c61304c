"""Bad input to `python -m testbed` gives one clear error line, never a traceback."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from testbed import __main__ as cli
from testbed import procs


@pytest.fixture(autouse=True)
def _no_testbed_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Point the state directory somewhere empty so no running test bed is reused."""
    monkeypatch.setenv("SUNK_TESTBED_DIR", str(tmp_path / "state"))


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("testbed: error: ")
    return err[0]


def test_unknown_slurm_suite(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["up", "--slurm-suite", "bookworm"]) == 1
    line = _one_error_line(capsys)
    assert "unknown Slurm suite 'bookworm'" in line and "trixie" in line and "sid" in line


def test_port_in_use(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert cli.main(["up", "--apiserver-port", str(port)]) == 1
    line = _one_error_line(capsys)
    assert f"port {port}" in line and "kube-apiserver" in line


def test_not_root(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert cli.main(["up"]) == 1
    assert "needs root" in _one_error_line(capsys)


def test_too_many_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["up", "--nodes", "0"]) == 1
    assert "--nodes" in _one_error_line(capsys)


def test_free_port_range_skips_busy_ports() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        port = busy.getsockname()[1]
        base = procs.free_port_range(3, start=port - 1, stop=port + 50)
    assert base > port
