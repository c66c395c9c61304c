"""The view models: what each page and API answer says about a known cluster."""

from __future__ import annotations

import datetime

import pytest

from sunk.slurm.job import Job
from sunk.slurm.text import MAX_HOSTS, expand_hostlist, gpu_count
from web import gangs, nodes, pods, policies
from web.summary import kubernetes_health, summary
from web.viewmodels import POD_STATES, Health, IssueView, PolicyInfo, RuleView

from .conftest import GANG_SCRIPT, SCRIPT, add_gangs
from .sample import StaticScheduler, broken_policies, sample


@pytest.mark.parametrize(("text", "names"), [
    ("a100-001", ["a100-001"]),
    ("a100-[001-003]", ["a100-001", "a100-002", "a100-003"]),
    ("a100-[001,003],h100-000", ["a100-001", "a100-003", "h100-000"]),
    ("r[1-2]-n[08-09]", ["r1-n08", "r1-n09", "r2-n08", "r2-n09"]),
    ("", []),
])
def test_hostlists_expand_as_slurm_writes_them(text: str, names: list[str]) -> None:
    """As the dashboard reads a job's nodes (with the scheduler's own parser)."""
    assert expand_hostlist(text) == names


@pytest.mark.parametrize("hostile", ["h100-[000-999999999]", "h100-[a-b]", "h100-[0",
                                     "[[1]]", "[]"])
def test_a_job_node_list_slurm_never_writes_leaves_the_nodes_view_whole(hostile: str) -> None:
    s = StaticScheduler()
    s.add_node("h100-000", "node-0")
    s.add_pod("ns", "p", created=0.0, job_id=7, job_state="RUNNING", slurm_node="h100-000")
    for job in s.jobs.values():
        job.nodes = hostile
    (row,) = nodes.nodes(s).nodes
    assert row.slurm_node == "h100-000"
    assert len(expand_hostlist(hostile)) <= MAX_HOSTS


@pytest.mark.parametrize(("gres", "count"), [
    ("gpu:a100:8", 8), ("gpu:a100:8(S:0-1),gpu:h100:2", 10), ("gpu:4", 4),
    ("gpu:a100:2(IDX:0,3)", 2), ("N/A", 0), ("", 0), (None, 0), ("shard:a100:4", 0),
])
def test_gpus_are_counted_from_gres(gres: str | None, count: int) -> None:
    assert gpu_count(gres) == count


def test_pods_are_sorted_and_described(now: float, scheduler: StaticScheduler) -> None:
    listing = pods.pods(scheduler, now)
    assert [f"{p.namespace}/{p.name}" for p in listing.pods] == [
        "team-a/running-1", "team-a/waiting-1", "team-b/bound-1", "team-b/done-1", "team-b/evil"]
    by_name = {p.name: p for p in listing.pods}
    assert by_name["waiting-1"].state == "waiting"
    assert by_name["waiting-1"].pending_reason == "Resources"
    assert by_name["running-1"].state == "running"
    assert by_name["running-1"].time_to_bound_seconds == pytest.approx(1.25)
    assert by_name["bound-1"].state == "bound"
    assert by_name["done-1"].state == "finished"
    assert by_name["evil"].state == "rejected"
    assert 29 <= by_name["waiting-1"].age_seconds <= 31
    assert listing.namespaces == ["team-a", "team-b"]


def test_a_pods_account_and_qos_come_from_slurms_record_else_as_submitted(
        now: float, scheduler: StaticScheduler) -> None:
    def shown() -> dict[str, tuple[str, str]]:
        return {p.name: (p.account, p.qos) for p in pods.pods(scheduler, now).pods}

    assert shown() == {"running-1": ("research", "high"),  # Slurm's record
                       "waiting-1": ("team-a", ""),  # never read: as submitted, no QOS asked
                       "bound-1": ("", ""), "done-1": ("", ""),  # neither says
                       "evil": ("", "")}  # no job
    # Slurm's record wins over what was submitted (a job runs under what Slurm gave it) ...
    scheduler.state.pods["team-a/running-1"].job_description = {"account": "asked",
                                                                "qos": "asked"}
    scheduler.jobs[11].raw.update(account="team-a-default", qos="normal")
    assert shown()["running-1"] == ("research", "high")
    assert shown()["waiting-1"] == ("team-a-default", "normal")
    # ... unless it says nothing usable: odd types are not shown, the submitted value is
    scheduler.jobs[12].raw.update(account={"set": True}, qos=["high"])
    assert shown()["running-1"] == ("asked", "asked")
    scheduler.jobs[12].raw.update(account="  ", qos=None)
    scheduler.state.pods["team-a/running-1"].job_description = {"account": 7, "qos": ""}
    assert shown()["running-1"] == ("", "")
    # a job the scheduler no longer holds: as submitted
    del scheduler.jobs[11]
    assert shown()["waiting-1"] == ("team-a", "")
    detail = pods.pod_detail(scheduler, "team-a", "waiting-1", now)
    assert detail is not None and (detail.pod.account, detail.pod.qos) == ("team-a", "")


