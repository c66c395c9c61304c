"""The soak's newer invariants on plain looks: gangs, Nodes' room, GPUs, locks and drains,
Pods waiting without a word. Each case holds in one look and breaks in the next, so each check
is shown able to fail."""

from __future__ import annotations

from dataclasses import replace

from benchmarks.invariants import (
    INVARIANTS,
    ClaimLook,
    JobLook,
    Look,
    NodeLook,
    PodLook,
    Tracker,
    check,
    graces,
    member_id,
)

HOSTS = {"h100-000": "kwok-node-000", "h100-001": "kwok-node-001"}
GIB = 1 << 30
UIDS = ("aaaaaaaa-0000-0000-0000-000000000001", "bbbbbbbb-0000-0000-0000-000000000002")


def found(look: Look) -> set[tuple[str, str]]:
    return {(v.invariant, v.subject) for v in check(look)}


def gang(*nodes: str, size: int = 2) -> tuple[PodLook, ...]:
    return tuple(PodLook(f"m{i}", UIDS[i], node, gang="train", gang_size=size,
                         waiting_says="" if node else "waiting for the gang")
                 for i, node in enumerate(nodes))


def gang_job(state: str = "RUNNING") -> JobLook:
    return JobLook(9, state, "gang-uid", "h100-[000-001]",
                   members=tuple(member_id(u) for u in UIDS),
                   node_list=("h100-000", "h100-001"))


def test_a_gang_wholly_bound_on_its_job_holds_and_its_members_count_as_the_jobs_pods() -> None:
    look = Look(gang("kwok-node-000", "kwok-node-001"), (gang_job(),), HOSTS)
    assert found(look) == set()
    assert found(replace(look, pods=look.pods[:1])) == {
        ("no-gang-partly-bound", "gang train")}, "a member gone, the other still bound"


def test_a_gang_half_bound_is_a_violation_but_not_one_being_deleted() -> None:
    half = Look(gang("kwok-node-000", ""), (gang_job(),), HOSTS)
    assert ("no-gang-partly-bound", "gang train") in found(half)
    going = replace(half, pods=tuple(replace(p, deleting=True) for p in half.pods))
    assert ("no-gang-partly-bound", "gang train") not in found(going)
    waiting = Look(gang("", ""), (gang_job("PENDING"),), HOSTS)
    assert found(waiting) == set()


def test_a_gangs_job_with_its_members_gone_is_left_behind() -> None:
    assert found(Look((), (gang_job(),), HOSTS)) == {("no-job-without-pod", "job 9")}


def test_a_heterogeneous_jobs_components_count_as_one_job() -> None:
    parts = (replace(gang_job(), job_id=9, het_job_id=9, node_list=("h100-000",)),
             replace(gang_job(), job_id=10, het_job_id=9, node_list=("h100-001",)))
    look = Look(gang("kwok-node-000", "kwok-node-001"), parts, HOSTS)
    assert found(look) == set()
    other = replace(parts[1], het_job_id=10)
    assert ("bound-pod-has-one-job", "m0") in found(replace(look, jobs=(parts[0], other)))


def nodes(cpu_m: int = 8000, **kw: object) -> tuple[NodeLook, ...]:
    return (NodeLook("kwok-node-000", "h100-000", cpu_m, 16 * GIB, **kw),)  # type: ignore[arg-type]


def test_a_node_over_its_allocatable_counting_pods_slurm_does_not_know_is_a_violation() -> None:
    pod = PodLook("a", "u1", "kwok-node-000", cpu_m=4000, memory=8 * GIB)
    slurmd = PodLook("slurmd", "u9", "kwok-node-000", cpu_m=4000, memory=GIB)
    job = JobLook(1, "RUNNING", "u1", "h100-000")
    look = Look((pod,), (job,), HOSTS, nodes(), others=(slurmd,))
    assert found(look) == set()
    assert found(replace(look, nodes=nodes(7999))) == {
        ("no-node-over-allocatable", "node kwok-node-000")}
    unbound = replace(look, others=(replace(slurmd, node="", memory=20 * GIB),))
    assert found(unbound) == set()


