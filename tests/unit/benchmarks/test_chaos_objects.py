"""The soak's objects: each gang source makes what its controller or sunk reads as one gang of
the size asked for, the checker reads each source's gang off its Pods, and the policy sets a
ConfigMap edit switches between load (or, the broken one, do not) in sunk's own loader."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.chaoslook import gang_of, pod_look
from benchmarks.chaosobjects import (
    DENIED_LABEL,
    GANG_SOURCES,
    claim_template,
    gang_objects,
    gpu_pod,
    pod,
    policy_sets,
)
from benchmarks.invariants import JobLook, PodLook, violations
from sunk.policy import PolicyLoadError, PolicyStore

HOSTS = {"h100-000": "kwok-node-000"}


def pods_made(source: str, size: int) -> list[dict[str, Any]]:
    """The Pods a gang's objects are, or their controllers will make (a Job's template per
    completion, a LeaderWorkerSet's leader and workers, a JobSet's driver and workers)."""
    out = []
    for path, body in gang_objects(source, "g1", "chaos", "sunk-chaos", size, 2):
        kind, spec = body["kind"], body.get("spec") or {}
        if kind == "Pod":
            out.append(body)
        elif kind == "Job":
            out += [{"spec": spec["template"]["spec"]}] * spec["parallelism"]
        elif kind == "JobSet":
            out += [{"spec": j["template"]["spec"]["template"]["spec"]}
                    for j in spec["replicatedJobs"]
                    for _ in range(j["template"]["spec"]["parallelism"])]
        elif kind == "LeaderWorkerSet":
            template = spec["leaderWorkerTemplate"]
            out += [{"spec": template["leaderTemplate"]["spec"]}] + [
                {"spec": template["workerTemplate"]["spec"]}] * (template["size"] - 1)
        assert path.startswith("/api") and "/namespaces/chaos/" in path
    return out


@pytest.mark.parametrize("source", GANG_SOURCES)
@pytest.mark.parametrize("size", [2, 5, 8])
def test_each_source_makes_one_gang_of_the_size_asked_for_naming_the_scheduler(
        source: str, size: int) -> None:
    made = pods_made(source, size)
    assert len(made) == size
    assert {p["spec"]["schedulerName"] for p in made} == {"sunk-chaos"}
    assert all(p["spec"]["containers"][0]["resources"]["requests"]["memory"] == "1Gi"
               for p in made)


def test_a_job_asks_for_a_gang_where_kubernetes_reads_it_and_a_podgroup_says_its_size() -> None:
    (job,) = gang_objects("job-gang", "g1", "chaos", "s", 4, 1)
    assert job[1]["spec"]["scheduling"] == {"schedulingPolicy": {"gang": {}}}
    (older,) = gang_objects("job-gang", "g1", "chaos", "s", 4, 1, workload_version="v1alpha2")
    assert "scheduling" not in older[1]["spec"]
    group, *members = gang_objects("workload", "g1", "chaos", "s", 3, 1)
    assert group[1]["spec"]["schedulingPolicy"]["gang"]["minCount"] == 3
    assert group[0] == "/apis/scheduling.k8s.io/v1beta1/namespaces/chaos/podgroups"
    assert {m["spec"]["schedulingGroup"]["podGroupName"] for _, m in members} == {"g1"}
    plugins, *labelled = gang_objects("podgroup", "g1", "chaos", "s", 3, 1)
    assert plugins[1]["spec"]["minMember"] == 3
    assert {m["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] for _, m in labelled} == {
        "g1"}
    with pytest.raises(ValueError, match="not a gang source"):
        gang_objects("nonsense", "g1", "chaos", "s", 3, 1)


@pytest.mark.parametrize(("labels", "notes", "spec", "gang"), [
    ({"sunk.coreweave.com/gang": "a"}, {"sunk.coreweave.com/gang-size": "3"}, {},
     ("label:a", 3)),
    ({"leaderworkerset.sigs.k8s.io/name": "infer",
      "leaderworkerset.sigs.k8s.io/group-index": "1"},
     {"leaderworkerset.sigs.k8s.io/size": "4"}, {}, ("lws:infer-1", 4)),
    ({"leaderworkerset.sigs.k8s.io/name": "infer"},
     {"leaderworkerset.sigs.k8s.io/size": "four"}, {}, ("lws:infer-", 0)),
    ({"jobset.sigs.k8s.io/jobset-name": "train"}, {}, {}, ("jobset:train", 0)),
    ({}, {}, {"schedulingGroup": {"podGroupName": "w"}}, ("workload:w", 0)),
    ({"scheduling.x-k8s.io/pod-group": "pg"}, {}, {}, ("podgroup:pg", 0)),
    ({"app": "web"}, {}, {}, ("", 0)),
])
def test_the_checker_reads_each_sources_gang_off_its_pod(
        labels: dict[str, str], notes: dict[str, str], spec: dict[str, Any],
        gang: tuple[str, int]) -> None:
    manifest = {"metadata": {"name": "p", "uid": "u", "namespace": "chaos", "labels": labels,
                             "annotations": notes}, "spec": spec}
    assert gang_of(manifest) == gang
    assert pod_look(manifest).gang == (f"chaos/{gang[0]}" if gang[0] else "")


def test_an_ended_pod_needs_no_job_and_keeps_none_alive() -> None:
    manifest = pod("done", "chaos", "s", 2)
    manifest["metadata"]["uid"] = "u1"
    manifest["spec"]["nodeName"] = "kwok-node-000"
    manifest["status"] = {"phase": "Succeeded"}
    ended = pod_look(manifest)
    assert ended.ended and (ended.cpu_m, ended.memory) == (0, 0)
    running = JobLook(1, "RUNNING", "u1", "h100-000")
    assert [(v.invariant, v.subject) for v in violations([ended], [running], HOSTS)] == [
        ("no-job-without-pod", "job 1")], "its job outlives it"
    assert violations([ended], [], HOSTS) == [], "no job: nothing wrong"
    bound = PodLook("done", "u1", "kwok-node-000")
    assert [v.invariant for v in violations([bound], [], HOSTS)] == ["bound-pod-has-one-job"]


def test_a_gpu_pod_names_its_claim_from_a_template_of_as_many_gpus() -> None:
    manifest = gpu_pod("d1", "chaos", "s", 2)
    assert manifest["spec"]["resourceClaims"] == [
        {"name": "gpus", "resourceClaimTemplateName": "chaos-gpu-2"}]
    assert manifest["spec"]["containers"][0]["resources"]["claims"] == [{"name": "gpus"}]
    template = claim_template("chaos", "chaos-gpu-2", 2)
    assert template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] == 2


def test_the_policy_sets_load_in_sunks_loader_but_the_broken_one_and_the_extra_refuses() -> None:
    default, extra, broken = policy_sets()
    store = PolicyStore.from_configmap(default)
    denied = pod("p", "chaos", "s", 1, labels={DENIED_LABEL: "yes"})
    plain = pod("q", "chaos", "s", 1)
    assert store.evaluate(denied).allowed and store.evaluate(plain).allowed
    assert store.reload_configmap(extra)
    refused = store.evaluate(denied)
    assert not refused.allowed
    assert refused.reason == "DeniedByTheSoak" and "refuses Pods labelled" in refused.message
    assert store.evaluate(plain).allowed
    assert not store.reload_configmap(broken), "a broken set is not put in force"
    assert not store.evaluate(denied).allowed, "the set in force stays"
    with pytest.raises(PolicyLoadError):
        PolicyStore.from_configmap(broken)
