"""The soak's plan (the same seed, the same work and faults) and its invariant checker, on
plain looks at both sides: a checker that cannot fail proves nothing."""

from __future__ import annotations

from benchmarks.chaos import plan
from benchmarks.chaosfaults import FAULTS, SLURMCTLD_CRASH, plan_faults
from benchmarks.chaosobjects import GANG_SOURCES, labelled_gang
from benchmarks.chaoswork import RATES, plan_work
from benchmarks.invariants import JobLook, PodLook, Tracker, violations

HOSTS = {"h100-000": "kwok-node-000", "h100-001": "kwok-node-001"}
GRACES = {"bound-pod-has-one-job": 45.0, "no-job-without-pod": 60.0}


def test_a_seed_gives_one_plan_with_the_slurmctld_crashes_asked_for() -> None:
    first, again = plan(7, 12, slurmctld_crashes=5), plan(7, 12, slurmctld_crashes=5)
    assert first == again and first != plan(8, 12, slurmctld_crashes=5)
    kinds = [f.kind for f in first.faults]
    assert kinds.count(SLURMCTLD_CRASH) >= 5 and set(kinds) <= set(FAULTS)
    assert len(kinds) >= 12, "about one a minute"
    times = [f.at for f in first.faults]
    assert times == sorted(times) and times[0] > 0 and times[-1] < 12 * 60
    pods = [w for w in first.work if w.kind == "pod"]
    assert 480 < len(pods) < 700, "about 0.8 Pods a second"
    assert all(5 <= w.lifetime <= 90 for w in pods)


def test_the_work_mixes_every_kind_at_its_rate_in_time_order() -> None:
    work = plan_work(7, 30)
    assert [w.at for w in work] == sorted(w.at for w in work)
    counts = {kind: sum(w.kind == kind for w in work) for kind in RATES}
    for kind, rate in RATES.items():  # a Poisson count: within three standard deviations
        mean = rate * 1800
        assert abs(counts[kind] - mean) <= 3 * mean ** 0.5, (kind, counts[kind], mean)
    gangs = [w for w in work if w.kind in GANG_SOURCES]
    assert {w.size for w in gangs} == set(range(2, 9)) and any(w.het for w in gangs)
    assert {w.kind for w in gangs} == set(GANG_SOURCES) and len(gangs) >= 50
    assert all(w.kind == "gang" for w in gangs if w.het), "only sunk's label says a het gang"
    assert {w.size for w in work if w.kind == "gpu-pod"} == {1, 2}
    assert 0.05 < sum(w.denied for w in work if w.kind == "pod") / counts["pod"] < 0.15
    assert all(0.1 <= w.lifetime <= 3 for w in work if w.kind == "mid-bind")
    assert all(0 <= w.size < 8 for w in work if w.kind in ("sbatch", "cordon"))
    assert len({w.name for w in work if w.name}) == sum(bool(w.name) for w in work)


def test_a_gangs_members_carry_its_label_size_and_rank_and_a_het_one_differs() -> None:
    (one,) = [w for w in plan_work(7, 30) if w.kind == "gang" and w.het][:1]
    members = labelled_gang(one.name, "chaos", "sunk-chaos", one.size, one.cpus, het=True)
    assert len(members) == one.size
    labels = {m["metadata"]["labels"]["sunk.coreweave.com/gang"] for m in members}
    assert labels == {one.name}
    notes = [m["metadata"]["annotations"] for m in members]
    assert [n["sunk.coreweave.com/gang-index"] for n in notes] == [
        str(i) for i in range(one.size)]
    assert {n["sunk.coreweave.com/gang-size"] for n in notes} == {str(one.size)}
    cpus = [m["spec"]["containers"][0]["resources"]["requests"]["cpu"] for m in members]
    assert cpus[0] == "1" and set(cpus[1:]) == {"2"}


def test_faults_of_every_kind_short_and_long_only_of_the_kinds_asked_for() -> None:
    faults = plan_faults(7, 60, slurmctld_crashes=5)
    assert {f.kind for f in faults} == set(FAULTS)
    assert any(f.down < 15 for f in faults) and any(f.down >= 30 for f in faults)
    some = plan_faults(7, 12, slurmctld_crashes=5, kinds=("stop scheduler", "kill kwok"))
    assert {f.kind for f in some} == {"stop scheduler", "kill kwok"}, "no crash not asked for"


def test_a_bound_pod_with_its_one_running_job_on_its_node_holds() -> None:
    pods = [PodLook("a", "u1", "kwok-node-000"), PodLook("waiting", "u2")]
    jobs = [JobLook(1, "RUNNING", "u1", "h100-000"), JobLook(2, "PENDING", "u2"),
            JobLook(3, "CANCELLED", "u1", "h100-001")]
    assert violations(pods, jobs, HOSTS) == []


