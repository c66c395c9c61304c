"""The executor against HTTP-level stand-ins (``httpx.MockTransport``) of the API server and
slurmrestd: which requests each action sends, and what it records (assume cache, records)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from sunk import kube
from sunk.apply.binding import scheduled_message
from sunk.apply.executor import Executor
from sunk.apply.ports import KubeAPI
from sunk.hooks.auth import HookKeys
from sunk.model.cluster import Cluster
from sunk.model.slurmwatch import SlurmWatch
from sunk.model.state import GangRecord, PodRecord
from sunk.plans import actions as do
from sunk.plans.locking import LOCK_KEY, LockState
from sunk.plans.nodeplan import NodeFacts
from sunk.settings import Settings
from sunk.slurm.client import SlurmClient, SlurmError
from sunk.slurm.job import Job, PodIdentity, account_and_qos, admin_comment, job_extra
from tests.mock_http import MockHttp
from tests.unit.core.stand_ins import Server
from tests.unit.kube.fakes import FakeCredentials

NAME = "sunk-test"
#: What the executor puts in a job's environment for the hook API.
CREDENTIAL = HookKeys(lambda: ["s3cret"]).credentials_of(NAME)
PREFIX = "sunk.coreweave.com/"
Route = Callable[[httpx.Request], httpx.Response]


@dataclass
class Bed:
    executor: Executor
    cluster: Cluster
    kube: Server
    slurm: Server


@pytest.fixture
async def bed() -> Any:
    k8s, slurm = Server(), Server()
    api = kube.Client(FakeCredentials(), transport=MockHttp(k8s))
    client = SlurmClient("http://slurm.test", token=lambda: "jwt",
                         transport=MockHttp(slurm))
    cluster = Cluster(Settings(scheduler_name=NAME, scope="cluster"), api)
    watch = SlurmWatch(cluster, client)  # the job table's one writer, as sunk.wiring wires it
    executor = Executor(cluster, KubeAPI(api, NAME), client, credential=CREDENTIAL,
                        jobs=watch)
    yield Bed(executor, cluster, k8s, slurm)
    await asyncio.gather(*executor._background)
    await client.aclose()
    await kube.close(api)


def pod(uid: str = "aaaa-0001", **annotations: str) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": "p", "uid": uid,
                         "annotations": dict(annotations)}, "spec": {}}


def record(uid: str = "aaaa-0001") -> PodRecord:
    return PodRecord("ns", "p", uid, created=0.0)


def description(uid: str = "aaaa-0001") -> dict[str, Any]:
    who = PodIdentity("ns", "p", uid, NAME)
    return {"name": "sunk-ns-p", "extra": job_extra(who), "admin_comment": admin_comment(who),
            "environment": ["PATH=/bin"]}


def slurm_error(status: int, number: int, text: str) -> Route:
    return lambda r: httpx.Response(status, json={"errors": [
        {"error_number": number, "error": text, "description": text}]})


async def settle(bed: Bed) -> None:
    await asyncio.gather(*bed.executor._background)


def answered_by(bed: Bed, api_server: Callable[[httpx.Request], object]) -> None:
    """A new executor, whose calls to the API server ``api_server`` answers."""
    bed.executor = Executor(bed.cluster, KubeAPI(kube.Client(
        FakeCredentials(), transport=MockHttp(api_server)), NAME), bed.executor.slurm,
        credential=CREDENTIAL, jobs=bed.executor.submitter.jobs)


async def test_a_submission_carries_the_credential_and_writes_the_job_id(bed: Bed) -> None:
    bed.slurm.routes[("POST", "/slurm/v0.0.42/job/submit")] = lambda r: httpx.Response(
        200, json={"job_id": 41})
    rec = record()
    await bed.executor.apply_pod(pod(), rec, [do.Submit(description())])
    (sent,) = bed.slurm.calls("POST", "/slurm/v0.0.42/job/submit")
    env = sent["job"]["environment"]
    assert env[0] == "PATH=/bin" and env[1].startswith("SUNK_JOB_TOKEN=sunk-job.")
    assert rec.job_description is not None
    assert not any("SUNK_JOB_TOKEN" in e for e in rec.job_description["environment"]), (
        "the dashboard never shows the credential")
    # the job id is believed at once and written in the background: the Pod's next reconcile
    # (its binding) does not wait for the API server's answer
    assert bed.kube.calls("PATCH") == []
    assert bed.cluster.assumed.annotations(pod())[f"{PREFIX}job-id"] == "41"
    await settle(bed)
    # one write, through the status subresource: the job id, and why the Pod waits
    (patch,) = bed.kube.calls("PATCH", "/api/v1/namespaces/ns/pods/p/status")
    assert patch["metadata"] == {"uid": "aaaa-0001", "annotations": {
        f"{PREFIX}job-id": "41", f"{PREFIX}pod-uid": "aaaa-0001", f"{PREFIX}rejected": None}}
    (condition,) = patch["status"]["conditions"]
    assert (condition["reason"], condition["message"]) == (
        "Pending", "Slurm job 41 is pending (None): Slurm has not looked at it yet.")
    assert len(bed.kube.calls("PATCH")) == 1
    assert bed.cluster.jobs.by_uid == {"aaaa-0001": 41}
    assert bed.cluster.assumed.annotations(pod())[f"{PREFIX}job-id"] == "41"


async def test_a_job_id_write_whose_status_is_refused_goes_again_without_it(bed: Bed) -> None:
    """Why the Pod waits is a courtesy: a status write refused (an RBAC without pods/status)
    must not keep the job id off the Pod."""
    bed.slurm.routes[("POST", "/slurm/v0.0.42/job/submit")] = lambda r: httpx.Response(
        200, json={"job_id": 41})
    bed.kube.routes[("PATCH", "/api/v1/namespaces/ns/pods/p/status")] = lambda r: (
        httpx.Response(403, json={"kind": "Status", "code": 403, "message": "forbidden"}))
    await bed.executor.apply_pod(pod(), record(), [do.Submit(description())])
    await settle(bed)
    refused, written = bed.kube.calls("PATCH")
    assert "status" in refused and "status" not in written
    assert written["metadata"]["annotations"][f"{PREFIX}job-id"] == "41"
    assert "aaaa-0001" not in bed.executor.memory.shown  # a later look shows it


async def test_a_refusal_slurm_repeats_rejects_the_pod(bed: Bed) -> None:
    bed.slurm.routes[("POST", "/slurm/v0.0.42/job/submit")] = slurm_error(
        500, 2015, "Invalid account or account/partition combination specified")
    rec = record()
    await bed.executor.apply_pod(pod(), rec, [do.Submit(description())])
    (patch,) = bed.kube.calls("PATCH")
    assert patch["metadata"]["annotations"][f"{PREFIX}rejected"] == "SlurmRefused"
    assert rec.rejected.startswith("SlurmRefused: Slurm refused the job")
    await settle(bed)
    (event,) = bed.kube.calls("POST", "/api/v1/namespaces/ns/events")
    assert event["reason"] == "SlurmRefused" and event["type"] == "Warning"


async def test_an_outage_while_submitting_is_retried_and_told_on_powers_of_two(
        bed: Bed) -> None:
    bed.slurm.routes[("POST", "/slurm/v0.0.42/job/submit")] = lambda r: httpx.Response(
        503, text="slurmctld down")
    for tries in (0, 1, 2, 3, 4):
        with pytest.raises(SlurmError):
            await bed.executor.apply_pod(pod(), record(), [do.Submit(description())],
                                         tries=tries)
    await settle(bed)
    told = [e["message"] for e in bed.kube.calls("POST", "/api/v1/namespaces/ns/events")]
    assert [m.split("(try ")[1].split(",")[0] for m in told] == ["1", "2", "3", "5"]
    # no annotation while Slurm does not answer; why the Pod waits, once in 10 s
    (status,) = bed.kube.calls("PATCH")
    assert status["status"]["conditions"][0]["reason"] == "SchedulerError"
    assert "(try 1, retrying with backoff): slurmctld down" in (
        status["status"]["conditions"][0]["message"])
    assert bed.kube.calls("PATCH", "/api/v1/namespaces/ns/pods/p/status") == [status]


def add_node(bed: Bed, name: str = "node-a", cpu: str = "4") -> None:
    bed.cluster.node_informer.cache[name] = {
        "metadata": {"name": name, "uid": f"{name}-uid", "resourceVersion": "1"},
        "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"}}}


async def test_binding_names_the_pod_uid_and_is_assumed_until_watched(bed: Bed) -> None:
    add_node(bed)
    rec = record()
    await bed.executor.apply_pod(pod(), rec, reserve_and_bind(41))
    (binding,) = bed.kube.calls("POST", "/api/v1/namespaces/ns/pods/p/binding")
    assert binding["metadata"]["uid"] == "aaaa-0001"
    assert binding["target"] == {"apiVersion": "v1", "kind": "Node", "name": "node-a"}
    assert bed.cluster.assumed.is_bound(pod()) and rec.k8s_node == "node-a"
    await settle(bed)
    (event,) = bed.kube.calls("POST", "/api/v1/namespaces/ns/events")
    assert event["reason"] == "Scheduled" and "job 41" in event["message"]


@pytest.mark.parametrize(("slurm_record", "submitted", "expected"), [
    ({"account": "research", "qos": "low"}, {"account": "asked", "qos": "high"},
     ("research", "low")),  # Slurm's record first: what the job runs under
    ({}, {"account": "asked", "qos": "high"}, ("asked", "high")),  # never read from Slurm
    (None, None, ("", "")),
    ({"account": "", "qos": "  "}, {"name": "j"}, ("", "")),  # empty, and not submitted
    ({"account": 7, "qos": ["low"]}, {"account": None, "qos": "high"}, ("", "high")),
    ({"account": {"set": True}}, {"account": "asked"}, ("asked", "")),
    ({"account": " research "}, None, ("research", "")),
])
def test_a_jobs_account_and_qos_are_plain_text_from_slurm_else_as_submitted(
        slurm_record: dict[str, Any] | None, submitted: dict[str, Any] | None,
        expected: tuple[str, str]) -> None:
    job = None if slurm_record is None else Job(
        job_id=1, name="j", state="RUNNING", extra="", nodes="n1", reason="", raw=slurm_record)
    assert account_and_qos(job, submitted) == expected


@pytest.mark.parametrize(("account", "qos", "tail"), [
    ("research", "low", "(Slurm node n1, job 42, account research, QOS low)"),
    ("research", "", "(Slurm node n1, job 42, account research)"),
    ("", "low", "(Slurm node n1, job 42, QOS low)"),
    ("", "", "(Slurm node n1, job 42)"),
])
def test_the_scheduled_message_names_what_is_known_of_the_job(account: str, qos: str,
                                                               tail: str) -> None:
    assert scheduled_message("ns/p", "node-a", "n1", 42, account=account, qos=qos) == (
        f"Successfully assigned ns/p to node-a {tail}")


async def scheduled_event(bed: Bed) -> str:
    await settle(bed)
    (event,) = bed.kube.calls("POST", "/api/v1/namespaces/ns/events")
    assert event["reason"] == "Scheduled"
    return str(event["message"])


async def test_the_scheduled_event_names_the_account_and_qos_slurm_runs_the_job_under(
        bed: Bed) -> None:
    add_node(bed)
    bed.cluster.job_table.jobs[41] = Job(job_id=41, name="pod:ns/p", state="RUNNING", extra="",
                                    nodes="slurm-1", reason="",
                                    raw={"account": "research", "qos": "low"})
    rec = record()
    rec.job_description = {"account": "asked", "qos": "high"}
    await bed.executor.apply_pod(pod(), rec, reserve_and_bind(41))
    assert await scheduled_event(bed) == (
        "Successfully assigned ns/p to node-a (Slurm node slurm-1, job 41, account research, "
        "QOS low)")


async def test_the_scheduled_event_falls_back_to_the_submitted_account(bed: Bed) -> None:
    add_node(bed)
    bed.cluster.job_table.jobs[41] = Job(job_id=41, name="pod:ns/p", state="RUNNING", extra="",
                                    nodes="slurm-1", reason="")  # never read: no record
    rec = record()
    rec.job_description = {"account": "asked", "environment": []}
    await bed.executor.apply_pod(pod(), rec, reserve_and_bind(41))
    assert await scheduled_event(bed) == (
        "Successfully assigned ns/p to node-a (Slurm node slurm-1, job 41, account asked)")


async def test_a_gang_members_scheduled_event_names_its_gang_jobs_account_and_qos(
        bed: Bed) -> None:
    add_node(bed)
    bed.cluster.job_table.jobs[50] = Job(job_id=50, name="gang:ns/job:g", state="RUNNING",
                                    extra="", nodes="slurm-[1-2]", reason="",
                                    raw={"account": "training", "qos": "gang"})
    await bed.executor.gangs.apply("gang-id", gang_record(), {"ns/p": pod()}, [
        ("ns/p", do.Reserve("node-a")),
        ("ns/p", do.Bind("node-a", "slurm-1", 50, {f"{PREFIX}rank": "0"}))])
    assert await scheduled_event(bed) == (
        "Successfully assigned ns/p to node-a (Slurm node slurm-1, job 50, account training, "
        "QOS gang)")


async def test_a_gangs_scheduled_events_follow_every_members_binding(bed: Bed) -> None:
    """Sent as each member was bound, the Events competed with the last bindings for the API
    server: a gang of 16's last member was bound up to 1.2 s after its job started."""
    add_node(bed, cpu="16")
    bed.cluster.job_table.jobs[50] = Job(job_id=50, name="gang:ns/job:g", state="RUNNING",
                                    extra="", nodes="slurm-1", reason="")
    timeline: list[tuple[str, str]] = []

    def member(i: int) -> dict[str, Any]:
        made = pod(f"aaaa-000{i}")
        made["metadata"]["name"] = f"p{i}"
        return made

    async def binding(request: httpx.Request) -> httpx.Response:
        name = request.url.path.split("/")[-2]
        await asyncio.sleep(0.01 * int(name[1:]))  # answered one after another
        timeline.append(("bound", name))
        return httpx.Response(201, json={})

    def event(request: httpx.Request) -> httpx.Response:
        timeline.append(("event", json.loads(request.content)["involvedObject"]["name"]))
        return httpx.Response(201, json={})

    bed.kube.routes[("POST", "/api/v1/namespaces/ns/pods/")] = binding  # type: ignore[assignment]
    bed.kube.routes[("POST", "/api/v1/namespaces/ns/events")] = event
    members = {f"ns/p{i}": member(i) for i in range(4)}
    await bed.executor.gangs.apply("gang-id", gang_record(), members, [
        step for key in members for step in (
            (key, do.Reserve("node-a")),
            (key, do.Bind("node-a", "slurm-1", 50, {f"{PREFIX}rank": key[-1]})))])
    await settle(bed)
    assert [what for what, _ in timeline] == ["bound"] * 4 + ["event"] * 4
    assert sorted(name for what, name in timeline if what == "event") == ["p0", "p1", "p2",
                                                                          "p3"]


