"""The dashboard over HTTP: pages, their htmx refreshes, the JSON API, escaping and auth."""

from __future__ import annotations

import base64
import re
import time

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from web import app
from web.app import _environment
from web.auth import auth_from_env
from web.formatting import duration, mebibytes

from .conftest import GANG_SCRIPT, SCRIPT, MakeClient
from .sample import StaticScheduler, broken_policies

Client = AsyncTestClient[Litestar]
ESCAPED = "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"


# -- pages ------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/pods", "/nodes", "/policies", "/pods/team-a/waiting-1",
                                  "/gangs"])
async def test_pages_render_whole_with_header(client: Client, path: str) -> None:
    r = await client.get(path)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    assert r.text.startswith("<!doctype html>")
    assert 'src="/static/htmx.min.js"' in r.text
    assert 'id="header"' in r.text and 'hx-swap-oob' not in r.text
    assert 'hx-trigger="every 2s"' in r.text
    assert r.headers["cache-control"] == "no-store"


async def test_root_leads_to_pods(client: Client) -> None:
    r = await client.get("/", follow_redirects=False)
    assert r.status_code in (301, 302, 307) and r.headers["location"] == "/pods"


async def test_htmx_refresh_gets_only_the_table_and_the_header_out_of_band(
        client: Client) -> None:
    r = await client.get("/pods?state=waiting", headers={"HX-Request": "true"})
    assert r.status_code == 200
    assert r.text.lstrip().startswith('<section id="content" hx-get="/pods?state=waiting"')
    assert "<html" not in r.text and "<form" not in r.text
    assert '<header id="header" hx-swap-oob="true">' in r.text
    assert 'data-pod="team-a/waiting-1"' in r.text and "running-1" not in r.text
    assert "HX-Request" in r.headers["vary"]


async def test_big_pages_are_compressed(client: Client) -> None:
    r = await client.get("/pods", headers={"Accept-Encoding": "gzip"})
    assert r.headers["content-encoding"] == "gzip" and "running-1" in r.text


async def test_history_restore_gets_the_whole_page(client: Client) -> None:
    r = await client.get("/pods", headers={"HX-Request": "true",
                                           "HX-History-Restore-Request": "true"})
    assert r.text.startswith("<!doctype html>")


async def test_pods_page_shows_every_column(client: Client) -> None:
    r = await client.get("/pods?namespace=team-a")
    row = re.search(r'<tr data-pod="team-a/running-1".*?</tr>', r.text, re.S)
    assert row is not None
    cells = [re.sub(r"<[^>]+>", "", c).strip()
             for c in re.findall(r"<td[^>]*>(.*?)</td>", row.group(0), re.S)]
    assert cells == ["team-a", "running-1", "running", "Running", "12", "RUNNING",
                     "research / high", "", "h100-000", "kwok-node-000", cells[10], "1.2s",
                     "Scheduled: Successfully assigned", ""]
    # 600 s old when the cluster was built (at collection: the suite may take a while since)
    assert re.fullmatch(r"1\dm\d\ds", cells[10])
    assert "team-b" not in r.text.split("<tbody>")[1]


async def test_filters_keep_their_values_and_the_refresh_url(client: Client) -> None:
    r = await client.get("/pods?namespace=team-b&state=rejected&q=ev")
    assert '<option selected>team-b</option>' in r.text
    assert '<option selected>rejected</option>' in r.text
    assert 'value="ev"' in r.text
    assert 'hx-get="/pods?namespace=team-b&amp;state=rejected&amp;q=ev"' in r.text
    assert re.findall(r'data-pod="([^"]+)"', r.text) == ["team-b/evil"]


async def test_unknown_namespace_filter_is_still_selectable(client: Client) -> None:
    r = await client.get("/pods?namespace=later")
    assert '<option selected>later</option>' in r.text
    assert "No Pods match these filters" in r.text


