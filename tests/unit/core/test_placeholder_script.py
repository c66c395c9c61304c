"""The placeholder job's script (sunk/scripts/placeholder.sh) when Slurm ends its job: SIGTERM to
every process of the job, at any point of the script. Run by ``sh`` with ``scontrol`` and
``curl`` on its PATH that only log their calls (the hook API's answers are given here), so
these test the script's own handshake, not Slurm or the scheduler (the e2e tests do)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[3] / "sunk" / "scripts" / "placeholder.sh"

#: curl as the script calls it: logs ``METHOD PATH``, waits ``$<HOOK>_SLOW`` seconds if set,
#: then prints the body and the status on its own line (``-w '\n%{http_code}'``).
CURL = r"""#!/bin/sh
method=GET
for arg in "$@"; do
    case "$prev" in -X) method=$arg ;; esac
    prev=$arg
    url=$arg
done
path=${url#http://hooks}
echo "$method $path" >> "$CALLS"
case "$path" in
    */started) [ -n "${STARTED_SLOW:-}" ] && sleep "$STARTED_SLOW"
               printf '{"pod":"ns/p","gone":false}\n200' ;;
    */terminating) [ -n "${TERMINATING_SLOW:-}" ] && sleep "$TERMINATING_SLOW"
                   printf '{"pod":"ns/p","gone":false}\n200' ;;
    */pod*) printf '{"pod":"ns/p","gone":true}\n200' ;;
    *) printf '\n404' ;;
esac
"""

#: scontrol: logs its arguments, waits ``$SCONTROL_SLOW`` seconds if set.
SCONTROL = r"""#!/bin/sh
echo "scontrol $*" >> "$CALLS"
[ -n "${SCONTROL_SLOW:-}" ] && sleep "$SCONTROL_SLOW"
[ -n "${SCONTROL_FAILS:-}" ] && exit 1
exit 0
"""


class Job:
    """The script running as a job would: a process group of its own (Slurm signals them all)."""

    def __init__(self, tmp: Path, **slow: str) -> None:
        bin_dir = tmp / "bin"
        bin_dir.mkdir()
        for name, text in (("curl", CURL), ("scontrol", SCONTROL)):
            (bin_dir / name).write_text(text)
            (bin_dir / name).chmod(0o755)
        self.calls_file = tmp / "calls"
        self.calls_file.touch()
        env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "CALLS": str(self.calls_file),
               "SLURM_JOB_ID": "7", "SLURMD_NODENAME": "n1", "SUNK_JOB_EXTRA": "sunk=1",
               "SUNK_HOOKS_ENV": str(tmp / "none"), "SUNK_HOOK_URL": "http://hooks",
               "SUNK_POD_NAMESPACE": "ns", "SUNK_POD_NAME": "p", "SUNK_KILL_WAIT": "30",
               **slow}
        self.process = subprocess.Popen(["sh", str(SCRIPT)], env=env, start_new_session=True,
                                        stderr=subprocess.PIPE, text=True)

    def calls(self) -> list[str]:
        return self.calls_file.read_text().splitlines()

    def wait_for_call(self, prefix: str, within: float = 10.0) -> None:
        deadline = time.monotonic() + within
        while not any(c.startswith(prefix) for c in self.calls()):
            assert time.monotonic() < deadline, f"no call {prefix!r}: {self.calls()}"
            time.sleep(0.02)
        time.sleep(0.1)  # into the call's wait

    def holding(self, within: float = 10.0) -> None:
        """Wait until the script holds the node: its ``sleep infinity`` runs."""
        deadline = time.monotonic() + within
        while not any(_cmdline(pid) == ["sleep", "infinity"]
                      for pid in _group(self.process.pid)):
            assert time.monotonic() < deadline, f"never held the node: {self.calls()}"
            time.sleep(0.02)

    def end(self) -> int:
        """Slurm ending the job: SIGTERM to all its processes; the script's exit status."""
        self.signal()
        return self.process.wait(timeout=20)

    def signal(self) -> None:
        os.killpg(self.process.pid, signal.SIGTERM)