async def test_an_annotation_written_is_not_written_again_before_the_watch_shows_it(
        bed: Bed) -> None:
    write = do.Annotate({f"{PREFIX}job-id": "5"})
    await bed.executor.apply_pod(pod(), record(), [write])
    await bed.executor.apply_pod(pod(), record(), [write])
    assert len(bed.kube.calls("PATCH")) == 1
    bed.cluster.assumed.observe("MODIFIED", pod(**{f"{PREFIX}job-id": "5"}))
    await bed.executor.apply_pod(pod(), record(), [do.Annotate({f"{PREFIX}job-id": "6"})])
    assert len(bed.kube.calls("PATCH")) == 2


async def test_cancel_delete_and_retry(bed: Bed) -> None:
    later = await bed.executor.apply_pod(pod(), record(), [
        do.CancelJob(41, "its Pod is being deleted"), do.DeletePod("job 41 timeout"),
        do.RetryLater("no slurmd Pod"), do.CancelJob(99, "never reached")])
    assert later == do.RetryLater("no slurmd Pod"), "handed back, the rest not applied"
    assert [p for m, p, _ in bed.slurm.seen] == ["/slurm/v0.0.42/job/41"]
    (delete,) = bed.kube.calls("DELETE", "/api/v1/namespaces/ns/pods/p")
    assert delete["preconditions"] == {"uid": "aaaa-0001"}


