"""End-to-end fixtures: the real test bed, started once per run (or reused), a namespace per test.

A test bed that this run started is stopped at the end of the run; one that was already up
(``python -m testbed up``) is left running, so a developer can iterate quickly, if it runs the
Kubernetes release asked for (``$SUNK_TESTBED_KUBERNETES``, default build.DEFAULT_KUBERNETES).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
from collections.abc import AsyncIterator, Generator, Iterator
from pathlib import Path

import httpx
import pytest

from sunk.kube import Client, connect
from testbed import build, cluster
from testbed.scheduler import DEMO_PROCESS
from testbed.scheduler import REPO as REPO
from testbed.scheduler import RunningScheduler as RunningScheduler
from testbed.scheduler import start_scheduler as start_scheduler
from tests.e2e.helpers import call_api, close_api

#: These run before the session's scheduler starts, in this order: they need the test bed's
#: hook port free.
FIRST = ("tests/e2e/test_chart.py", "tests/e2e/test_chart_install.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e/" in str(item.path):
            item.add_marker(pytest.mark.e2e)
    def rank(item: pytest.Item) -> int:
        path = str(item.path)
        return next((i for i, first in enumerate(FIRST) if path.endswith(first)), len(FIRST))

    items.sort(key=rank)  # stable: the rest as found


#: The logs whose lines from a failed test's run go with its failure report, so the cause of a
#: failure in CI can be read once CI's test bed is gone: every scheduler's, and slurmctld's.
FAILURE_LOGS = ("sunk-*.log", "slurmctld.log")
#: At most this many of each log's last lines.
FAILURE_LINES = 300
_LOG_START = pytest.StashKey[dict[Path, int]]()


def _logs() -> dict[Path, int]:
    """Each log of the running test bed and its size now (none before the bed is up)."""
    bed = cluster.Testbed.load()
    if bed is None:
        return {}
    found = [path for pattern in FAILURE_LOGS for path in (bed.path / "logs").glob(pattern)]
    sizes = {}
    for path in found:
        with contextlib.suppress(OSError):
            sizes[path] = path.stat().st_size
    return sizes


def _lines_since(start: dict[Path, int]) -> Iterator[tuple[str, str]]:
    """Each log's lines written since ``start`` (a log begun since: all), its last lines."""
    for path in sorted(_logs()):
        lines: list[str] = []
        with contextlib.suppress(OSError), path.open("rb") as log:
            log.seek(start.get(path, 0))
            lines = log.read().decode("utf-8", "replace").splitlines()
        if lines:
            yield (f"{path.name} during the test (its last {min(len(lines), FAILURE_LINES)} "
                   f"of {len(lines)} lines)", "\n".join(lines[-FAILURE_LINES:]))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if "tests/e2e/" in str(item.path):
        item.stash[_LOG_START] = _logs()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None],
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed and _LOG_START in item.stash:  # once: a failed call's teardown may fail too
        start = item.stash[_LOG_START]
        del item.stash[_LOG_START]
        for title, text in _lines_since(start):
            report.sections.append((title, text))
    return report


@pytest.fixture(scope="session")
def testbed() -> Iterator[cluster.Testbed]:
    """The test bed, for this run alone: a second run waits (its scheduler would otherwise
    answer the same Slurm scripts and fight over the same Pods)."""
    with cluster.exclusive():
        yield from _testbed()


def _testbed() -> Iterator[cluster.Testbed]:
    existing = cluster.Testbed.load()
    if existing is not None and DEMO_PROCESS in existing.pids:
        print("a demo is running; the tests need the test bed to themselves: restarting it",
              file=sys.stderr)
        cluster.down()
        existing = None
    kubernetes = build.wanted_kubernetes()
    if (existing is not None and existing.ready and all(existing.alive().values())
            and existing.kubernetes == kubernetes):
        yield existing
        return
    tb = cluster.up(node_count=int(os.environ.get("SUNK_TESTBED_NODES", "8")),
                    kubernetes=kubernetes)
    try:
        yield tb
    finally:
        cluster.down()


@pytest.fixture(scope="session")
async def kube(testbed: cluster.Testbed) -> AsyncIterator[Client]:
    api = await connect(testbed.kubeconfig)
    yield api
    await close_api(api)


@pytest.fixture(scope="session")
async def slurm(testbed: cluster.Testbed) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client of slurmrestd with the test bed's token."""
    async with httpx.AsyncClient(base_url=testbed.slurmrestd_url,
                                 headers=testbed.slurm_headers(), timeout=30) as client:
        yield client


@pytest.fixture
async def namespace(kube: Client) -> AsyncIterator[str]:
    """A namespace of the test's own, emptied and removed afterwards."""
    async with scratch_namespace(kube) as name:
        yield name


@pytest.fixture
async def other_namespace(kube: Client) -> AsyncIterator[str]:
    """A second namespace of the test's own (another user's, say)."""
    async with scratch_namespace(kube) as name:
        yield name


@contextlib.asynccontextmanager
async def scratch_namespace(kube: Client) -> AsyncIterator[str]:
    """The test bed has no namespace controller, so cleanup deletes the Pods itself (at once)
    and then finalizes the namespace as that controller would. The namespace is deleted first:
    once it is terminating, the API server refuses new Pods in it, so a Job's controller cannot
    make one after the Pods were deleted (one made then outlived its namespace: nothing could
    delete it, and its placeholder job held a node to KillWait and drained it)."""
    name = f"t-{secrets.token_hex(4)}"
    await kube.request("POST", "namespaces", json={"apiVersion": "v1", "kind": "Namespace",
                                                   "metadata": {"name": name}})
    yield name
    async with call_api(kube, "DELETE", url=f"namespaces/{name}"):
        pass
    async with call_api(kube, "GET", namespace=name, url="pods") as r:
        held = [p["metadata"]["name"] for p in r.json()["items"] if p["metadata"].get("finalizers")]
    for pod in held:  # a Job's controller may remove its Pod meanwhile: a 404 is fine
        async with call_api(kube, "PATCH", namespace=name, url=f"pods/{pod}",
                            json={"metadata": {"finalizers": None}},
                            headers={"Content-Type": "application/merge-patch+json"},
                            raise_for_status=False) as r:
            assert r.status_code in (200, 404), r.text
    async with call_api(kube, "DELETE", namespace=name, url="pods",
                        params={"gracePeriodSeconds": "0"}):
        pass
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name},
            "spec": {"finalizers": []}}
    async with call_api(kube, "PUT", url=f"namespaces/{name}/finalize", json=body):
        pass


# -- the scheduler under test ------------------------------------------------------------------

SCHEDULER_NAME = "sunk-e2e"


@pytest.fixture(scope="session")
def scheduler(testbed: cluster.Testbed) -> Iterator[RunningScheduler]:
    """The scheduler for the whole run, on the hook port the Slurm scripts call."""
    running = start_scheduler(testbed, name=SCHEDULER_NAME, hooks_port=testbed.ports["hooks"])
    yield running
    running.stop()


@contextlib.contextmanager
def hook_port_lent(scheduler: RunningScheduler, testbed: cluster.Testbed) -> Iterator[None]:
    """The session's scheduler stopped for a while, so that another can serve the hook port
    Slurm's scripts call; started again afterwards (the same object, a new process)."""
    scheduler.stop()
    try:
        yield
    finally:
        again = start_scheduler(testbed, name=scheduler.name, hooks_port=testbed.ports["hooks"])
        scheduler.process, scheduler.ports = again.process, again.ports
