"""Run ``sunk-scheduler`` against the test bed, as an operator would run it (tests, demo,
benchmarks)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from testbed import cluster, procs
from testbed.errors import TestbedError
from testbed.topology import GPU_PRODUCTS, SLURM_NAMESPACE

REPO = Path(__file__).resolve().parent.parent
GPU_TYPES = "H100_NVLINK_80GB=h100,A100_PCIE_80GB=a100"
#: The bed's DRA driver's product names -> their GRES types (testbed.dradriver).
DRA_TYPES = ",".join(f"{product}={gres}" for gres, product in GPU_PRODUCTS.items())


@dataclass
class RunningScheduler:
    """A ``sunk-scheduler`` process run against the test bed (as an operator would run it)."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path
    ports: dict[str, int]

    def url(self, what: str) -> str:
        return f"http://127.0.0.1:{self.ports[what]}"

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def command(testbed: cluster.Testbed, name: str, ports: dict[str, int],
            extra: list[str] | None = None) -> list[str]:
    """The ``sunk-scheduler`` command line for the test bed, in cluster scope."""
    hook_token = testbed.path / "hook-token"
    hook_token.write_text(testbed.hook_token)
    hook_token.chmod(0o600)
    return [
        sys.executable, "-m", "sunk",
        f"--scheduler-name={name}", "--scope=cluster", f"--kubeconfig={testbed.kubeconfig}",
        f"--slurm-api-base={testbed.slurmrestd_url}",
        f"--slurm-auth-token-file={testbed.path / 'slurm-token'}",
        f"--slurm-kill-wait={testbed.kill_wait}s",
        f"--health-probe-bind-address=127.0.0.1:{ports['health']}",
        f"--metrics-bind-address=127.0.0.1:{ports['metrics']}",
        f"--hooks-api-bind-address=127.0.0.1:{ports['hooks']}",
        f"--dashboard-bind-address=127.0.0.1:{ports['dashboard']}",
        f"--hooks-token-file={hook_token}",
        f"--slurmd-namespace={SLURM_NAMESPACE}",
        f"--gpu-types={GPU_TYPES}",
        f"--dra-types={DRA_TYPES}",
        f"--policies-dir={REPO / 'policies'}", "--slurm-poll-interval=0.5s",
        *(extra or []),
    ]


def wait_ready(url: str, *, pid_alive: Callable[[], bool], log: Path,
               within: float = 60) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not pid_alive():
            raise TestbedError(f"sunk-scheduler exited; see {log}:\n" + log.read_text()[-2000:])
        try:
            if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TestbedError(f"sunk-scheduler not ready within {within:.0f} s; see {log}")


def start_scheduler(testbed: cluster.Testbed, *, name: str,
                    extra: list[str] | None = None, hooks_port: int | None = None,
                    log_name: str | None = None,
                    env: dict[str, str] | None = None) -> RunningScheduler:
    """Start ``sunk-scheduler`` in cluster scope and wait until /readyz answers 200 (``env``:
    more of its environment)."""
    health, metrics, hooks, dashboard = procs.free_ports(4)
    ports = {"health": health, "metrics": metrics, "hooks": hooks_port or hooks,
             "dashboard": dashboard}
    log = testbed.path / "logs" / f"{log_name or name}.log"
    cmd = command(testbed, name, ports, extra)
    with log.open("ab") as out:
        process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=REPO,
                                   env={**os.environ, **env} if env else None)
    running = RunningScheduler(name, process, log, ports)
    try:
        wait_ready(running.url("health"), pid_alive=lambda: process.poll() is None, log=log)
    except TestbedError:
        running.stop()
        raise
    return running


DEMO_NAME = "sunk"
DEMO_PROCESS = "sunk-scheduler"


def start_demo_scheduler(testbed: cluster.Testbed) -> int:
    """The demo's scheduler: a test bed process (``down`` stops it) on the hook port the Slurm
    scripts call, with its dashboard on 127.0.0.1:8082 when that port is free."""
    health, metrics, dashboard = procs.free_ports(3)
    if procs.port_free(8082):
        dashboard = 8082
    ports = {"health": health, "metrics": metrics, "hooks": testbed.ports["hooks"],
             "dashboard": dashboard}
    testbed.ports.update({f"demo_{k}": v for k, v in ports.items()})
    log = testbed.log(DEMO_PROCESS)
    pid = procs.start(command(testbed, DEMO_NAME, ports), log)
    testbed.pids[DEMO_PROCESS] = pid
    testbed.save()
    wait_ready(f"http://127.0.0.1:{health}", pid_alive=lambda: procs.alive(pid), log=log)
    return pid