async def test_a_job_is_cancelled_once_while_that_cancel_is_in_hand(bed: Bed) -> None:
    """A Pod being deleted, then gone (or an orphan sweep meanwhile), asks again before Slurm's
    poll shows the job ended: one cancel is sent, and counted."""
    sent = await bed.executor.cancel(41, "ns/p", "its Pod is being deleted")
    again = await bed.executor.apply_pod(pod(), record(), [do.CancelJob(41, "was deleted")])
    assert sent and again is None
    assert not await bed.executor.cancel(41, "ns/p", "orphaned: its Pod no longer exists")
    assert [p for m, p, _ in bed.slurm.seen] == ["/slurm/v0.0.42/job/41"]
    bed.executor.forget_cancels()  # Slurm was away: the cancel may be lost with it
    assert await bed.executor.cancel(41, "ns/p", "orphaned: its Pod no longer exists")
    assert len(bed.slurm.seen) == 2


async def test_a_cancel_that_failed_is_sent_again(bed: Bed) -> None:
    bed.slurm.routes[("DELETE", "/slurm/v0.0.42/job/41")] = slurm_error(
        500, 1, "Unspecified error")
    with pytest.raises(SlurmError):
        await bed.executor.cancel(41, "ns/p", "its Pod is being deleted")
    del bed.slurm.routes[("DELETE", "/slurm/v0.0.42/job/41")]
    assert await bed.executor.cancel(41, "ns/p", "its Pod was deleted")
    assert len(bed.slurm.seen) == 2


class HeldCancels:
    """A Slurm port whose cancels wait for :attr:`answer` (the bed's stand-in answers at once)."""

    def __init__(self, error: SlurmError | None = None) -> None:
        self.calls: list[int] = []
        self.answer = asyncio.Event()
        self.error = error

    async def cancel(self, job_id: int) -> None:
        self.calls.append(job_id)
        await self.answer.wait()
        if self.error is not None:
            raise self.error


async def asked_twice(bed: Bed, held: HeldCancels) -> asyncio.Task[bool]:
    """The cancel asked as the Pod was being deleted, on its way when its DELETED event asks
    again: the second sends nothing, and does not wait for the first's answer either."""
    bed.executor.slurm = held  # type: ignore[assignment]
    first = asyncio.create_task(bed.executor.cancel(41, "ns/p", "its Pod is being deleted"))
    await asyncio.sleep(0)
    async with asyncio.timeout(1):
        assert not await bed.executor.cancel(41, "ns/p", "its Pod was deleted")
    held.answer.set()
    return first


async def test_a_cancel_on_its_way_is_not_sent_again(bed: Bed) -> None:
    held = HeldCancels()
    assert await (await asked_twice(bed, held)) and held.calls == [41]


async def test_a_cancel_that_fails_on_its_way_is_sent_when_asked_again(bed: Bed) -> None:
    held = HeldCancels(SlurmError("slurmctld did not answer"))
    first = await asked_twice(bed, held)
    with pytest.raises(SlurmError):
        await first  # its caller is retried
    held.error = None
    assert await bed.executor.cancel(41, "ns/p", "its Pod is being deleted")
    assert held.calls == [41, 41]


async def test_ignored_annotations_and_replacements_are_remembered(bed: Bed) -> None:
    await bed.executor.apply_pod(pod(), record(), [do.ReportIgnored("job-id: copied"),
                                                   do.Replace(33)])
    assert bed.executor.memory.told_ignored == {"aaaa-0001"}
    assert bed.executor.memory.replaced == {"aaaa-0001": {33}}
    bed.executor.forget_pod("aaaa-0001")
    assert not bed.executor.memory.told_ignored and not bed.executor.memory.replaced
    await settle(bed)
    (event,) = bed.kube.calls("POST", "/api/v1/namespaces/ns/events")
    assert event["reason"] == "IgnoredAnnotations"