def test_time_to_bound_survives_a_restart_through_the_pod_condition(now: float,
        scheduler: StaticScheduler) -> None:
    rec = scheduler.state.pods["team-a/running-1"]
    rec.bound_at = None  # a record made by a scheduler process that did not bind the Pod
    pod = scheduler.pod_objects["team-a/running-1"]
    bound = datetime.datetime.fromtimestamp(rec.created + 7.4, datetime.UTC)
    pod["status"] = {"conditions": [
        {"type": "Ready", "status": "True", "lastTransitionTime": "2000-01-01T00:00:00Z"},
        {"type": "PodScheduled", "status": "True",
         "lastTransitionTime": bound.strftime("%Y-%m-%dT%H:%M:%SZ")}]}
    row = next(p for p in pods.pods(scheduler, now).pods if p.name == "running-1")
    assert row.time_to_bound_seconds is not None
    assert 6.4 < row.time_to_bound_seconds <= 7.4  # the condition is to the second
    pod["status"] = {}
    row = next(p for p in pods.pods(scheduler, now).pods if p.name == "running-1")
    assert row.time_to_bound_seconds is None


def test_a_pod_without_events_shows_its_last_transition(
        now: float, scheduler: StaticScheduler) -> None:
    rows = {p.name: p for p in pods.pods(scheduler, now).pods}
    assert rows["bound-1"].last_event == ""
    assert rows["bound-1"].last_transition == "Scheduled: bound to kwok-node-000"
    assert rows["done-1"].last_transition.startswith("Scheduled")


def test_pods_filter_by_namespace_state_and_name(now: float, scheduler: StaticScheduler) -> None:
    assert [p.name for p in pods.pods(scheduler, now, namespace="team-a").pods] == [
        "running-1", "waiting-1"]
    assert [p.name for p in pods.pods(scheduler, now, state="waiting").pods] == ["waiting-1"]
    assert [p.name for p in pods.pods(scheduler, now, query="ING").pods] == [
        "running-1", "waiting-1"]
    limited = pods.pods(scheduler, now, namespace="team-b", limit=2)
    assert (limited.total, limited.matching, len(limited.pods)) == (5, 3, 2)


def test_nodes_join_slurm_slurmd_pod_and_node(scheduler: StaticScheduler) -> None:
    rows = {n.slurm_node: n for n in nodes.nodes(scheduler).nodes}
    busy = rows["h100-000"]
    assert (busy.k8s_node, busy.lock, busy.taint) == ("kwok-node-000", "locked",
                                                      "true:NoSchedule")
    assert busy.pods == ["team-a/running-1", "team-b/bound-1"]
    assert busy.jobs == [12, 13]
    assert (busy.cpus, busy.cpus_free, busy.gpus, busy.gpus_free) == (32, 28, 8, 6)
    assert (busy.memory_mib, busy.memory_free_mib) == (262144, 261120)
    cordoned = rows["a100-001"]
    assert cordoned.state_flags == ["IDLE", "DRAIN"] and cordoned.slurm_state == "IDLE+DRAIN"
    assert cordoned.drain_from_kubernetes and cordoned.cordoned
    assert cordoned.drain_reason == "k8s: cordoned by kubectl"
    assert rows["h100-002"].drain_reason.startswith("bad GPU")
    assert not rows["h100-002"].drain_from_kubernetes
    assert rows["a100-003"].lock == "false"  # a slurmd Pod without the annotation: unlocked
    assert rows["a100-003"].pods == []  # its only Pod has finished


def test_nodes_filter(scheduler: StaticScheduler) -> None:
    def names(what: str) -> list[str]:
        return [n.slurm_node for n in nodes.nodes(scheduler, state=what).nodes]

    assert names("drain") == ["a100-001", "h100-002"]
    assert names("locked") == ["h100-000"]
    assert names("mixed") == ["h100-000"]
    assert names("busy") == ["a100-001", "h100-000", "h100-002"]  # a100-003 is plain idle
    assert nodes.nodes(scheduler, state="drain").total == 4


