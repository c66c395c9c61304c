"""The dashboard in a real browser: Debian's headless Chromium driven by Playwright, against the
real ``sunk-scheduler`` process on the test bed. Each test loads a page once and then watches it
change by itself (htmx refreshes), marking the window to prove the page was never reloaded."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from playwright.async_api import (
    Browser,
    ConsoleMessage,
    Locator,
    Page,
    async_playwright,
    expect,
)

from sunk.kube import Client
from testbed import cluster, topology
from tests.e2e.conftest import RunningScheduler
from tests.e2e.helpers import create, pod_manifest

CHROMIUM = Path("/usr/bin/chromium")
HAVE_CHROMIUM = CHROMIUM.exists()
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
PREFIX = "sunk.coreweave.com/"


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[Browser]:
    if not HAVE_CHROMIUM:
        pytest.fail("browser tests need Debian's chromium: apt-get install -y chromium")
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=str(CHROMIUM),
                                                   args=CHROMIUM_ARGS)
        yield browser
        await browser.close()


@pytest.fixture
async def page(browser: Browser) -> AsyncIterator[Page]:
    """A fresh tab; the test fails if the page logs an error (a script error, a blocked
    resource or a Content-Security-Policy violation)."""
    context = await browser.new_context(viewport={"width": 1440, "height": 900})
    tab = await context.new_page()
    tab.set_default_timeout(30_000)
    errors: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            errors.append(message.text)

    tab.on("console", on_console)
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    yield tab
    await context.close()
    assert errors == []


async def load_once(page: Page, url: str) -> None:
    """Open ``url`` and mark the document; :func:`still_the_same_page` checks the mark."""
    await page.goto(url)
    await page.evaluate("window.__sunkLoaded = 'once'")


async def still_the_same_page(page: Page) -> None:
    assert await page.evaluate("window.__sunkLoaded") == "once", "the page was reloaded"


def sbatch_exclusive(testbed: cluster.Testbed, node: topology.TestbedNode, name: str) -> str:
    """A plain Slurm job holding the whole of ``node``; returns its id."""
    out = testbed.slurm("sbatch", "--parsable", f"--nodelist={node.slurm_name}", "--exclusive",
                        f"--job-name={name}", "--chdir=/tmp", "--output=/dev/null",
                        "--wrap=sleep 600")
    return out.strip().split(";")[0]


async def cell(page: Page, row: Locator, column: str) -> Locator:
    """The cell of ``row`` under the Pods table's header ``column`` (by name, not position:
    columns are added)."""
    headers = [h.strip() for h in await page.locator("table thead th").all_inner_texts()]
    assert column in headers, headers
    return row.locator("td").nth(headers.index(column))


async def test_pods_move_from_waiting_to_bound_without_a_reload(
        page: Page, kube: Client, namespace: str, scheduler: RunningScheduler,
        testbed: cluster.Testbed) -> None:
    node = testbed.nodes[-1]
    blocker = sbatch_exclusive(testbed, node, "dashboard-blocker")
    try:
        # The Pod may only go to a node a Slurm job holds whole: Slurm keeps its job pending.
        await create(kube, pod_manifest("patient", namespace, scheduler.name, annotations={
            f"{PREFIX}required-nodes": node.slurm_name}))
        await load_once(page, f"{scheduler.url('dashboard')}/pods?namespace={namespace}")
        row = page.locator(f'tr[data-pod="{namespace}/patient"]')
        await expect(row).to_have_attribute("data-state", "waiting")
        await expect(await cell(page, row, "Job state")).to_have_text("PENDING")
        await expect(await cell(page, row, "Pending reason")).not_to_be_empty()  # Slurm's
        await expect(await cell(page, row, "Kubernetes Node")).to_be_empty()  # not yet
        if testbed.accounting:  # the user's defaults, as Slurm has them
            await expect(await cell(page, row, "Account / QOS")).to_have_text(
                "default / normal")
    finally:
        testbed.slurm("scancel", blocker)
    await expect(row).to_have_attribute("data-state", re.compile(r"^(bound|running)$"),
                                        timeout=60_000)
    await expect(await cell(page, row, "Slurm node")).to_have_text(node.slurm_name)
    await expect(await cell(page, row, "Kubernetes Node")).to_have_text(node.k8s_name)
    await expect(await cell(page, row, "To bound")).to_have_text(re.compile(r"\d"))
    await expect(page.locator("#header")).to_contain_text("Kubernetes API")
    await still_the_same_page(page)


HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'


async def test_markup_in_user_input_is_shown_as_text(
        page: Page, kube: Client, namespace: str,
        scheduler: RunningScheduler) -> None:
    # Kubernetes names cannot hold "<": the markup goes into an annotation, which the policies
    # reject, quoting it in the rejection message that the Pods page shows.
    await create(kube, pod_manifest("hostile", namespace, scheduler.name, annotations={
        f"{PREFIX}exclusive": HOSTILE}))
    await load_once(page, f"{scheduler.url('dashboard')}/pods?namespace={namespace}")
    row = page.locator(f'tr[data-pod="{namespace}/hostile"]')
    await expect(row).to_have_attribute("data-state", "rejected")
    await expect(row.locator("td.event")).to_contain_text(HOSTILE)
    assert await row.locator("script, img").count() == 0
    # and the Pod's own page: its annotations, its Events (from the API server), its history
    await row.locator("td.name a").click()
    await expect(page.locator("dl.kv").nth(1)).to_contain_text(HOSTILE)
    await expect(page.locator("table.events")).to_contain_text(HOSTILE)
    await expect(page.locator("#content")).to_contain_text("InvalidAnnotation")
    assert await page.locator("main script, main img").count() == 0
    assert await page.evaluate("window.__pwned") is None


async def test_a_nodes_lock_state_changes_on_the_page_while_a_slurm_job_locks_it(
        page: Page, scheduler: RunningScheduler, testbed: cluster.Testbed) -> None:
    node = testbed.nodes[0]
    await load_once(page, f"{scheduler.url('dashboard')}/nodes")
    row = page.locator(f'tr[data-node="{node.slurm_name}"]')
    await expect(row.locator("td").nth(1)).to_contain_text(node.k8s_name)
    await expect(row).to_have_attribute("data-lock", "false")
    await expect(row.locator("td").nth(4)).to_be_empty()
    job = sbatch_exclusive(testbed, node, "dashboard-lock")
    try:
        # Its prolog asks sunk's syncer to lock the node: lock taint on the Node, evictions,
        # then the slurmd Pod's annotation says "locked" (a plain Slurm job: a normal lock).
        await expect(row).to_have_attribute("data-lock", "locked")
        await expect(row.locator(".lock")).to_have_text("locked")
        await expect(row.locator("td").nth(4)).to_have_text(re.compile(r"NoSchedule"))
        await expect(row.locator("td").nth(2)).to_contain_text("ALLOCATED")
    finally:
        testbed.slurm("scancel", job)
    # The node runs nothing any more: the syncer unlocks it.
    await expect(row).to_have_attribute("data-lock", "false", timeout=60_000)
    await expect(row.locator("td").nth(4)).to_be_empty()
    await expect(row.locator("td").nth(2)).not_to_contain_text("ALLOCATED")
    await still_the_same_page(page)


async def test_the_json_api_describes_the_test_bed(scheduler: RunningScheduler,
                                                   testbed: cluster.Testbed) -> None:
    async with httpx.AsyncClient(base_url=scheduler.url("dashboard")) as client:
        nodes = (await client.get("/api/v1/nodes")).json()["nodes"]
        summary = (await client.get("/api/v1/summary")).json()
        schema = (await client.get("/schema/openapi.json")).json()
    assert {(n["slurm_node"], n["k8s_node"]) for n in nodes} == {
        (n.slurm_name, n.k8s_name) for n in testbed.nodes}
    assert all(n["gpus"] == 8 and n["cpus"] == 32 for n in nodes)
    assert summary["scheduler_name"] == scheduler.name
    assert summary["kubernetes"]["ok"] and summary["slurm"]["ok"]
    assert "/api/v1/pods" in schema["paths"]