# -- a node ------------------------------------------------------------------------------------

NODE: dict[str, Any] = {"metadata": {"name": "node-a", "uid": "node-uid", "resourceVersion": "17"},
        "spec": {"taints": [{"key": "other", "effect": "NoSchedule"}]}}
SLURMD = {"metadata": {"namespace": "slurm", "name": "slurmd-1", "uid": "slurmd-uid"}}
FACTS = NodeFacts(slurm_node="slurm-1", k8s_node="node-a", slurm_info={"state": ["IDLE"]})


async def apply_node(bed: Bed, *actions: do.NodeAction,
                     pods: dict[str, dict[str, Any]] | None = None) -> None:
    await bed.executor.apply_node(FACTS, NODE, SLURMD, actions,
                                  pod_of=(pods or {}).get)


async def test_the_lock_taint_is_a_compare_and_swap_that_keeps_other_taints(bed: Bed) -> None:
    await apply_node(bed, do.SetLockTaint(True))
    (patch,) = bed.kube.calls("PATCH", "/api/v1/nodes/node-a")
    assert patch["metadata"] == {"resourceVersion": "17"}
    assert [t["key"] for t in patch["spec"]["taints"]] == ["other", LOCK_KEY]
    assert bed.cluster.assumed.has_taint(NODE, LOCK_KEY)


async def test_a_refused_eviction_is_told_once_per_lock(bed: Bed) -> None:
    bed.kube.routes[("POST", "/api/v1/namespaces/ns/pods/web/eviction")] = (
        lambda r: httpx.Response(429, json={"message": "Cannot evict: disruption budget"}))
    blocker = {"metadata": {"namespace": "ns", "name": "web", "uid": "w"}}
    for _ in range(3):
        await apply_node(bed, do.Evict("ns/web"), pods={"ns/web": blocker})
    await settle(bed)
    events = bed.kube.calls("POST", "/api/v1/namespaces/ns/events")
    assert [e["reason"] for e in events] == ["EvictionRefused"]
    assert "PodDisruptionBudget" in events[0]["message"]
    await apply_node(bed, do.SetLockState(LockState.PENDING, LockState.FALSE))
    await apply_node(bed, do.Evict("ns/web"), pods={"ns/web": blocker})
    await settle(bed)
    assert [e["reason"] for e in bed.kube.calls("POST", "/api/v1/namespaces/ns/events")
            ].count("EvictionRefused") == 2, "a new lock tells it again"


async def test_a_lock_state_is_written_on_the_slurmd_pod_and_heard(bed: Bed) -> None:
    heard: list[str] = []
    bed.executor.on_lock_changed = heard.append
    await apply_node(bed, do.SetLockState(LockState.PENDING, LockState.LOCKED_STRICT))
    (patch,) = bed.kube.calls("PATCH", "/api/v1/namespaces/slurm/pods/slurmd-1")
    assert patch == {"metadata": {"annotations": {LOCK_KEY: "locked_strict"}}}
    assert heard == ["slurm-1"]
    assert bed.cluster.assumed.annotations(SLURMD)[LOCK_KEY] == "locked_strict"


async def test_drain_resume_and_shown_state(bed: Bed) -> None:
    await apply_node(bed, do.DrainSlurmNode("k8s: cordoned"), do.ResumeSlurmNode("uncordoned"))
    assert bed.slurm.calls("POST", "/slurm/v0.0.42/node/slurm-1") == [
        {"state": ["DRAIN"], "reason": "k8s: cordoned"}, {"state": ["RESUME"]}]
    shown = {f"{PREFIX}slurm-state": "drain", f"{PREFIX}slurm-reason": "maintenance"}
    await apply_node(bed, do.ShowSlurmState(shown, "drain", "maintenance", on_pod=False))
    assert bed.kube.calls("PATCH", "/api/v1/namespaces/slurm/pods") == []
    (patch,) = bed.kube.calls("PATCH", "/api/v1/nodes/node-a")
    assert patch == {"metadata": {"annotations": shown}}
    await settle(bed)
    (event,) = bed.kube.calls("POST", "/api/v1/namespaces/default/events")
    assert event["reason"] == "SlurmNodeDrain" and event["type"] == "Warning"


def test_the_job_record_of_a_submission_is_its_pods() -> None:
    who = PodIdentity("ns", "p", "aaaa-0001", NAME)
    job = Job(job_id=3, name="", state="PENDING", extra=job_extra(who), nodes="", reason="")
    assert job.owner == who and not job.started


async def test_a_submission_given_a_lost_jobs_id_wakes_the_pod_that_had_it(bed: Bed) -> None:
    woken: list[str] = []
    watch = SlurmWatch(bed.cluster, bed.executor.slurm)  # type: ignore[arg-type]
    watch.wake = lambda who: woken.append(who.key)
    bed.executor.submitter.jobs = watch
    earlier = PodIdentity("ns", "q", "bbbb-0002", NAME)
    bed.cluster.job_table.learn(Job(job_id=41, name="", state="PENDING",
                                    extra=job_extra(earlier), nodes="", reason="",
                                    admin_comment=admin_comment(earlier)))
    bed.slurm.routes[("POST", "/slurm/v0.0.42/job/submit")] = lambda r: httpx.Response(
        200, json={"job_id": 41})  # slurmctld lost job 41 in a crash and gave its id again
    await bed.executor.apply_pod(pod(), record(), [do.Submit(description())])
    assert woken == ["ns/q"]
    assert bed.cluster.jobs.by_uid == {"aaaa-0001": 41}


async def test_a_submit_that_got_no_answer_is_told_to_the_job_tables_writer(bed: Bed) -> None:
    bed.slurm.routes[("POST", "/slurm/v0.0.42/job/submit")] = lambda r: httpx.Response(
        504, text="timeout")
    with pytest.raises(SlurmError):
        await bed.executor.apply_pod(pod(), record(), [do.Submit(description())])
    assert bed.cluster.jobs.unanswered == {"aaaa-0001": 0}, "every job of Slurm's is newer"


async def test_evicting_a_pod_already_gone_is_no_eviction(bed: Bed) -> None:
    bed.kube.routes[("POST", "/api/v1/namespaces/ns/pods/web/eviction")] = (
        lambda r: httpx.Response(404, json={"message": "not found"}))
    await apply_node(bed, do.Evict("ns/web"))
    await settle(bed)
    assert bed.kube.calls("POST", "/api/v1/namespaces/ns/events") == []