def test_a_node_without_slurmd_pod_has_no_lock(scheduler: StaticScheduler) -> None:
    scheduler.state.slurm_nodes["cpu-000"] = {"name": "cpu-000", "state": ["IDLE"],
                                              "cpus": {"set": True, "number": 4}}
    row = next(n for n in nodes.nodes(scheduler).nodes if n.slurm_node == "cpu-000")
    assert (row.k8s_node, row.lock, row.cpus, row.gpus) == ("", "", 4, 0)


def test_multi_node_jobs_count_on_each_node(scheduler: StaticScheduler) -> None:
    scheduler.jobs[77] = Job(job_id=77, name="x", state="RUNNING", extra="", nodes="a100-[001,003]",
                             reason="")
    rows = {n.slurm_node: n for n in nodes.nodes(scheduler).nodes}
    assert 77 in rows["a100-001"].jobs and 77 in rows["a100-003"].jobs


def test_summary_counts_and_health(now: float, scheduler: StaticScheduler) -> None:
    s = summary(scheduler, now)
    assert s.pods == {"waiting": 1, "rejected": 1, "bound": 1, "running": 1, "terminating": 0,
                      "finished": 1, "total": 5}
    assert s.nodes == {"total": 4, "drain": 2, "down": 0, "locked": 1}
    assert s.active_jobs == 3  # 11 pending, 12 and 13 running; 9 completed
    assert s.kubernetes.ok and s.slurm.ok
    scheduler.watch_problem = "nodes: ServerError: 503"
    scheduler.state.slurm_healthy, scheduler.state.slurm_error = False, "slurmrestd unreachable"
    s = summary(scheduler, now)
    assert (s.kubernetes.ok, s.kubernetes.detail) == (False, "nodes: ServerError: 503")
    assert (s.slurm.ok, s.slurm.detail) == (False, "slurmrestd unreachable")


def test_kubernetes_is_not_healthy_while_a_watch_has_a_problem(
        scheduler: StaticScheduler) -> None:
    scheduler.watch_problem = "caches not synced yet"
    assert kubernetes_health(scheduler) == Health("Kubernetes API", False,
                                                  "caches not synced yet")
    scheduler.watch_problem, scheduler.state.kube_error = "", "a read failed: 503"
    assert kubernetes_health(scheduler) == Health("Kubernetes API", False, "a read failed: 503")


def test_policies_in_force_and_failed_reload(now: float, scheduler: StaticScheduler) -> None:
    ok = policies.policies(scheduler)
    assert ok.last_reload_ok and ok.errors == [] and ok.error_at is None
    assert [p.name for p in ok.policies] == ["sunk-annotations", "sunk-pod"]
    first, second = ok.policies
    assert first == PolicyInfo(
        name="sunk-annotations", source="10-sample.yaml document 1", failure_policy="Fail",
        actions=["Deny"], match_conditions=[], variables=[],
        validations=[RuleView("InvalidAnnotation", "annotations must be valid")],
        mappings=["comment"])
    assert (second.failure_policy, second.actions, second.match_conditions) == (
        "Ignore", ["Warn"], ["has-containers"])
    assert second.validations == [RuleView("NoContainers", "object.spec.containers.size() > 0",
                                           computed=True)]
    scheduler.policies = broken_policies(generation=4)
    failed = policies.policies(scheduler)
    assert not failed.last_reload_ok and failed.generation == 4
    assert failed.errors == [IssueView(
        message="expression does not compile: found '<'", source="30-gpus.yaml document 1",
        policy="gpus-per-pod", field="spec.validations[0].expression")]
    assert summary(scheduler, now).policy_reload_failed


def test_pod_detail_reads_the_pod_object_and_job(now: float, scheduler: StaticScheduler) -> None:
    detail = pods.pod_detail(scheduler, "team-b", "evil", now)
    assert detail is not None
    assert detail.annotations == {"sunk.coreweave.com/exclusive": SCRIPT}
    assert [t.what for t in detail.history] == ["InvalidAnnotation", "seen"]  # newest first
    running = pods.pod_detail(scheduler, "team-a", "running-1", now)
    assert running is not None and running.slurm_job is not None
    assert running.slurm_job["job_state"] == "RUNNING"
    assert pods.pod_detail(scheduler, "team-a", "nobody", now) is None