async def test_nodes_page_shows_lock_taint_and_drain(client: Client) -> None:
    r = await client.get("/nodes")
    assert 'data-node="h100-000" data-lock="locked"' in r.text
    assert "true:NoSchedule" in r.text
    assert "from Kubernetes" in r.text and "k8s: cordoned by kubectl" in r.text
    assert 'href="/pods/team-a/running-1"' in r.text
    r = await client.get("/nodes?state=drain")
    assert re.findall(r'data-node="([^"]+)"', r.text) == ["a100-001", "h100-002"]


async def test_nodes_page_says_which_pods_slurm_does_not_count(
        client: Client, scheduler: StaticScheduler) -> None:
    assert "Pods not counted by Slurm" not in (await client.get("/nodes")).text
    scheduler.state.not_counted["h100-000"] = (
        "Slurm ran job 332 on h100-000, but Pods Slurm does not count take the room on Node "
        "node-0: team-a/stray")
    r = await client.get("/nodes")
    assert 'data-note-for="h100-000"' in r.text and "team-a/stray" in r.text
    (row,) = [n for n in (await client.get("/api/v1/nodes")).json()["nodes"]
              if n["slurm_node"] == "h100-000"]
    assert "team-a/stray" in row["not_counted"]


async def test_policies_page_shows_a_failed_reload(client: Client,
                                                   scheduler: StaticScheduler) -> None:
    assert "reload failed" not in (await client.get("/policies")).text
    scheduler.policies = broken_policies()
    r = await client.get("/policies")
    assert "The last reload failed" in r.text and "set #3 stays in force" in r.text
    assert "expression does not compile: found &#39;&lt;&#39;" in r.text
    assert 'data-policy="sunk-annotations"' in r.text


async def test_policies_page_lists_evaluation_errors_escaped(client: Client,
                                                            scheduler: StaticScheduler) -> None:
    from sunk.policy import EvaluationError, RecentError

    assert "None lately." in (await client.get("/policies")).text
    scheduler.policies.recent = [RecentError(time.time(), "team-b/evil", EvaluationError(
        "gpus", "validations[0]", f"no such key {SCRIPT}", enforced=True))]
    r = await client.get("/policies")
    assert "team-b/evil" in r.text and "validations[0]" in r.text and "denied" in r.text
    assert SCRIPT not in r.text and "no such key &lt;script&gt;" in r.text
    api = (await client.get("/api/v1/policies")).json()
    assert api["evaluation_errors"][0]["pod"] == "team-b/evil"


async def test_pod_page_shows_history_events_and_job(client: Client) -> None:
    r = await client.get("/pods/team-a/running-1")
    assert "Slurm job 12 submitted" in r.text  # history
    assert "InvalidAnnotation" in r.text  # the (fake) Events
    assert "&#34;cpus_per_task&#34;: 2" in r.text  # the job description, as JSON
    assert "kwok-node-000" in r.text


async def test_a_waiting_pod_shows_why_and_slurms_expected_start(client: Client) -> None:
    page = (await client.get("/pods/team-a/waiting-1")).text
    assert ("<dt>Why it waits</dt><dd class=\"waiting\">Slurm job 11 is pending (Resources): "
            "the nodes it can use are busy;") in page
    assert "<dt>Expected start</dt>" in page
    listing = (await client.get("/pods")).text
    (cell,) = re.findall(r'<tr data-pod="team-a/waiting-1".*?<td class="reason"([^>]*)>(.*?)</td>',
                         listing, re.S)
    assert 'title="Slurm job 11 is pending (Resources)' in cell[0]
    assert cell[1].startswith("Resources") and "starts ~" in cell[1]
    assert "Why it waits" not in (await client.get("/pods/team-a/running-1")).text