async def test_the_lock_taint_assumed_gives_way_to_a_later_node_version(bed: Bed) -> None:
    bed.kube.routes[("PATCH", "/api/v1/nodes/node-a")] = lambda r: httpx.Response(
        200, json={"metadata": {"name": "node-a", "uid": "node-uid", "resourceVersion": "30"}})
    await apply_node(bed, do.SetLockTaint(True))
    assert bed.cluster.assumed.has_taint(NODE, LOCK_KEY)
    untainted = {"metadata": {"name": "node-a", "uid": "node-uid", "resourceVersion": "31"},
                 "spec": {"taints": []}}
    bed.cluster.assumed.observe("MODIFIED", untainted)  # someone removed it after our write
    assert not bed.cluster.assumed.has_taint(untainted, LOCK_KEY)


def reserve_and_bind(job_id: int) -> list[do.PodAction]:
    """What a plan binds a Pod with: its room on node-a reserved, then the binding."""
    return [do.Reserve("node-a"), do.Bind("node-a", "slurm-1", job_id)]


def needing(cpu: str, uid: str) -> dict[str, Any]:
    p = pod(uid)
    p["spec"] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}
    return p


async def test_a_node_never_gets_more_bound_than_it_holds(bed: Bed) -> None:
    add_node(bed, cpu="4")
    first, second = needing("3", "aaaa-0001"), needing("2", "aaaa-0002")
    await bed.executor.apply_pod(first, record(), reserve_and_bind(1))
    assert bed.cluster.usage.used("node-a")["cpu"] == 3000, "counted before the watch shows it"
    later = await bed.executor.apply_pod(second, record("aaaa-0002"), reserve_and_bind(2))
    assert later is not None and later.room and "cpu: needs 2, 1 of 4 left" in later.why
    assert len(bed.kube.calls("POST", "/api/v1/namespaces/ns/pods/p/binding")) == 1


async def test_a_failed_binding_holds_nothing(bed: Bed) -> None:
    add_node(bed)
    bed.kube.routes[("POST", "/api/v1/namespaces/ns/pods/p/binding")] = (
        lambda r: httpx.Response(409, json={"message": "already bound"}))
    with pytest.raises(kube.KubeError):
        await bed.executor.apply_pod(needing("1", "aaaa-0001"), record(),
                                     reserve_and_bind(1))
    assert bed.cluster.usage.used("node-a").get("cpu", 0) == 0


async def test_a_refit_cancels_the_job_and_remembers_it(bed: Bed) -> None:
    await bed.executor.apply_pod(pod(), record(), [do.Refit(41, "no room")])
    assert bed.slurm.calls("DELETE", "/slurm/v0.0.42/job/41") == [None]
    assert bed.executor.memory.refitted == {"aaaa-0001": {41}}
    bed.executor.forget_pod("aaaa-0001")
    assert bed.executor.memory.refitted == {}