def test_slurm_job_record_is_flattened() -> None:
    raw = {"job_id": 5, "job_state": ["PENDING"], "state_reason": "Resources",
           "time_limit": {"set": True, "infinite": False, "number": 60},
           "submit_time": {"set": True, "infinite": False, "number": 1_700_000_000},
           "end_time": {"set": False, "infinite": False, "number": 0},
           "priority": {"set": True, "infinite": True, "number": 0},
           "exit_code": {"status": ["SUCCESS"], "return_code": {"set": True, "number": 0}},
           "script": "not shown"}
    out = pods.slurm_job(Job(job_id=5, name="", state="PENDING", extra="", nodes="",
                             reason="Resources", raw=raw))
    assert out == {"job_id": 5, "job_state": "PENDING", "state_reason": "Resources",
                   "time_limit": 60, "submit_time": "2023-11-14T22:13:20+00:00",
                   "priority": "infinite", "exit_code": "0"}


def test_events_from_the_api_server() -> None:
    event = pods.event_view({"type": "Normal", "reason": "Scheduled", "message": "ok",
                             "lastTimestamp": "2026-01-02T03:04:05Z",
                             "source": {"component": "sunk"}})
    assert (event.reason, event.count, event.source) == ("Scheduled", 1, "sunk")
    assert event.last_seen is not None and event.last_seen.year == 2026
    assert pods.event_view({"eventTime": "garbage"}).last_seen is None


def test_sample_builds_the_benchmark_cluster(now: float, ) -> None:
    s = sample(pods=200, nodes=20, seed=3)
    rows = pods.pods(s, now).pods
    assert len(rows) == 200
    assert all(p.account and p.qos for p in rows if p.job_id is not None)
    assert nodes.nodes(s).total == 20
    assert sum(summary(s, now).pods[st] for st in POD_STATES) == 200


def test_nodes_show_kubernetes_room_beside_slurms_and_a_size_mismatch() -> None:
    s = StaticScheduler()
    s.add_node("h100-000", "node-0", cpus=32, alloc_cpus=12, k8s_cpus=33,
               k8s_requested_cpus=13)
    s.add_node("h100-001", "node-1", k8s_cpus=32, k8s_requested_cpus=1)
    s.state.capacity["h100-001"] = "cpu: Slurm 32, Kubernetes leaves 31"
    first, second = nodes.nodes(s).nodes
    assert (first.cpus_free, first.cpus, first.k8s_cpus_requested, first.k8s_cpus) == (
        20, 32, 13, 33)
    assert (first.k8s_memory_mib, first.k8s_memory_requested_mib) == (262144 + 1024, 1024)
    assert (first.k8s_gpus, first.k8s_gpus_requested) == (8, 0)
    assert first.size_mismatch == ""
    assert second.size_mismatch == "cpu: Slurm 32, Kubernetes leaves 31"


def test_the_policies_view_lists_recent_evaluation_errors_newest_first() -> None:
    from sunk.policy import EvaluationError, RecentError

    s = StaticScheduler()
    s.policies.recent = [
        RecentError(2000.0, "ns/b", EvaluationError("gpus", "validations[0]", "no such key",
                                                    enforced=True)),
        RecentError(1000.0, "ns/a", EvaluationError("qos", "mappings.qos", "bad type",
                                                    enforced=False))]
    view = policies.policies(s)
    assert [(e.pod, e.policy, e.field, e.enforced) for e in view.evaluation_errors] == [
        ("ns/b", "gpus", "validations[0]", True), ("ns/a", "qos", "mappings.qos", False)]
    assert view.evaluation_errors[0].at == datetime.datetime.fromtimestamp(2000, datetime.UTC)


def test_gangs_wait_first_then_by_namespace_and_name_members_by_rank(
        now: float, scheduler: StaticScheduler) -> None:
    listing = gangs.gangs(add_gangs(scheduler, now))
    assert (listing.total, listing.waiting) == (3, 2)
    assert [(g.namespace, g.name, g.state) for g in listing.gangs] == [
        ("team-a", "podgroup:pg1", "waiting"), ("team-b", GANG_SCRIPT, "rejected"),
        ("team-a", "job:train", "running")]
    waiting, rejected, train = listing.gangs
    assert [(m.rank, m.name, m.slurm_node, m.k8s_node, m.phase) for m in train.members] == [
        (0, "train-0", "h100-000", "kwok-node-000", "Running"),
        (1, "train-1", "a100-001", "kwok-node-001", "Running"),
        (2, "train-2", "a100-003", "kwok-node-003", "Running")]
    assert (train.size, train.bound, train.job_id, train.job_state) == (3, 3, 20, "RUNNING")
    assert (train.waiting, train.problem) == ("", "")
    assert (waiting.bound, waiting.job_state, waiting.last_transition) == (
        0, "PENDING", "waiting: job 21 pending (Resources): waiting for 2 nodes")
    assert rejected.size is None and rejected.problem.endswith(SCRIPT)
    # a gang that starts waiting moves up, in the same order
    scheduler.state.gangs["team-a/job:train"].waiting = "binding every member"
    assert [g.name for g in gangs.gangs(scheduler).gangs] == [
        "job:train", "podgroup:pg1", GANG_SCRIPT]