async def test_pods_show_their_jobs_account_and_qos(client: Client) -> None:
    r = await client.get("/pods")
    assert "<th title=\"the Slurm account and QOS the job runs under\">Account / QOS</th>" \
        in r.text
    shown = {pod: re.sub(r"<[^>]+>", "", cell).strip() for pod, cell in re.findall(
        r'<tr data-pod="([^"]+)".*?<td class="account">(.*?)</td>', r.text, re.S)}
    assert shown == {"team-a/running-1": "research / high",  # Slurm's record
                     "team-a/waiting-1": "team-a / —",  # as submitted: no QOS asked for
                     "team-b/bound-1": "—", "team-b/done-1": "—", "team-b/evil": "—"}
    page = (await client.get("/pods/team-a/running-1")).text
    assert "<dt>Account</dt><dd>research</dd>" in page and "<dt>QOS</dt><dd>high</dd>" in page
    page = (await client.get("/pods/team-b/bound-1")).text
    assert "<dt>Account</dt><dd>—</dd>" in page and "<dt>QOS</dt><dd>—</dd>" in page


async def test_account_and_qos_are_shown_as_text(client: Client,
                                                 scheduler: StaticScheduler) -> None:
    scheduler.jobs[12].raw.update(account=SCRIPT, qos=SCRIPT)
    r = await client.get("/pods")
    assert SCRIPT not in r.text
    assert f'<td class="account">{ESCAPED} / {ESCAPED}</td>' in r.text
    r = await client.get("/pods/team-a/running-1")
    assert SCRIPT not in r.text and f"<dt>Account</dt><dd>{ESCAPED}</dd>" in r.text


async def test_pod_page_of_an_unknown_pod(client: Client) -> None:
    r = await client.get("/pods/team-a/gone")
    assert r.status_code == 404 and "knows no Pod" in r.text
    # htmx stops polling on 286, and still swaps the message in
    r = await client.get("/pods/team-a/gone", headers={"HX-Request": "true"})
    assert r.status_code == 286 and "knows no Pod" in r.text


async def test_pod_page_survives_events_it_cannot_read(client: Client,
                                                       scheduler: StaticScheduler) -> None:
    scheduler.events_error = "GET events: 403 forbidden"
    r = await client.get("/pods/team-a/running-1")
    assert r.status_code == 200
    assert "Events could not be read: GET events: 403 forbidden" in r.text
    assert "Slurm job 12 submitted" in r.text


async def test_pod_page_does_not_wait_long_for_events(
        client: Client, scheduler: StaticScheduler, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app, "EVENTS_TIMEOUT", 0.05)
    scheduler.events_delay = 5
    body = (await client.get("/api/v1/pods/team-a/running-1")).json()
    assert body["events"] == []
    assert body["events_error"] == "Events could not be read: no answer within 0.05 s"
    assert body["history"]


async def test_events_are_asked_for_once_per_pod_and_ttl_newest_first(
        client: Client, scheduler: StaticScheduler, monkeypatch: pytest.MonkeyPatch) -> None:
    """An open Pod page refreshes every 2 s: the API server is asked at most once per TTL."""
    uid = scheduler.state.pods["team-a/running-1"].uid
    scheduler.events[uid] = [
        {"reason": "Old", "lastTimestamp": "2026-01-01T00:00:00Z"},
        {"reason": "Undated"},
        {"reason": "New", "lastTimestamp": "2026-01-02T00:00:00Z"}]
    calls: list[str] = []
    answer = scheduler.pod_events

    async def counted(namespace: str, name: str, uid: str) -> list[dict[str, object]] | str:
        calls.append(f"{namespace}/{name}")
        return await answer(namespace, name, uid)

    monkeypatch.setattr(scheduler, "pod_events", counted)
    for _ in range(3):
        body = (await client.get("/api/v1/pods/team-a/running-1")).json()
        assert [e["reason"] for e in body["events"]] == ["New", "Old", "Undated"]
    await client.get("/api/v1/pods/team-a/waiting-1")
    assert calls == ["team-a/running-1", "team-a/waiting-1"]


# -- gangs --------------------------------------------------------------------------------------


def cell_texts(row: str) -> list[str]:
    return [re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", c)).strip()
            for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]