async def test_a_job_id_written_in_the_background_is_tried_again_until_written(
        bed: Bed, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sunk.apply.annotations.ANNOTATE_RETRY", 0.01)
    answers = iter([httpx.Response(500, json={"message": "etcd timeout"}),
                    httpx.Response(503, json={"message": "overloaded"})])
    bed.kube.routes[("PATCH", "/api/v1/namespaces/ns/pods/p")] = lambda r: next(
        answers, httpx.Response(200, json={"metadata": {"resourceVersion": "7"}}))
    bed.executor.annotator.write_soon(pod(), {f"{PREFIX}job-id": "41"})
    await settle(bed)
    assert len(bed.kube.calls("PATCH")) == 3
    # written: the watch showing version 7 (or later) ends the assumption
    assert bed.cluster.assumed.pending_annotations("aaaa-0001") == {f"{PREFIX}job-id": "41"}
    bed.cluster.assumed.observe("MODIFIED", {**pod(), "metadata": {
        **pod()["metadata"], "resourceVersion": "7"}})
    assert bed.cluster.assumed.pending_annotations("aaaa-0001") == {}


async def test_a_background_write_stops_when_its_pod_is_gone(
        bed: Bed, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sunk.apply.annotations.ANNOTATE_RETRY", 0.01)
    bed.kube.routes[("PATCH", "/api/v1/namespaces/ns/pods/p")] = lambda r: httpx.Response(
        500, json={"message": "down"})
    bed.executor.annotator.write_soon(pod(), {f"{PREFIX}job-id": "41"})
    await asyncio.sleep(0.05)
    tried = len(bed.kube.calls("PATCH"))
    assert tried >= 2
    bed.cluster.assumed.observe("DELETED", pod())  # the watch: the Pod is gone
    await asyncio.wait_for(settle(bed), 1)
    assert len(bed.kube.calls("PATCH")) <= tried + 1
    bed.kube.routes[("PATCH", "/api/v1/namespaces/ns/pods/p")] = lambda r: httpx.Response(
        404, json={"message": "not found"})
    bed.executor.annotator.write_soon(pod(), {f"{PREFIX}job-id": "42"})  # 404: gone, not retried
    await asyncio.wait_for(settle(bed), 1)


async def test_a_pods_writes_land_in_the_order_they_were_made(bed: Bed) -> None:
    """A second submission's job id (a replaced job) never lands before the first's (the
    first, replaced before it went out, is not sent at all), and a reconcile's own write
    waits for the background ones."""
    first_answered = asyncio.Event()
    order: list[str] = []

    async def patch(request: httpx.Request) -> httpx.Response:
        value = json.loads(request.content)["metadata"]["annotations"][f"{PREFIX}job-id"]
        first_answered.set()  # the first write has gone out...
        if value == "41":
            await asyncio.sleep(0.05)  # ...and is slow to be answered
        order.append(value)
        return httpx.Response(200, json={"metadata": {"resourceVersion": str(len(order))}})

    answered_by(bed, patch)
    bed.executor.annotator.write_soon(pod(), {f"{PREFIX}job-id": "41"})
    await first_answered.wait()
    bed.executor.annotator.write_soon(pod(), {f"{PREFIX}job-id": "40"})
    bed.executor.annotator.write_soon(pod(), {f"{PREFIX}job-id": "42"})  # replaces 40 unsent
    await bed.executor.annotator.write(pod(), {f"{PREFIX}job-id": "43"})
    assert order == ["41", "42", "43"]
    await settle(bed)
    # only the newest write's version may end what is assumed
    assert bed.cluster.assumed.pending_annotations("aaaa-0001") == {f"{PREFIX}job-id": "43"}


async def test_at_most_a_workers_worth_of_background_writes_are_sent_at_once(
        bed: Bed) -> None:
    """In a burst the API server answers slowly: background writes must not open a
    connection per Pod."""
    answer = asyncio.Event()
    in_flight = most = 0

    async def slow_patch(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await answer.wait()
        in_flight -= 1
        return httpx.Response(200, json={"metadata": {"resourceVersion": "9"}})

    bed.cluster.settings.workers = 3
    answered_by(bed, slow_patch)
    bed.slurm.routes[("POST", "/slurm/v0.0.42/job/submit")] = lambda r: httpx.Response(
        200, json={"job_id": 41})
    for n in range(5):  # each returns at once: its write goes on in the background
        await asyncio.wait_for(bed.executor.apply_pod(
            pod(f"uid-{n}"), record(f"uid-{n}"), [do.Submit(description(f"uid-{n}"))]), 1)
    try:
        await asyncio.sleep(0.1)  # past the job id's wait: every write wants to go
        assert (in_flight, most) == (3, 3)
    finally:
        answer.set()  # else the fixture's clean-up waits for the writes forever
    await settle(bed)
    assert most == 3 and bed.executor.annotator._writing == {}


async def submit_41(bed: Bed, the_pod: dict[str, Any] | None = None) -> None:
    bed.slurm.routes[("POST", "/slurm/v0.0.42/job/submit")] = lambda r: httpx.Response(
        200, json={"job_id": 41})
    await bed.executor.apply_pod(the_pod or pod(), record(), [do.Submit(description())])


JOB_ID_WRITTEN = {f"{PREFIX}job-id": "41", f"{PREFIX}pod-uid": "aaaa-0001"}


async def test_a_job_that_starts_at_once_has_its_id_carried_by_the_binding(
        bed: Bed, monkeypatch: pytest.MonkeyPatch) -> None:
    """One write per Pod, not two: the binding sets the job id on the Pod."""
    monkeypatch.setattr("sunk.apply.annotations.JOB_ID_WAIT", 5.0)
    add_node(bed)
    await submit_41(bed)
    await bed.executor.apply_pod(pod(), record(), reserve_and_bind(41))
    (binding,) = bed.kube.calls("POST", "/api/v1/namespaces/ns/pods/p/binding")
    assert binding["metadata"]["annotations"] == JOB_ID_WRITTEN
    await asyncio.wait_for(settle(bed), 1)  # the delayed write ends at once, unsent
    assert bed.kube.calls("PATCH") == []
    assert bed.executor.annotator._writing == {} and bed.executor.annotator._delayed == {}
    # believed until the watch shows the Pod bound with them
    assert bed.cluster.assumed.annotations(pod())[f"{PREFIX}job-id"] == "41"
    bound = pod(**JOB_ID_WRITTEN)
    bound["spec"]["nodeName"] = "node-a"
    bed.cluster.assumed.observe("MODIFIED", bound)
    assert bed.cluster.assumed.waiting() == 0


def gang_record() -> GangRecord:
    return GangRecord("ns", "job:g", None)


def gang_members(bed: Bed, annotations: dict[str, str] | None = None,
                 count: int = 2) -> dict[str, dict[str, Any]]:
    add_node(bed, cpu="16")
    bed.slurm.routes[("POST", "/slurm/v0.0.42/job/submit")] = lambda r: httpx.Response(
        200, json={"job_id": 41})
    members = {f"ns/p{i}": pod(f"aaaa-000{i}", **(annotations or {})) for i in range(count)}
    for i, member in enumerate(members.values()):
        member["metadata"]["name"] = f"p{i}"
    return members


async def submit_and_bind_gang(bed: Bed, members: dict[str, dict[str, Any]],
                               settle_between: bool = False) -> None:
    gang = PodIdentity("ns", "job:g", "gang-id", NAME, tuple(f"m{i}" for i in range(len(members))))
    job = {"name": "gang:ns/job:g", "extra": job_extra(gang), "admin_comment":
           admin_comment(gang), "environment": ["PATH=/bin"]}
    record, gangs = gang_record(), bed.executor.gangs
    await gangs.apply("gang-id", record, members, [
        (None, do.SubmitGang(gang, job, tuple((key, i) for i, key in enumerate(members))))])
    assert record.job_id == 41
    for member in members.values():  # believed at once
        assert bed.cluster.assumed.annotations(member)[f"{PREFIX}job-id"] == "41"
    if settle_between:
        await settle(bed)
    await gangs.apply("gang-id", record, members, [  # as sunk.plans.gangplan binds them
        step for key in members for step in (
            (key, do.Reserve("node-a")),
            (key, do.Bind("node-a", "slurm-1", 41, {
                f"{PREFIX}gang-rank": key[-1], f"{PREFIX}gang-node": "slurm-1",
                f"{PREFIX}job-id": "41"})))])


def gang_binding(bed: Bed, i: int) -> dict[str, str]:
    (binding,) = bed.kube.calls("POST", f"/api/v1/namespaces/ns/pods/p{i}/binding")
    return dict(binding["metadata"]["annotations"])


async def test_a_gang_that_starts_at_once_has_its_id_carried_by_each_members_binding(
        bed: Bed, monkeypatch: pytest.MonkeyPatch) -> None:
    """A gang that starts within JOB_ID_WAIT: one write per member fewer, as for a Pod."""
    monkeypatch.setattr("sunk.apply.annotations.JOB_ID_WAIT", 5.0)
    members = gang_members(bed)
    await submit_and_bind_gang(bed, members)
    for i in range(2):
        assert gang_binding(bed, i) == {
            f"{PREFIX}job-id": "41", f"{PREFIX}pod-uid": f"aaaa-000{i}",
            f"{PREFIX}gang-rank": str(i), f"{PREFIX}gang-node": "slurm-1"}
    await asyncio.wait_for(settle(bed), 1)  # the delayed writes end at once, unsent
    assert bed.kube.calls("PATCH") == []
    assert bed.executor.annotator._delayed == {}


async def test_a_gang_members_binding_names_its_uid_with_the_job_id_written_already(
        bed: Bed) -> None:
    """The members' own writes went out first (the job waited past JOB_ID_WAIT): the binding
    still sets the job id (sunk.plans.gangplan) and with it the uid it is for."""
    members = gang_members(bed)
    await submit_and_bind_gang(bed, members, settle_between=True)
    for i in range(2):
        (patch,) = bed.kube.calls("PATCH", f"/api/v1/namespaces/ns/pods/p{i}")
        assert patch["metadata"]["annotations"][f"{PREFIX}job-id"] == "41"
        assert gang_binding(bed, i)[f"{PREFIX}pod-uid"] == f"aaaa-000{i}"


async def test_a_gang_member_rejected_before_has_the_rejection_removed_on_its_own(
        bed: Bed, monkeypatch: pytest.MonkeyPatch) -> None:
    """A binding sets annotations, it cannot remove one: the rejection goes in a write of
    its own, at once, not carried."""
    monkeypatch.setattr("sunk.apply.annotations.JOB_ID_WAIT", 5.0)
    members = gang_members(bed, {f"{PREFIX}rejected": "GangTooLarge"})
    await submit_and_bind_gang(bed, members)
    await asyncio.wait_for(settle(bed), 1)
    for i in range(2):
        (patch,) = bed.kube.calls("PATCH", f"/api/v1/namespaces/ns/pods/p{i}")
        assert patch["metadata"]["annotations"] == {
            f"{PREFIX}job-id": "41", f"{PREFIX}pod-uid": f"aaaa-000{i}",
            f"{PREFIX}rejected": None}


async def test_a_job_that_waits_longer_has_its_id_written_on_its_own(bed: Bed) -> None:
    await submit_41(bed)
    await settle(bed)  # past JOB_ID_WAIT (shortened here)
    (patch,) = bed.kube.calls("PATCH", "/api/v1/namespaces/ns/pods/p")
    assert patch["metadata"]["annotations"] == {**JOB_ID_WRITTEN, f"{PREFIX}rejected": None}
    add_node(bed)
    await bed.executor.apply_pod(pod(), record(), reserve_and_bind(41))
    (binding,) = bed.kube.calls("POST", "/api/v1/namespaces/ns/pods/p/binding")
    assert "annotations" not in binding["metadata"], "written already: not again"


async def test_a_failed_binding_leaves_the_job_id_to_its_own_write(
        bed: Bed, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sunk.apply.annotations.JOB_ID_WAIT", 5.0)
    add_node(bed)
    bed.kube.routes[("POST", "/api/v1/namespaces/ns/pods/p/binding")] = lambda r: (
        httpx.Response(500, json={"message": "etcd timeout"}))
    await submit_41(bed)
    with pytest.raises(kube.KubeError):
        await bed.executor.apply_pod(pod(), record(), reserve_and_bind(41))
    await asyncio.wait_for(settle(bed), 1)  # written at once, not after the wait
    (patch,) = bed.kube.calls("PATCH", "/api/v1/namespaces/ns/pods/p")
    assert patch["metadata"]["annotations"] == {**JOB_ID_WRITTEN, f"{PREFIX}rejected": None}


async def test_a_binding_does_not_carry_what_it_cannot_remove(
        bed: Bed, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Pod once rejected (its policy since changed) loses the ``rejected`` annotation with
    its job id: a binding only sets annotations, so the job id goes on its own write."""
    monkeypatch.setattr("sunk.apply.annotations.JOB_ID_WAIT", 0.1)
    add_node(bed)
    rejected = pod(**{f"{PREFIX}rejected": "PolicyViolation"})
    await submit_41(bed, rejected)
    await bed.executor.apply_pod(rejected, record(), reserve_and_bind(41))
    (binding,) = bed.kube.calls("POST", "/api/v1/namespaces/ns/pods/p/binding")
    assert "annotations" not in binding["metadata"]
    await settle(bed)
    (patch,) = bed.kube.calls("PATCH", "/api/v1/namespaces/ns/pods/p")
    assert patch["metadata"]["annotations"][f"{PREFIX}rejected"] is None


def held_patches(bed: Bed) -> asyncio.Event:
    """The executor's writes of Pods wait for the event before the API server answers them."""
    answer = asyncio.Event()

    async def slow_patches(request: httpx.Request) -> httpx.Response:
        if request.method == "PATCH":
            await answer.wait()
        return bed.kube(request)

    answered_by(bed, slow_patches)
    return answer


async def test_a_binding_does_not_carry_a_job_id_behind_an_older_write_in_flight(
        bed: Bed, monkeypatch: pytest.MonkeyPatch) -> None:
    """The older write, landing after the binding, would put the older job id back."""
    monkeypatch.setattr("sunk.apply.annotations.JOB_ID_WAIT", 5.0)
    answer = held_patches(bed)
    add_node(bed)
    bed.executor.annotator.write_soon(pod(), {f"{PREFIX}job-id": "40"})  # going out, not answered
    await asyncio.sleep(0.01)
    await submit_41(bed)
    try:
        await bed.executor.apply_pod(pod(), record(), reserve_and_bind(41))
    finally:
        answer.set()
    (binding,) = bed.kube.calls("POST", "/api/v1/namespaces/ns/pods/p/binding")
    assert "annotations" not in binding["metadata"]
    await asyncio.wait_for(settle(bed), 1)  # the binding hurried it: not a 5 s wait
    values = [p["metadata"]["annotations"][f"{PREFIX}job-id"]
              for p in bed.kube.calls("PATCH", "/api/v1/namespaces/ns/pods/p")]
    assert values == ["40", "41"]


async def test_a_job_ids_wait_counts_from_its_submission_not_from_an_older_write(
        bed: Bed, monkeypatch: pytest.MonkeyPatch) -> None:
    """Behind an older write of the Pod slower than JOB_ID_WAIT, the id's wait is over by the
    time that write is answered: it goes out next, not JOB_ID_WAIT later."""
    monkeypatch.setattr("sunk.apply.annotations.JOB_ID_WAIT", 0.1)
    answer = held_patches(bed)
    bed.executor.annotator.write_soon(pod(), {f"{PREFIX}job-id": "40"})  # going out, not answered
    await asyncio.sleep(0.01)
    bed.executor.annotator.write_soon(pod(), {f"{PREFIX}job-id": "41"}, wait=True)
    delayed = bed.executor.annotator._delayed["aaaa-0001"]
    await asyncio.sleep(0.3)
    assert delayed.due.done(), "waited out from the submission, the older write still going"
    answer.set()
    await asyncio.wait_for(settle(bed), 1)
    values = [p["metadata"]["annotations"][f"{PREFIX}job-id"]
              for p in bed.kube.calls("PATCH", "/api/v1/namespaces/ns/pods/p")]
    assert values == ["40", "41"]


async def test_a_job_id_write_cancelled_while_it_waits_leaves_nothing_behind(
        bed: Bed, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scheduler stopping: the waiting write's task is cancelled; its timer, firing
    later, finds the wait over and nothing to do."""
    monkeypatch.setattr("sunk.apply.annotations.JOB_ID_WAIT", 0.05)
    bed.executor.annotator.write_soon(pod(), {f"{PREFIX}job-id": "41"}, wait=True)
    delayed = bed.executor.annotator._delayed["aaaa-0001"]
    task = bed.executor.annotator._writing["aaaa-0001"]
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert bed.executor.annotator._delayed == {} and delayed.due.cancelled()
    loop = asyncio.get_running_loop()
    errors: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: errors.append(context))
    try:
        await asyncio.sleep(0.1)  # the timer fires
    finally:
        loop.set_exception_handler(None)
    assert errors == [] and bed.kube.calls("PATCH") == []


async def test_a_job_id_replaced_while_it_waits_is_never_written(bed: Bed) -> None:
    bed.executor.annotator.write_soon(pod(), {f"{PREFIX}job-id": "41"}, wait=True)
    bed.executor.annotator.write_soon(pod(), {f"{PREFIX}job-id": "42"}, wait=True)  # a new job
    await asyncio.wait_for(settle(bed), 1)
    written = [p["metadata"]["annotations"] for p in bed.kube.calls("PATCH")]
    assert written == [{f"{PREFIX}job-id": "42"}]
    assert bed.executor.annotator._delayed == {} and bed.executor.annotator._writing == {}


async def test_a_pod_deleted_while_its_job_id_waits_gets_no_write(bed: Bed) -> None:
    bed.executor.annotator.write_soon(pod(), {f"{PREFIX}job-id": "41"}, wait=True)
    bed.cluster.assumed.observe("DELETED", pod())
    await asyncio.wait_for(settle(bed), 1)
    assert bed.kube.calls("PATCH") == []
    assert bed.executor.annotator._delayed == {} and bed.executor.annotator._writing == {}


async def test_a_job_id_waiting_for_a_slot_to_be_sent_is_still_carried(bed: Bed) -> None:
    """In a burst the writes past their wait queue for a slot: a binding meanwhile takes its
    Pod's, which is then not sent."""
    answer = asyncio.Event()

    async def slow_patches(request: httpx.Request) -> httpx.Response:
        if request.method == "PATCH":
            await answer.wait()
        return bed.kube(request)

    bed.cluster.settings.workers = 1
    answered_by(bed, slow_patches)
    add_node(bed)
    bed.executor.annotator.write_soon(pod("other"), {f"{PREFIX}job-id": "40"})  # holds the one slot
    await submit_41(bed)
    await asyncio.sleep(0.1)  # past its wait: queued for the slot
    try:
        await bed.executor.apply_pod(pod(), record(), reserve_and_bind(41))
    finally:
        answer.set()
    (binding,) = bed.kube.calls("POST", "/api/v1/namespaces/ns/pods/p/binding")
    assert binding["metadata"]["annotations"] == JOB_ID_WRITTEN
    await asyncio.wait_for(settle(bed), 1)
    values = [p["metadata"]["annotations"][f"{PREFIX}job-id"] for p in bed.kube.calls("PATCH")]
    assert values == ["40"], "the carried job id is not sent again"


async def test_a_write_of_the_pods_own_hurries_its_waiting_job_id(
        bed: Bed, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sunk.apply.annotations.JOB_ID_WAIT", 5.0)
    await submit_41(bed)
    await asyncio.wait_for(bed.executor.annotator.write(pod(), {f"{PREFIX}note": "x"}), 1)
    written = [p["metadata"]["annotations"] for p in bed.kube.calls("PATCH")]
    assert written == [{**JOB_ID_WRITTEN, f"{PREFIX}rejected": None}, {f"{PREFIX}note": "x"}]


async def test_a_job_id_the_watch_brought_back_before_the_answer_is_not_left_assumed(
        bed: Bed) -> None:
    def patch(request: httpx.Request) -> httpx.Response:
        # the watch's event is read first: the cache holds the Pod at the write's version
        echo = pod(**{f"{PREFIX}job-id": "41"})
        echo["metadata"]["resourceVersion"] = "12"
        bed.cluster.pod_informers[0].cache["ns/p"] = echo
        bed.cluster.assumed.observe("MODIFIED", echo)
        return httpx.Response(200, json={"metadata": {"resourceVersion": "12"}})

    bed.kube.routes[("PATCH", "/api/v1/namespaces/ns/pods/p")] = patch
    await bed.executor.annotator.write(pod(), {f"{PREFIX}job-id": "41"})
    assert bed.cluster.assumed.pending_annotations("aaaa-0001") == {}
    assert bed.cluster.assumed.waiting() == 0


def test_a_write_is_checked_against_the_watch_that_confirms_it(bed: Bed) -> None:
    """The Pod informer for the scheduler's Pods, the slurmd informer for slurmd Pods, the Node
    informer for Nodes: each is read with the assume cache on top. Every Pod's watch is not:
    a copy there ahead of the slurmd informer's must not end what the syncer still needs."""
    ours, slurmd, other, node = (
        {"metadata": {"namespace": ns, "name": name, "uid": name}}
        for ns, name in (("ns", "p"), ("slurm", "slurmd-0"), ("x", "y"), (None, "n1")))
    bed.cluster.pod_informers[0].cache["ns/p"] = ours
    bed.cluster.slurmd_informer.cache["slurm/slurmd-0"] = slurmd
    bed.cluster.node_informer.cache["n1"] = node
    for each in (ours, slurmd, other):
        bed.cluster.all_pods.cache[kube.key(each)] = {**each, "spec": {}}
    assert bed.cluster.watched("pods", ours) is ours
    assert bed.cluster.watched("pods", slurmd) is slurmd
    assert bed.cluster.watched("pods", other) is None
    assert bed.cluster.watched("nodes", node) is node
    assert bed.cluster.watched("namespaces", node) is None


async def test_a_gang_member_without_room_waits_for_room_while_the_rest_are_bound(
        bed: Bed) -> None:
    """Each member's room is reserved with its binding, all at once: one Node cannot take both
    members, so the second waits for room (handed back, not raised) and the first is bound."""
    add_node(bed, cpu="4")
    members = {}
    for i in range(2):
        member = needing("3", f"aaaa-000{i}")
        member["metadata"]["name"] = f"p{i}"
        members[f"ns/p{i}"] = member
    later = await bed.executor.gangs.apply("gang-id", gang_record(), members, [
        step for key in members for step in (
            (key, do.Reserve("node-a")), (key, do.Bind("node-a", "slurm-1", 50)))])
    assert later is not None and later.room and "cpu: needs 3, 1 of 4 left" in later.why
    assert [p for m, p, _ in bed.kube.seen if m == "POST" and p.endswith("/binding")] == [
        "/api/v1/namespaces/ns/pods/p0/binding"]
    assert bed.cluster.usage.used("node-a")["cpu"] == 3000, "the second holds nothing"


async def test_a_refusal_right_after_a_wait_is_shown_at_once(bed: Bed) -> None:
    """A Pod that waited (a claim not made yet) and is refused a moment later shows the
    refusal: no later look comes to write it, whatever the 10 s between writes says."""
    from sunk.plans import waiting as waits

    await bed.executor.apply_pod(pod(), record(), [
        do.RetryLater("a claim is not made yet", show=waits.unschedulable("not made yet"))])
    await settle(bed)
    await bed.executor.apply_pod(pod(), record(), [do.Reject("UnmappableClaim", "no way")])
    await settle(bed)
    written = [c["status"]["conditions"][0]["message"]
               for c in bed.kube.calls("PATCH", "/api/v1/namespaces/ns/pods/p/status")
               if "status" in c]
    assert written[0] == "not made yet" and written[-1] == "UnmappableClaim: no way"