def test_a_gangs_state(now: float, scheduler: StaticScheduler) -> None:
    rec = add_gangs(scheduler, now).state.gangs["team-a/job:train"]
    assert gangs.gang_state(rec) == "running"
    rec.members[0].phase = "Pending"
    assert gangs.gang_state(rec) == "bound"
    rec.waiting = "binding every member"
    assert gangs.gang_state(rec) == "waiting"
    rec.problem = "a member can never run"
    assert gangs.gang_state(rec) == "rejected"


def test_gang_detail_has_its_job_and_history_newest_first(now: float,
                                                          scheduler: StaticScheduler) -> None:
    add_gangs(scheduler, now)
    detail = gangs.gang_detail(scheduler, "team-a", "job:train")
    assert detail is not None and detail.slurm_job is not None
    assert detail.slurm_job["nodes"] == "a100-001,a100-003,h100-000"
    assert [t.what for t in detail.history] == ["JobSubmitted", "seen"]
    no_job = gangs.gang_detail(scheduler, "team-b", GANG_SCRIPT)
    assert no_job is not None and no_job.slurm_job is None
    assert gangs.gang_detail(scheduler, "team-a", "job:gone") is None


def test_a_gangs_account_and_qos_are_its_jobs(now: float, scheduler: StaticScheduler) -> None:
    add_gangs(scheduler, now)
    rows = {g.name: g for g in gangs.gangs(scheduler).gangs}
    assert (rows["job:train"].account, rows["job:train"].qos) == ("training", "gang")
    assert (rows["podgroup:pg1"].account, rows["podgroup:pg1"].qos) == ("", "")
    assert (rows[GANG_SCRIPT].account, rows[GANG_SCRIPT].qos) == ("", "")  # no job
    detail = gangs.gang_detail(scheduler, "team-a", "job:train")
    assert detail is not None and (detail.gang.account, detail.gang.qos) == ("training", "gang")
    # its members' rows say the same: their job is the gang's
    members = {p.name: (p.account, p.qos) for p in pods.pods(scheduler, now).pods}
    assert members["train-0"] == members["train-2"] == ("training", "gang")
    scheduler.jobs[20].raw["qos"] = 3
    assert gangs.gangs(scheduler).gangs[-1].qos == ""


def test_pod_rows_name_their_gang_and_rank(now: float, scheduler: StaticScheduler) -> None:
    add_gangs(scheduler, now)
    rows = {p.name: p for p in pods.pods(scheduler, now).pods}
    assert (rows["train-2"].gang, rows["train-2"].gang_rank) == ("team-a/job:train", 2)
    assert (rows["pg1-0"].gang, rows["pg1-0"].gang_rank) == ("team-a/podgroup:pg1", 0)
    assert (rows["running-1"].gang, rows["running-1"].gang_rank) == ("", None)
    # gang_of still names a gang the scheduler no longer holds: no gang
    assert scheduler.state.gang_of["team-a/waiting-1"] == "team-a/job:gone"
    assert (rows["waiting-1"].gang, rows["waiting-1"].gang_rank) == ("", None)
    detail = pods.pod_detail(scheduler, "team-a", "train-1", now)
    assert detail is not None and detail.pod.gang_rank == 1


def test_summary_counts_gangs(now: float, scheduler: StaticScheduler) -> None:
    assert summary(scheduler, now).gangs == {"total": 0, "waiting": 0}
    assert summary(add_gangs(scheduler, now), now).gangs == {"total": 3, "waiting": 2}


def test_sample_builds_gangs_of_every_kind(now: float) -> None:
    s = sample(pods=20, nodes=40, gangs=8, seed=2)
    listing = gangs.gangs(s)
    assert listing.total == 8
    assert {g.state for g in listing.gangs} == {"running", "waiting", "rejected"}
    assert all([m.rank for m in g.members] == sorted(m.rank for m in g.members)
               for g in listing.gangs)
    members = sum(len(g.members) for g in listing.gangs)
    assert sum(bool(p.gang) for p in pods.pods(s, now).pods) == members