async def test_gangs_page_lists_gangs_waiting_first_with_members_in_rank_order(
        client: Client, gangs: StaticScheduler) -> None:
    r = await client.get("/gangs")
    assert r.status_code == 200 and r.text.startswith("<!doctype html>")
    assert re.findall(r'<tr data-gang="([^"]+)" data-state="([^"]+)"', r.text) == [
        ("team-a/podgroup:pg1", "waiting"),
        ("team-b/label:&lt;script&gt;alert(&#39;x&#39;)", "rejected"),
        ("team-a/job:train", "running")]
    row = re.search(r'<tr data-gang="team-a/job:train".*?</tr>', r.text, re.S)
    assert row is not None
    cells = cell_texts(row.group(0))
    assert cells[:4] == ["team-a", "job:train", "running", "3/3"]
    assert cells[5:] == ["20", "RUNNING", "training / gang", ""]
    members = [re.sub(r"<[^>]+>", "", m) for m in re.findall(r'<div data-rank="\d+">(.*?)</div>',
                                                            row.group(0))]
    assert members == ["0 train-0 Running h100-000 → kwok-node-000",
                       "1 train-1 Running a100-001 → kwok-node-001",
                       "2 train-2 Running a100-003 → kwok-node-003"]
    assert 'href="/gangs/team-a/job%3Atrain"' in row.group(0)
    assert 'href="/pods/team-a/train-0"' in row.group(0)
    waiting = re.search(r'<tr data-gang="team-a/podgroup:pg1".*?</tr>', r.text, re.S)
    assert waiting is not None
    assert re.findall(r'<div data-rank="(\d+)"><b class="rank">\d+</b> <a href="([^"]+)"',
                      waiting.group(0)) == [("0", "/pods/team-a/pg1-0"),
                                            ("1", "/pods/team-a/pg1-1")]
    cells = cell_texts(waiting.group(0))
    assert [cells[3], *cells[5:]] == ["0/2", "21", "PENDING", "—",
                                      "job 21 pending (Resources): waiting for 2 nodes"]
    assert "3 gangs, 2 waiting" in r.text


async def test_gangs_page_when_there_is_none(client: Client) -> None:
    r = await client.get("/gangs")
    assert "No gangs: every Pod is scheduled alone." in r.text
    assert "data-gang=" not in r.text
    assert (await client.get("/api/v1/gangs")).json() == {"total": 0, "waiting": 0,
                                                          "gangs": []}


async def test_gangs_refresh_gets_only_the_table_and_the_header(
        client: Client, gangs: StaticScheduler) -> None:
    r = await client.get("/gangs", headers={"HX-Request": "true"})
    assert r.text.lstrip().startswith('<section id="content" hx-get="/gangs"')
    assert '<header id="header" hx-swap-oob="true">' in r.text and "<html" not in r.text
    assert 'data-gang="team-a/job:train"' in r.text


async def test_the_header_links_the_gangs_with_their_counts(
        client: Client, gangs: StaticScheduler) -> None:
    r = await client.get("/pods")
    assert re.search(r'<a href="/gangs">Gangs <b>3</b></a>', r.text)
    assert re.search(r'href="/gangs">waiting <b>2</b></a>', r.text)
    r = await client.get("/gangs/team-a/job:train")
    assert '<a href="/gangs" aria-current="page">Gangs' in r.text


async def test_a_members_pod_row_links_to_its_gang(client: Client,
                                                   gangs: StaticScheduler) -> None:
    r = await client.get("/pods?namespace=team-a")
    row = re.search(r'<tr data-pod="team-a/train-1".*?</tr>', r.text, re.S)
    assert row is not None
    assert cell_texts(row.group(0))[-1] == "job:train #1"
    link = re.search(r'<td class="gang"><a href="([^"]+)"', row.group(0))
    assert link is not None and link.group(1) == "/gangs/team-a/job%3Atrain"
    assert (await client.get(link.group(1))).status_code == 200
    # a Pod scheduled alone, and one whose gang the scheduler no longer holds: no link
    for alone in ("team-a/running-1", "team-a/waiting-1"):
        other = re.search(rf'<tr data-pod="{alone}".*?</tr>', r.text, re.S)
        assert other is not None and '<td class="gang"></td>' in other.group(0)
    # and the Pod's own page names its gang and rank
    r = await client.get("/pods/team-a/pg1-0")
    assert '<dt>Gang</dt><dd><a href="/gangs/team-a/podgroup%3Apg1">podgroup:pg1</a>, rank 0' \
        in r.text