def test_a_gpu_of_a_claim_held_by_another_job_is_given_twice() -> None:
    pod = PodLook("a", "u1", "kwok-node-000")
    own = JobLook(1, "RUNNING", "u1", "h100-000", gpus=frozenset({("h100-000", 0)}))
    training = JobLook(2, "RUNNING", "", "h100-000", gpus=frozenset({("h100-000", 1)}))
    claim = ClaimLook("gpus", "u1", "kwok-node-000", frozenset({0}))
    look = Look((pod,), (own, training), HOSTS, claims=(claim,))
    assert found(look) == set()
    twice = replace(look, claims=(replace(claim, gpus=frozenset({0, 1})),))
    assert found(twice) == {("no-gpu-given-twice", "claim gpus")}
    ended = replace(twice, jobs=(own, replace(training, state="COMPLETED")))
    assert found(ended) == set()


def test_a_lock_or_taint_on_a_node_that_runs_nothing_is_a_violation() -> None:
    busy = Look((), (), HOSTS, nodes(tainted=True, lock="locked_strict",
                                     slurm_states=frozenset({"MIXED"})))
    assert found(busy) == set()
    idle = replace(busy, nodes=nodes(tainted=True, slurm_states=frozenset({"IDLE"})))
    assert found(idle) == {("no-lock-nothing-needs", "node kwok-node-000")}
    locked = replace(busy, nodes=nodes(lock="locked", slurm_states=frozenset({"IDLE"})))
    assert found(locked) == {("no-lock-nothing-needs", "node kwok-node-000")}


def test_a_drain_of_sunks_outlives_its_cause_is_a_violation() -> None:
    drained = frozenset({"IDLE", "DRAIN"})
    cordon = "k8s: Kubernetes Node kwok-node-000 is cordoned"
    look = Look((), (), HOSTS, nodes(cordoned=True, slurm_states=drained, slurm_reason=cordon))
    assert found(look) == set()
    assert found(replace(look, nodes=nodes(slurm_states=drained, slurm_reason=cordon))) == {
        ("no-lock-nothing-needs", "drain of kwok-node-000")}
    admin = nodes(slurm_states=drained, slurm_reason="admin: disk check")
    assert found(replace(look, nodes=admin)) == set(), "an admin's drain is not sunk's"
    stuck = nodes(slurm_states=drained,
                  slurm_reason="sunk: Pod chaos/p1 still terminating at KillWait (job 4)")
    there = (PodLook("p1", "u1", deleting=True),)
    assert found(Look(there, (), HOSTS, stuck)) == set()
    assert found(Look((), (), HOSTS, stuck)) == {
        ("no-lock-nothing-needs", "drain of kwok-node-000")}


def test_a_pod_waiting_without_an_event_or_a_condition_message_is_a_violation() -> None:
    pods = (PodLook("said", "u1", waiting_says="0/8 nodes are available"),
            PodLook("evented", "u2"), PodLook("mute", "u3"),
            PodLook("going", "u4", deleting=True), PodLook("bound", "u5", "kwok-node-000"))
    jobs = (JobLook(5, "RUNNING", "u5", "h100-000"),)
    look = Look(pods, jobs, HOSTS, explained=frozenset({"u2"}))
    assert found(look) == {("no-pod-waits-unexplained", "mute")}


def test_a_waiting_pod_counts_only_after_a_minute_and_every_invariant_has_a_grace() -> None:
    tracker = Tracker(graces(30, 30))
    assert set(tracker.graces) == set(INVARIANTS)
    assert tracker.graces["no-job-without-pod"] == 60
    mute = check(Look((PodLook("mute", "u3"),), (), HOSTS))
    assert tracker.look(0.0, mute) == [] and tracker.look(59.5, mute) == []
    (reported,) = tracker.look(60.0, mute)
    assert reported["invariant"] == "no-pod-waits-unexplained"


def test_time_while_a_part_is_down_does_not_count_toward_a_grace() -> None:
    tracker = Tracker(graces(30, 30))
    mute = check(Look((PodLook("mute", "u3"),), (), HOSTS))
    assert tracker.look(0.0, mute) == []
    assert tracker.look(50.0, mute, down=True) == [], "50 s of outage: not counted"
    assert tracker.look(100.0, mute) == [], "50 s counted: not yet 60"
    (reported,) = tracker.look(110.5, mute)
    assert reported["since"] == 0.0 and reported["lasted"] == 110.5
