"""Paging through the Pods: ``offset`` and ``limit`` on the view model, the page, its htmx
refresh and the JSON API."""

from __future__ import annotations

import html
import re
from urllib.parse import parse_qs, urlsplit

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from web import pods
from web.viewmodels import PodList, PodRow

from .sample import StaticScheduler

Client = AsyncTestClient[Litestar]

NAMESPACES = ("alpha", "beta", "gamma")
#: Every Pod of :func:`scheduler`, in the order the list shows them.
ORDER = [f"{ns}/pod-{i}" for ns in NAMESPACES for i in range(4)]
#: Between the first and the last row shown (an en dash).
DASH = "\N{EN DASH}"


@pytest.fixture
def scheduler(now: float) -> StaticScheduler:
    """Four Pods in each of three namespaces, added out of order (the list's order is its own,
    not the order the scheduler learnt of them): ``pod-1`` and ``pod-3`` run, the others wait.
    Overrides the sample cluster of ``conftest``, so ``client`` serves this one."""
    s = StaticScheduler()
    s.state.slurm_healthy = True
    s.add_node("h100-000", "kwok-node-000")
    for i in (3, 0, 2, 1):
        for ns in reversed(NAMESPACES):
            if i % 2:
                s.add_pod(ns, f"pod-{i}", created=now - 60, phase="Running",
                          slurm_node="h100-000", k8s_node="kwok-node-000", bound_after=1)
            else:
                s.add_pod(ns, f"pod-{i}", created=now - 30)
    assert list(s.state.pods) != ORDER
    return s


def keys(listing: PodList) -> list[str]:
    return [f"{p.namespace}/{p.name}" for p in listing.pods]


def shown(text: str) -> list[str]:
    """The Pods a page or refresh shows, in order."""
    return re.findall(r'<tr data-pod="([^"]+)"', text)


def link(text: str, rel: str) -> str | None:
    """The page's one ``rel`` link (the pager may show twice: the same link), unescaped."""
    found = {html.unescape(h) for h in re.findall(rf'<a rel="{rel}" href="([^"]*)"', text)}
    assert len(found) <= 1, found
    return found.pop() if found else None


def params(url: str) -> dict[str, list[str]]:
    parts = urlsplit(url)
    assert parts.path == "/pods", url
    return parse_qs(parts.query)


def meta(text: str) -> str:
    found = re.search(r"<span data-range>(.*?)</span>", text, re.S)
    assert found is not None
    return found.group(1)


# -- the view model ----------------------------------------------------------------------------


def test_offset_slices_the_rows_across_namespaces(now: float,
                                                  scheduler: StaticScheduler) -> None:
    page = pods.pods(scheduler, now, offset=3, limit=4)
    assert keys(page) == ["alpha/pod-3", "beta/pod-0", "beta/pod-1", "beta/pod-2"]
    assert (page.total, page.matching, page.offset, page.limit) == (12, 12, 3, 4)
    last = pods.pods(scheduler, now, offset=10, limit=4)
    assert keys(last) == ["gamma/pod-2", "gamma/pod-3"]
    assert (last.total, last.matching, last.offset, last.limit) == (12, 12, 10, 4)
    # pages one after another: every Pod once, in order
    pages = [keys(pods.pods(scheduler, now, offset=at, limit=5)) for at in (0, 5, 10)]
    assert pages == [ORDER[:5], ORDER[5:10], ORDER[10:]]
    assert keys(pods.pods(scheduler, now)) == ORDER  # offset 0 by default


def test_filters_apply_before_the_offset(now: float, scheduler: StaticScheduler) -> None:
    page = pods.pods(scheduler, now, state="running", offset=2, limit=3)
    assert keys(page) == ["beta/pod-1", "beta/pod-3", "gamma/pod-1"]
    assert (page.total, page.matching) == (12, 6)
    page = pods.pods(scheduler, now, namespace="beta", query="POD-", offset=3, limit=10)
    assert keys(page) == ["beta/pod-3"]
    assert (page.total, page.matching) == (12, 4)
    page = pods.pods(scheduler, now, namespace="gamma", state="waiting", offset=1, limit=1)
    assert keys(page) == ["gamma/pod-2"] and page.matching == 2