def test_a_bound_pod_without_its_job_or_with_two_or_elsewhere_is_a_violation() -> None:
    pods = [PodLook("lost", "u1", "kwok-node-000"), PodLook("twice", "u2", "kwok-node-000"),
            PodLook("moved", "u3", "kwok-node-000"), PodLook("going", "u4", "kwok-node-000",
                                                              deleting=True)]
    jobs = [JobLook(2, "RUNNING", "u2", "h100-000"), JobLook(3, "RUNNING", "u2", "h100-001"),
            JobLook(4, "RUNNING", "u3", "h100-001"), JobLook(5, "RUNNING", "u4", "h100-000"),
            JobLook(6, "RUNNING", "someone-else", "h100-000")]
    found = {(v.invariant, v.subject) for v in violations(pods, jobs, HOSTS)}
    assert found == {("bound-pod-has-one-job", "lost"), ("bound-pod-has-one-job", "twice"),
                     ("bound-pod-has-one-job", "moved"),
                     ("no-job-without-pod", "job 6")}


def test_a_job_ended_but_still_completing_for_a_pod_that_is_gone_is_slurms_to_finish() -> None:
    jobs = [JobLook(7, "CANCELLED", "gone", "h100-000", completing=True),
            JobLook(8, "PENDING", "gone-too"),  # pending holds no node: the scheduler's GC
            JobLook(9, "CANCELLED", "gone-as-well", "h100-000")]  # ended and let go
    (found,) = violations([], jobs, HOSTS)
    assert (found.invariant, found.subject) == ("no-ended-job-holds-on", "job 7")
    assert found.seen == "CANCELLED+COMPLETING on h100-000; its Pod is gone"
    running = violations([], [JobLook(7, "RUNNING", "gone", "h100-000", completing=True)], HOSTS)
    assert [v.invariant for v in running] == ["no-job-without-pod"], "not ended: sunk's to end"


def test_an_ended_job_gets_the_time_slurm_takes_to_resend_a_kill_its_slurmd_missed() -> None:
    from benchmarks.invariants import SLURM_KILL_RESEND, graces

    given = graces(30.0, 30.0)
    assert given["no-job-without-pod"] == 60.0
    assert given["no-ended-job-holds-on"] == 60.0 + SLURM_KILL_RESEND == 140.0
    tracker = Tracker(given)
    ended = violations([], [JobLook(7, "CANCELLED", "gone", "h100-000", completing=True)], HOSTS)
    assert tracker.look(0.0, ended) == [] and tracker.look(139.0, ended) == []
    assert [v["subject"] for v in tracker.look(140.0, ended)] == ["job 7"]


def test_a_violation_counts_only_once_it_lasts_past_its_grace() -> None:
    tracker = Tracker(GRACES)
    lost = violations([PodLook("lost", "u1", "kwok-node-000")], [], HOSTS)
    assert tracker.look(0.0, lost) == [] and tracker.look(30.0, lost) == []
    assert tracker.look(31.0, []) == [], "it passed: forgotten"
    assert tracker.look(40.0, lost) == [] and tracker.look(84.0, lost) == []
    (reported,) = tracker.look(85.0, lost)
    assert reported["since"] == 40.0 and reported["lasted"] == 45.0
    assert tracker.look(90.0, lost) == [], "reported once"
    assert tracker.reported == [reported]
    assert [v["subject"] for v in tracker.lasting(90.0)] == ["lost"]


def test_the_record_renders_each_invariant_with_its_violations() -> None:
    from benchmarks.chaosreport import render
    from benchmarks.invariants import INVARIANTS

    violation = {"invariant": "no-job-without-pod", "subject": "job 9", "since": 100.0,
                 "lasted": 61.0, "seen": "RUNNING on h100-000; its Pod is gone"}
    figures = {"minutes": 12, "seed": 7, "pods_created": 700, "faults": 13,
               "faults_by_kind": {"kill slurmctld": 5, "stop scheduler": 8},
               "work": {"pod": 690, "gang": 10}, "looks": 1400,
               "unreadable_looks": 90, "scheduler_ready_after_restart_s": [3.1],
               "settled": True, "invariants": {k: v[0] for k, v in INVARIANTS.items()},
               "two_replicas_from_s": 360.5, "pods_seen": 750,
               "violations": [violation], "still_seen_at_end": []}
    text = render({"figures": figures})  # type: ignore[typeddict-item]
    assert "700 Pods created (750 seen, with those the soak's Jobs, JobSets and " in text
    assert "13 faults (kill slurmctld 5, stop scheduler 8)" in text
    assert "did not answer); two replicas with leader election from 360.5 s on\n" in text
    assert "work done: gang 10, pod 690" in text
    assert f"| {INVARIANTS['bound-pod-has-one-job'][0]} | none |" in text
    assert f"| {INVARIANTS['no-job-without-pod'][0]} | 1 |" in text
    assert "at 100.0 s, for 61.0 s: job 9: RUNNING on h100-000" in text
