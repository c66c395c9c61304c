"""``python -m tests.e2e.screenshots [DIR]``: the dashboard's screenshots for the docs.

The screenshots are of ``python -m testbed demo``: its scheduler and example Pods (the demo's
scheduler is the one the Slurm nodes' scripts call, so locking works). It starts the demo if
none is running; otherwise it restarts the demo's scheduler (so that it serves this checkout's
pages) and re-creates the example Pods (so that their rows are complete: a scheduler started
after a Pod was bound knows less of its history). To show
a Pod that waits and a locked node too, this adds a plain Slurm job that takes one idle node
whole and a Pod that may only go there; it removes both afterwards, and leaves the demo running.
It holds the end-to-end tests' lock meanwhile, so no test run restarts the test bed under it.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import signal
import sys
import time
from pathlib import Path

import httpx
from playwright.async_api import async_playwright

from sunk.kube import connect
from testbed import build, cluster, demo, procs
from testbed.scheduler import DEMO_NAME, DEMO_PROCESS, REPO, start_demo_scheduler
from tests.e2e.helpers import call_api, close_api, create, eventually, pod_manifest
from tests.e2e.test_dashboard import CHROMIUM, CHROMIUM_ARGS, PREFIX, sbatch_exclusive

NAMESPACE = "demo"
HELD_POD = "eval-held"
MAX_HEIGHT = 900  # a big test bed's Nodes page is thousands of pixels long: its top will do
VIEWS = {"pods": f"/pods?namespace={NAMESPACE}", "nodes": "/nodes?state=busy",
         "policies": "/policies", "gangs": "/gangs"}


async def _shoot(testbed: cluster.Testbed, dashboard: str, out: Path) -> None:
    kube = await connect(testbed.kubeconfig)
    client = httpx.AsyncClient(base_url=dashboard)
    nodes = (await client.get("/api/v1/nodes")).json()["nodes"]
    idle = [n["slurm_node"] for n in nodes if n["slurm_state"] == "IDLE"]
    if not idle:
        raise SystemExit("no idle Slurm node to hold for the waiting Pod")
    held = next(n for n in testbed.nodes if n.slurm_name == idle[0])
    blocker = sbatch_exclusive(testbed, held, "nightly-benchmark")
    try:
        await create(kube, pod_manifest(HELD_POD, NAMESPACE, DEMO_NAME, cpu="4", memory="16Gi",
                                        annotations={f"{PREFIX}required-nodes": held.slurm_name}))

        async def settled() -> bool:
            pods = (await client.get("/api/v1/pods", params={"namespace": NAMESPACE})).json()
            states = {p["name"]: p["state"] for p in pods["pods"]}
            locks = {n["slurm_node"]: n["lock"]
                     for n in (await client.get("/api/v1/nodes")).json()["nodes"]}
            return (states.get(HELD_POD) == "waiting" and locks.get(held.slurm_name) == "locked"
                    and list(states.values()).count("running") >= 3
                    and "rejected" in states.values())

        await eventually(settled, within=90)
        await asyncio.sleep(6)  # one more Slurm node poll: allocations on the Nodes page
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=str(CHROMIUM),
                                                       args=CHROMIUM_ARGS)
            page = await browser.new_page(viewport={"width": 1440, "height": 520})
            for name, path in VIEWS.items():
                await page.goto(dashboard + path)
                await page.wait_for_timeout(300)
                height = await page.evaluate("document.documentElement.scrollHeight")
                await page.screenshot(path=str(out / f"{name}.png"), full_page=True, clip={
                    "x": 0, "y": 0, "width": 1440, "height": min(int(height), MAX_HEIGHT)})
                print(f"wrote {out / f'{name}.png'}")
            await browser.close()
    finally:
        testbed.slurm("scancel", blocker)
        async with call_api(kube, "DELETE", namespace=NAMESPACE, url=f"pods/{HELD_POD}",
                            raise_for_status=False):
            pass
        await client.aclose()
        await close_api(kube)


def _restart_demo(testbed: cluster.Testbed, pid: int) -> None:
    testbed.kubectl("delete", "pods", "-n", NAMESPACE, "--all", "--grace-period=0", "--wait")
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    while procs.alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    start_demo_scheduler(testbed)
    testbed.kubectl("apply", "-f", str(demo.EXAMPLES))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0]) if args else REPO / "docs" / "screenshots"
    out.mkdir(parents=True, exist_ok=True)
    with open("/tmp/sunk-testbed.e2e.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        testbed = cluster.Testbed.load()
        pid = testbed.pids.get(DEMO_PROCESS) if testbed is not None else None
        if testbed is None or pid is None or not procs.alive(pid):
            demo.run(node_count=4, suite=build.DEFAULT_SUITE)
            testbed = cluster.Testbed.load()
            assert testbed is not None
        else:
            _restart_demo(testbed, pid)
        dashboard = f"http://127.0.0.1:{testbed.ports['demo_dashboard']}"
        asyncio.run(_shoot(testbed, dashboard, out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