def _group(pgid: int) -> list[int]:
    """The processes of a process group (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[2]) == pgid:
                    found.append(int(entry.name))
    return found


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
    except OSError:
        return []


@pytest.fixture
def jobs() -> Iterator[list[Job]]:
    started: list[Job] = []
    yield started
    for job in started:
        with contextlib.suppress(ProcessLookupError):  # `sleep infinity` and any stub left
            os.killpg(job.process.pid, signal.SIGKILL)
        job.process.wait(timeout=10)
        assert job.process.stderr is not None
        job.process.stderr.close()


HANDSHAKE = ["POST /hooks/v1/jobs/7/terminating", "GET /hooks/v1/jobs/7/pod?wait="]


@pytest.mark.parametrize("ended_during,slow", [
    ("scontrol update", {"SCONTROL_SLOW": "5"}),  # writing ": started"
    ("POST /hooks/v1/jobs/7/started", {"STARTED_SLOW": "5"}),  # the Pod may be bound already
    ("GET", {}),  # holding the node: `wait` (no call: the stub's list of calls ends)
], ids=["writing-started", "calling-started", "holding"])
def test_a_job_ended_at_any_point_asks_for_its_pod_to_go_and_waits_for_it(
        tmp_path: Path, jobs: list[Job], ended_during: str, slow: dict[str, str]) -> None:
    job = Job(tmp_path, **slow)
    jobs.append(job)
    if ended_during == "GET":
        job.holding()
    else:
        job.wait_for_call(ended_during)
    assert job.end() == 0, "released the node once the Pod was gone"
    calls = job.calls()
    handshake = [c for c in calls if c.startswith(("POST /hooks/v1/jobs/7/terminating",
                                                   "GET /hooks/v1/jobs/7/pod"))]
    assert [c.split("=", 1)[0] + ("=" if "=" in c else "") for c in handshake] == HANDSHAKE, calls


@pytest.mark.parametrize("killed", ["sleep", "scontrol"])
def test_a_child_killed_while_the_shell_heard_no_signal_still_runs_the_handshake(
        tmp_path: Path, jobs: list[Job], killed: str) -> None:
    """Slurm signals a job's processes one by one, from a look at them: its SIGTERM can reach
    a child and miss the shell. With its sleep killed, the script ended with 0 and no
    handshake, and Slurm gave the node away while the Pod ran (a job cancelled just after it
    started). A killed scontrol may have written ": started" already (the Pod may be bound):
    not a failure to give up on, but a job ending."""
    job = Job(tmp_path, **({"SCONTROL_SLOW": "5"} if killed == "scontrol" else {}))
    jobs.append(job)
    if killed == "sleep":
        job.holding()
    else:
        job.wait_for_call("scontrol update")

    def is_it(pid: int) -> bool:
        line = _cmdline(pid)
        return (line == ["sleep", "infinity"] if killed == "sleep"
                else any(part.endswith("/scontrol") for part in line))

    (child,) = [pid for pid in _group(job.process.pid) if is_it(pid)]
    os.kill(child, signal.SIGTERM)
    assert job.process.wait(timeout=20) == 0, "released the node once the Pod was gone"
    handshake = [c.split("?", 1)[0] for c in job.calls() if "/terminating" in c or "/pod" in c]
    assert handshake == ["POST /hooks/v1/jobs/7/terminating", "GET /hooks/v1/jobs/7/pod"]


def test_a_scontrol_that_fails_on_its_own_ends_the_script_with_no_handshake(
        tmp_path: Path, jobs: list[Job]) -> None:
    """Not killed: ": started" was not written, no Pod was bound for it."""
    job = Job(tmp_path, SCONTROL_FAILS="1")
    jobs.append(job)
    assert job.process.wait(timeout=20) == 1
    assert [c for c in job.calls() if "/hooks/" in c] == []


def test_a_second_sigterm_during_the_handshake_does_not_cut_it_short(
        tmp_path: Path, jobs: list[Job]) -> None:
    """Slurm may signal again (a preemption's grace time, then its cancel): the handshake
    runs once, to its end."""
    job = Job(tmp_path, TERMINATING_SLOW="2")
    jobs.append(job)
    job.holding()
    job.signal()
    job.wait_for_call("POST /hooks/v1/jobs/7/terminating")
    job.signal()
    assert job.process.wait(timeout=20) == 0
    calls = [c.split("?", 1)[0] for c in job.calls() if "/terminating" in c or "/pod" in c]
    assert calls == ["POST /hooks/v1/jobs/7/terminating", "GET /hooks/v1/jobs/7/pod"]