def test_an_offset_past_the_end_shows_no_rows_and_still_counts(
        now: float, scheduler: StaticScheduler) -> None:
    page = pods.pods(scheduler, now, offset=12, limit=5)
    assert (keys(page), page.total, page.matching, page.offset) == ([], 12, 12, 12)
    page = pods.pods(scheduler, now, state="running", offset=6)
    assert (keys(page), page.matching) == ([], 6)


def test_rows_are_built_only_for_the_page(now: float, scheduler: StaticScheduler,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[str] = []
    build = pods._pod_row

    def counted(*args: object, **kwargs: object) -> PodRow:
        row = build(*args, **kwargs)  # type: ignore[arg-type]
        built.append(f"{row.namespace}/{row.name}")
        return row

    monkeypatch.setattr(pods, "_pod_row", counted)
    page = pods.pods(scheduler, now, offset=5, limit=3)
    assert built == keys(page) == ORDER[5:8]
    assert page.matching == 12
    built.clear()
    assert pods.pods(scheduler, now, offset=40, limit=3).matching == 12
    assert built == []


# -- the page and its refresh ------------------------------------------------------------------


async def test_the_page_says_which_rows_it_shows_and_links_the_pages_around(
        client: Client) -> None:
    r = await client.get("/pods", params={"state": "running", "q": "pod", "limit": 2,
                                          "offset": 2})
    assert r.status_code == 200
    assert shown(r.text) == ["beta/pod-1", "beta/pod-3"]
    assert meta(r.text) == f"Pods 3{DASH}4 of 6 matching (12 in all)"
    previous, following = link(r.text, "prev"), link(r.text, "next")
    assert previous is not None and following is not None
    # both keep the filters and the limit; the first page needs no offset
    assert params(previous) == {"state": ["running"], "q": ["pod"], "limit": ["2"]}
    assert params(following) == {"state": ["running"], "q": ["pod"], "limit": ["2"],
                                 "offset": ["4"]}
    r = await client.get(following)
    assert shown(r.text) == ["gamma/pod-1", "gamma/pod-3"]
    assert meta(r.text) == f"Pods 5{DASH}6 of 6 matching (12 in all)"
    assert link(r.text, "next") is None and '<span class="off">Next →</span>' in r.text
    r = await client.get(previous)
    assert shown(r.text) == ["alpha/pod-1", "alpha/pod-3"]
    assert meta(r.text) == f"Pods 1{DASH}2 of 6 matching (12 in all)"
    assert link(r.text, "prev") is None and link(r.text, "next") == following.replace(
        "offset=4", "offset=2")


async def test_links_keep_the_namespace_and_a_default_limit_stays_out(client: Client) -> None:
    r = await client.get("/pods?namespace=gamma&offset=1")
    assert shown(r.text) == ["gamma/pod-1", "gamma/pod-2", "gamma/pod-3"]
    assert meta(r.text) == f"Pods 2{DASH}4 of 4 matching (12 in all)"
    previous = link(r.text, "prev")
    assert previous is not None and params(previous) == {"namespace": ["gamma"]}
    assert link(r.text, "next") is None


async def test_one_page_needs_no_pager(client: Client) -> None:
    r = await client.get("/pods")
    assert shown(r.text) == ORDER
    assert meta(r.text) == f"Pods 1{DASH}12 of 12 matching"
    assert 'class="pager"' not in r.text
    assert link(r.text, "prev") is None and link(r.text, "next") is None


async def test_an_offset_past_the_end_links_back_to_the_first_page(client: Client) -> None:
    r = await client.get("/pods?state=waiting&limit=4&offset=50")
    assert r.status_code == 200
    assert shown(r.text) == []
    assert meta(r.text) == "No Pods from 51 on: 6 matching"
    assert "No Pods match these filters" not in r.text
    first = link(r.text, "first")
    assert first is not None and params(first) == {"state": ["waiting"], "limit": ["4"]}
    # Previous leads to the last page with rows, not to another empty one
    previous = link(r.text, "prev")
    assert previous is not None and params(previous) == {
        "state": ["waiting"], "limit": ["4"], "offset": ["4"]}
    assert shown((await client.get(previous)).text) == ["gamma/pod-0", "gamma/pod-2"]
    assert shown((await client.get(first)).text) == [
        "alpha/pod-0", "alpha/pod-2", "beta/pod-0", "beta/pod-2"]
    # the refresh of such a page says the same, and does not fail either
    r = await client.get("/pods?state=waiting&limit=4&offset=50", headers={"HX-Request": "true"})
    assert r.status_code == 200 and link(r.text, "first") == first


async def test_the_refresh_stays_on_the_page(client: Client,
                                             scheduler: StaticScheduler) -> None:
    r = await client.get("/pods?namespace=beta&offset=2&limit=1")
    assert 'hx-get="/pods?namespace=beta&amp;offset=2&amp;limit=1"' in r.text
    assert 'href="/api/v1/pods?namespace=beta&amp;offset=2&amp;limit=1"' in r.text  # JSON
    r = await client.get("/pods?namespace=beta&offset=2&limit=1",
                         headers={"HX-Request": "true"})
    assert r.text.lstrip().startswith(
        '<section id="content" hx-get="/pods?namespace=beta&amp;offset=2&amp;limit=1"')
    assert "<form" not in r.text
    assert shown(r.text) == ["beta/pod-2"]
    assert meta(r.text) == f"Pods 3{DASH}3 of 4 matching (12 in all)"
    # a Pod before it goes: the next refresh (its own URL) shows the same offset, not page one
    scheduler.state.forget("alpha/pod-0")
    refresh = re.search(r'<section id="content" hx-get="([^"]+)"', r.text)
    assert refresh is not None
    again = await client.get(html.unescape(refresh.group(1)), headers={"HX-Request": "true"})
    assert shown(again.text) == ["beta/pod-2"]
    assert meta(again.text) == f"Pods 3{DASH}3 of 4 matching (11 in all)"


async def test_the_filters_keep_the_limit_and_start_again_from_the_first_page(
        client: Client) -> None:
    r = await client.get("/pods?state=running&offset=2&limit=2")
    form = re.search(r"<form.*?</form>", r.text, re.S)
    assert form is not None
    assert '<input type="hidden" name="limit" value="2">' in form.group(0)
    assert 'name="offset"' not in form.group(0)
    assert 'name="limit"' not in (await client.get("/pods?offset=2")).text


@pytest.mark.parametrize("path", ["/pods", "/api/v1/pods"])
@pytest.mark.parametrize("offset", ["-1", "x", "1.5", "", "1000000001"])
async def test_a_bad_offset_is_refused(client: Client, path: str, offset: str) -> None:
    r = await client.get(path, params={"offset": offset, "state": "running"})
    assert r.status_code == 400
    body = r.json()
    assert [e["key"] for e in body["extra"]] == ["offset"]
    assert body["extra"][0]["message"].startswith("Expected `int`")
    r = await client.get(path, params={"offset": offset}, headers={"HX-Request": "true"})
    assert r.status_code == 400


# -- JSON --------------------------------------------------------------------------------------


async def test_the_api_pages_too_and_says_how(client: Client) -> None:
    body = (await client.get("/api/v1/pods?offset=4&limit=3")).json()
    assert (body["total"], body["matching"], body["offset"], body["limit"]) == (12, 12, 4, 3)
    assert [f"{p['namespace']}/{p['name']}" for p in body["pods"]] == ORDER[4:7]
    body = (await client.get("/api/v1/pods?state=running&offset=5&limit=3")).json()
    assert [f"{p['namespace']}/{p['name']}" for p in body["pods"]] == ["gamma/pod-3"]
    assert (body["matching"], body["offset"], body["limit"]) == (6, 5, 3)
    body = (await client.get("/api/v1/pods?offset=99")).json()
    assert (body["pods"], body["matching"], body["offset"], body["limit"]) == ([], 12, 99, 1000)
    # a script pages through with offset += limit while offset < matching
    seen: list[str] = []
    offset, matching = 0, 1
    while offset < matching:
        body = (await client.get("/api/v1/pods", params={"offset": offset, "limit": 5})).json()
        seen += [f"{p['namespace']}/{p['name']}" for p in body["pods"]]
        offset, matching = body["offset"] + body["limit"], body["matching"]
    assert seen == ORDER