async def test_gang_page_shows_members_history_and_job(client: Client,
                                                       gangs: StaticScheduler) -> None:
    r = await client.get("/gangs/team-a/job:train")
    assert r.status_code == 200
    assert re.findall(r'<tr data-pod="([^"]+)" data-rank="(\d+)"', r.text) == [
        ("team-a/train-0", "0"), ("team-a/train-1", "1"), ("team-a/train-2", "2")]
    member = re.search(r'<tr data-pod="team-a/train-2".*?</tr>', r.text, re.S)
    assert member is not None
    assert cell_texts(member.group(0)) == ["2", "train-2", "Running", "a100-003",
                                           "kwok-node-003"]
    assert "Slurm job 20 for 3 nodes" in r.text  # history
    assert "<dt>nodes</dt><dd>a100-001,a100-003,h100-000</dd>" in r.text  # Slurm's record
    assert "<dt>Account</dt><dd>training</dd>" in r.text and "<dt>QOS</dt><dd>gang</dd>" \
        in r.text
    assert 'href="/api/v1/gangs/team-a/job%3Atrain"' in r.text
    r = await client.get("/gangs/team-a/podgroup:pg1")
    assert "job 21 pending (Resources): waiting for 2 nodes" in r.text


async def test_gang_page_of_an_unknown_gang(client: Client) -> None:
    r = await client.get("/gangs/team-a/job:gone")
    assert r.status_code == 404 and "knows no gang" in r.text
    r = await client.get("/gangs/team-a/job:gone", headers={"HX-Request": "true"})
    assert r.status_code == 286 and "knows no gang" in r.text
    assert (await client.get("/api/v1/gangs/team-a/job:gone")).status_code == 404


async def test_gang_names_are_shown_as_text(client: Client, gangs: StaticScheduler) -> None:
    r = await client.get("/gangs")
    link = re.search(r'<a href="(/gangs/team-b/[^"]+)">', r.text)
    assert link is not None
    pages = [r, await client.get("/gangs", headers={"HX-Request": "true"}),
             await client.get(link.group(1)), await client.get("/pods?namespace=team-b")]
    assert pages[2].status_code == 200
    for page in pages:
        assert "<script>" not in page.text
        assert "label:&lt;script&gt;alert(&#39;x&#39;)" in page.text
    refresh = await client.get(link.group(1), headers={"HX-Request": "true"})
    for page in (pages[2], refresh):
        assert "<script>" not in page.text
        assert "members disagree on the gang&#39;s size: " + ESCAPED in page.text
    body = (await client.get(link.group(1).replace("/gangs/", "/api/v1/gangs/"))).json()
    assert body["gang"]["name"] == GANG_SCRIPT


