"""Starting and stopping the test bed's processes, and the ports and mounts they use."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from testbed.errors import TestbedError


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports (held open together while picked, so none repeats)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]


def require_port(port: int, what: str) -> int:
    if not port_free(port):
        raise TestbedError(f"port {port} on 127.0.0.1 (for {what}) is already in use; "
                           f"free it or choose another port")
    return port


def free_port_range(count: int, start: int = 17000, stop: int = 40000) -> int:
    """The first base port such that ``base .. base+count-1`` are all free."""
    base = start
    while base + count < stop:
        busy = next((p for p in range(base, base + count) if not port_free(p)), None)
        if busy is None:
            return base
        base = busy + 1
    raise TestbedError(f"no {count} consecutive free ports between {start} and {stop}")


#: Processes started by this Python process, kept so they are reaped (no zombies, and no
#: "subprocess still running" warning when a Popen object is collected).
_children: dict[int, subprocess.Popen[bytes]] = {}


def start(cmd: list[str], log: Path, *, env: dict[str, str] | None = None) -> int:
    """Start ``cmd`` in its own session, output to ``log``; return its pid."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    _children[proc.pid] = proc
    return proc.pid


def alive(pid: int) -> bool:
    if pid <= 0:
        return False  # never ask about process groups (0) or every process (-1)
    if (child := _children.get(pid)) is not None:
        if child.poll() is None:
            return True
        del _children[pid]
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours counts as gone.
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z"):
            os.waitpid(pid, os.WNOHANG)
            return False
    return True


def stop(pids: list[int], *, timeout: float = 10.0) -> None:
    """SIGTERM each process group, then SIGKILL what is left after ``timeout``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, sig)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(alive(p) for p in pids):
            time.sleep(0.1)
        if not any(alive(p) for p in pids):
            return


def pids_rooted_in(root: Path) -> list[int]:
    """Every process whose root directory is ``root`` (daemons, slurmstepd and job scripts)."""
    found = []
    target = str(root.resolve())
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if os.readlink(entry / "root") == target:
                found.append(int(entry.name))
    return found


def mounts_under(root: Path) -> list[str]:
    """Mount points at or below ``root``, deepest first (the order to unmount them)."""
    target = str(root.resolve())
    points = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        point = line.split()[1].replace("\\040", " ")
        if point == target or point.startswith(target + "/"):
            points.append(point)
    return sorted(set(points), key=len, reverse=True)


def run(cmd: list[str], *, what: str, timeout: float = 60, env: dict[str, str] | None = None,
        input: str | None = None) -> str:
    """Run a quick command and return its stdout; a failure is a one-line TestbedError."""
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                             input=input)
    except subprocess.TimeoutExpired as exc:
        raise TestbedError(f"{what} timed out after {timeout:.0f}s") from exc
    if out.returncode != 0:
        msg = (out.stderr or out.stdout).strip().splitlines()
        raise TestbedError(f"{what} failed: {msg[-1] if msg else f'exit {out.returncode}'}")
    return out.stdout


def wait_for(check: Callable[[], bool], *, what: str, timeout: float,
             log: Path | None = None, pid: int | None = None) -> None:
    """Poll ``check`` until true; fail early (with the log's tail) if ``pid`` died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if check():
                return
        if pid is not None and not alive(pid):
            break
        time.sleep(0.2)
    detail = ""
    if log is not None and log.exists():
        tail = log.read_text(errors="replace").strip().splitlines()[-8:]
        detail = f"; last lines of {log}:\n" + "\n".join(tail)
    state = "exited" if pid is not None and not alive(pid) else f"not ready after {timeout:.0f}s"
    raise TestbedError(f"{what} {state}{detail}")