async def test_api_gangs(client: Client, gangs: StaticScheduler) -> None:
    body = (await client.get("/api/v1/gangs")).json()
    assert (body["total"], body["waiting"]) == (3, 2)
    assert [(g["namespace"], g["name"]) for g in body["gangs"]] == [
        ("team-a", "podgroup:pg1"), ("team-b", GANG_SCRIPT), ("team-a", "job:train")]
    train = body["gangs"][2]
    assert set(train) == {"namespace", "name", "state", "size", "members", "bound", "job_id",
                          "job_state", "waiting", "problem", "last_transition", "account",
                          "qos", "components"}
    assert train["components"] == 0
    assert (train["account"], train["qos"]) == ("training", "gang")
    assert train["members"][0] == {"namespace": "team-a", "name": "train-0", "rank": 0,
                                   "slurm_node": "h100-000", "k8s_node": "kwok-node-000",
                                   "phase": "Running", "component": None}
    assert [m["rank"] for m in train["members"]] == [0, 1, 2]
    assert body["gangs"][1]["size"] is None and body["gangs"][1]["problem"].endswith(SCRIPT)
    one = (await client.get("/api/v1/gangs/team-a/job:train")).json()
    assert set(one) == {"gang", "slurm_job", "history"}
    assert one["slurm_job"]["job_state"] == "RUNNING"
    assert [t["what"] for t in one["history"]] == ["JobSubmitted", "seen"]
    pod = next(p for p in (await client.get("/api/v1/pods?q=train-2")).json()["pods"])
    assert (pod["gang"], pod["gang_rank"]) == ("team-a/job:train", 2)
    assert (await client.get("/api/v1/summary")).json()["gangs"] == {"total": 3, "waiting": 2}


# -- escaping -----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/pods", "/pods?state=rejected", "/pods/team-b/evil",
                                  "/nodes"])
async def test_user_input_is_shown_as_text(client: Client, path: str) -> None:
    r = await client.get(path)
    assert SCRIPT not in r.text
    assert ESCAPED in r.text or ESCAPED.replace("&#39;", "&#x27;") in r.text
    assert "<script>alert" not in r.text


async def test_partials_escape_too(client: Client) -> None:
    r = await client.get("/pods", headers={"HX-Request": "true"})
    assert SCRIPT not in r.text and ESCAPED in r.text


async def test_path_values_are_escaped(client: Client) -> None:
    r = await client.get("/pods/%3Cb%3Ex/%3Cscript%3E")
    assert r.status_code == 404
    assert "<script>" not in r.text and "&lt;script&gt;" in r.text


async def test_json_carries_user_input_verbatim(client: Client) -> None:
    body = (await client.get("/api/v1/pods/team-b/evil")).json()
    assert body["annotations"]["sunk.coreweave.com/exclusive"] == SCRIPT


async def test_pages_forbid_inline_scripts(client: Client) -> None:
    r = await client.get("/pods")
    csp = r.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert r.headers["x-content-type-options"] == "nosniff"
    assert "<script>" not in r.text  # only <script src=...> from our origin
    assert "style=" not in r.text


# -- JSON API -----------------------------------------------------------------------------------


async def test_api_pods_shape_and_filters(client: Client) -> None:
    body = (await client.get("/api/v1/pods", params={"namespace": "team-a"})).json()
    assert set(body) == {"total", "matching", "offset", "limit", "namespaces", "pods"}
    assert (body["total"], body["matching"], body["offset"], body["limit"]) == (5, 2, 0, 1000)
    pod = body["pods"][0]
    assert set(pod) == {"namespace", "name", "state", "phase", "job_id", "job_state",
                        "pending_reason", "slurm_node", "k8s_node", "created_at",
                        "age_seconds", "time_to_bound_seconds", "last_event",
                        "last_transition", "rejected", "gang", "gang_rank", "account", "qos",
                        "waiting", "expected_start"}
    assert (pod["name"], pod["job_id"], pod["time_to_bound_seconds"]) == ("running-1", 12, 1.25)
    assert (pod["account"], pod["qos"]) == ("research", "high")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|\+00:00)", pod["created_at"])
    body = (await client.get("/api/v1/pods?state=waiting")).json()
    assert [p["name"] for p in body["pods"]] == ["waiting-1"]
    body = (await client.get("/api/v1/pods?q=bound&limit=1")).json()
    assert [p["name"] for p in body["pods"]] == ["bound-1"]
    assert (await client.get("/api/v1/pods?limit=0")).status_code == 400


async def test_api_pod(client: Client) -> None:
    body = (await client.get("/api/v1/pods/team-a/waiting-1")).json()
    assert set(body) == {"pod", "uid", "labels", "annotations", "job_description",
                         "slurm_job", "history", "events", "events_error"}
    assert body["pod"]["pending_reason"] == "Resources"
    assert body["pod"]["waiting"].startswith("Slurm job 11 is pending (Resources)")
    assert body["pod"]["expected_start"] is not None
    assert (body["pod"]["account"], body["pod"]["qos"]) == ("team-a", "")  # as submitted
    assert body["events"][0]["reason"] == "InvalidAnnotation"
    assert body["history"][0] == {"at": body["history"][0]["at"], "what": "JobSubmitted",
                                  "detail": "Slurm job 11 submitted"}
    assert (await client.get("/api/v1/pods/team-a/nobody")).status_code == 404


async def test_api_nodes_policies_summary(client: Client) -> None:
    nodes = (await client.get("/api/v1/nodes")).json()
    assert nodes["total"] == 4
    assert nodes["nodes"][0]["slurm_node"] == "a100-001"
    assert set(nodes["nodes"][0]) >= {"slurm_node", "k8s_node", "slurm_state", "lock", "taint",
                                      "drain_reason", "drain_from_kubernetes", "jobs", "pods",
                                      "cpus_free", "memory_free_mib", "gpus_free"}
    assert [n["slurm_node"] for n in (await client.get("/api/v1/nodes?state=locked")).json()[
        "nodes"]] == ["h100-000"]
    policies = (await client.get("/api/v1/policies")).json()
    assert [p["name"] for p in policies["policies"]] == ["sunk-annotations", "sunk-pod"]
    assert policies["policies"][0]["mappings"] == ["comment"]
    assert policies["last_reload_ok"] is True and policies["errors"] == []
    summary = (await client.get("/api/v1/summary")).json()
    assert summary["pods"]["waiting"] == 1
    assert summary["kubernetes"] == {"name": "Kubernetes API", "ok": True, "detail": "watching"}
    assert summary["slurm"]["ok"] is True


async def test_openapi_has_the_api_and_not_the_pages(client: Client) -> None:
    schema = (await client.get("/schema/openapi.json")).json()
    assert set(schema["paths"]) == {
        "/api/v1/summary", "/api/v1/pods", "/api/v1/pods/{namespace}/{name}", "/api/v1/nodes",
        "/api/v1/policies", "/api/v1/gangs", "/api/v1/gangs/{namespace}/{name}",
        "/api/v1/trends"}
    params = {p["name"] for p in schema["paths"]["/api/v1/pods"]["get"]["parameters"]}
    assert params == {"namespace", "state", "q", "offset", "limit"}
    assert "PodRow" in schema["components"]["schemas"]


async def test_read_only(client: Client) -> None:
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        r = await client.request(method, "/api/v1/pods")
        assert r.status_code == 405, method


# -- authentication -----------------------------------------------------------------------------

PATHS = ["/pods", "/pods/team-a/waiting-1", "/nodes", "/policies", "/gangs", "/api/v1/pods",
         "/api/v1/gangs", "/api/v1/summary", "/api/v1/trends", "/schema/openapi.json",
         "/static/htmx.min.js"]


def basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


@pytest.mark.parametrize("path", PATHS)
async def test_without_credentials_everything_is_refused(make_client: MakeClient,
                                                         path: str) -> None:
    async with make_client(auth_token="s3cret", basic_auth=("ops", "pw")) as client:
        r = await client.get(path)
        assert r.status_code == 401
        assert r.headers.get_list("www-authenticate") == ['Basic realm="sunk", charset="UTF-8"',
                                                          'Bearer realm="sunk"']
        assert "waiting-1" not in r.text


@pytest.mark.parametrize("headers", [
    {"Authorization": "Bearer wrong"}, {"Authorization": "Bearer "}, {"Authorization": "s3cret"},
    basic("ops", "wrong"), basic("nobody", "pw"), {"Authorization": "Basic !!notbase64"},
    {"Authorization": "Basic " + base64.b64encode(b"ops").decode()},
])
async def test_wrong_credentials_are_refused(make_client: MakeClient,
                                             headers: dict[str, str]) -> None:
    async with make_client(auth_token="s3cret", basic_auth=("ops", "pw")) as client:
        assert (await client.get("/api/v1/pods", headers=headers)).status_code == 401


@pytest.mark.parametrize("path", PATHS)
async def test_right_credentials_are_let_in(make_client: MakeClient, path: str) -> None:
    async with make_client(auth_token="s3cret", basic_auth=("ops", "p:w")) as client:
        assert (await client.get(path, headers={"Authorization": "Bearer s3cret"})
                ).status_code == 200
        assert (await client.get(path, headers=basic("ops", "p:w"))).status_code == 200


async def test_token_only_asks_for_a_bearer_token(make_client: MakeClient) -> None:
    async with make_client(auth_token="s3cret") as client:
        r = await client.get("/pods", headers=basic("ops", "pw"))
        assert r.status_code == 401
        assert r.headers.get_list("www-authenticate") == ['Bearer realm="sunk"']


async def test_refusals_carry_the_security_headers(make_client: MakeClient) -> None:
    async with make_client(basic_auth=("ops", "pw")) as client:
        r = await client.get("/pods")
        assert r.status_code == 401 and "content-security-policy" in r.headers


def test_auth_from_env() -> None:
    assert auth_from_env({}) == {"auth_token": None, "basic_auth": None}
    assert auth_from_env({"SUNK_DASHBOARD_TOKEN": " t \n",
                          "SUNK_DASHBOARD_BASIC_AUTH": "ops:a:b"}) == {
        "auth_token": "t", "basic_auth": ("ops", "a:b")}
    for bad in ("ops", "ops:", ":pw"):
        with pytest.raises(ValueError, match="user:password"):
            auth_from_env({"SUNK_DASHBOARD_BASIC_AUTH": bad})


# -- formatting ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("seconds", "text"), [
    (None, ""), (0.25, "0.2s"), (9.96, "10.0s"), (42, "42s"), (185, "3m05s"), (7620, "2h07m"),
    (356_400, "4d03h")])
def test_durations(seconds: float | None, text: str) -> None:
    assert duration(seconds) == text


@pytest.mark.parametrize(("mib", "text"), [(0, "0"), (512, "512M"), (1024, "1G"), (1536, "1.5G"),
                                           (262144, "256G")])
def test_memory(mib: int, text: str) -> None:
    assert mebibytes(mib) == text


def test_every_template_is_compiled_at_start_up_not_on_a_first_request() -> None:
    env = _environment()
    assert env.cache is not None
    compiled = {name for (_, name) in env.cache}
    assert compiled == set(env.list_templates()) and "pods.html" in compiled


async def test_a_heterogeneous_gang_shows_each_members_component(
        client: Client, gangs: StaticScheduler, now: float) -> None:
    rec = gangs.add_gang("team-c", "lws:infer-0", 3, created=now - 60, job_id=40,
                         job_state="RUNNING",
                         members=[("infer-0", 0, "h100-000", "kwok-node-000"),
                                  ("infer-0-1", 1, "a100-001", "kwok-node-001"),
                                  ("infer-0-2", 2, "a100-003", "kwok-node-003")])
    for member, part in zip(rec.members, (0, 1, 1), strict=True):
        member.component = part
    r = await client.get("/gangs/team-c/lws:infer-0")
    assert "heterogeneous, 2 components" in r.text
    worker = re.search(r'<tr data-pod="team-c/infer-0-2".*?</tr>', r.text, re.S)
    assert worker is not None
    assert cell_texts(worker.group(0)) == ["2", "infer-0-2", "Running", "1", "a100-003",
                                           "kwok-node-003"]
    listing = (await client.get("/gangs")).text
    row = re.search(r'<tr data-gang="team-c/lws:infer-0".*?</tr>', listing, re.S)
    assert row is not None and row.group(0).count(">c1</span>") == 2
    r = await client.get("/gangs/team-a/job:train")
    assert "heterogeneous" not in r.text and "Component" not in r.text
