"""Kubernetes' own gang API: the version read, a PodGroup's policy, its Pods' gang, the
condition written on it."""

from __future__ import annotations

from typing import Any

import pytest

from sunk import kube
from sunk.model.gangindex import GangIndex
from sunk.plans import workload
from sunk.plans.gang import JOB_INDEX, Claim, Owners, claim, gang_name
from tests.unit.core.stand_ins import put

PREFIX = "sunk.coreweave.com/"
NOW = "2026-11-28T12:00:00Z"

# As the API servers of the bed answered (1.36: v1alpha2; 1.37: v1beta1).
PODGROUP_136 = {
    "apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
    "metadata": {"name": "train-workers", "namespace": "ns", "uid": "g-uid", "generation": 1,
                 "finalizers": ["scheduling.k8s.io/podgroup-protection"]},
    "spec": {"podGroupTemplateRef": {"workload": {"workloadName": "train",
                                                  "podGroupTemplateName": "workers"}},
             "schedulingPolicy": {"gang": {"minCount": 4}}, "disruptionMode": "Pod"},
    "status": {}}
PODGROUP_137 = {
    "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
    "metadata": {"name": "train-workers", "namespace": "ns", "uid": "g-uid", "generation": 2,
                 "finalizers": ["scheduling.k8s.io/podgroup-protection"]},
    "spec": {"workloadRef": {"workloadName": "train", "templateName": "workers"},
             "schedulingPolicy": {"gang": {"minCount": 4}}, "disruptionMode": {"single": {}},
             "priority": 0},
    "status": {}}
BASIC = {**PODGROUP_137, "spec": {"schedulingPolicy": {"basic": {}}}}


def member(name: str, group: str = "train-workers", *, index: str | None = None,
           job: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                            "labels": {JOB_INDEX: index} if index is not None else {}}
    if job is not None:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": job,
                                    "uid": "j", "controller": True}]
    return {"metadata": meta, "spec": {"schedulingGroup": {"podGroupName": group}}}


def owners(groups: dict[str, dict[str, Any]], *, known: bool = True,
           jobs: dict[str, tuple[int, int]] | None = None) -> Owners:
    return Owners(job=lambda ns, n: (jobs or {}).get(n), podgroup=lambda ns, n: None,
                  workload=lambda ns, n: workload.policy(groups[n]) if n in groups else None,
                  workloads_known=known)


# -- the version ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("served", "chosen"), [
    ({"v1alpha2": ["workloads", "podgroups", "podgroups/status"]}, "v1alpha2"),
    ({"v1beta1": ["podgroups", "workloads", "priorityclasses"],
      "v1alpha3": ["podgroups", "compositepodgroups"]}, "v1beta1"),
    ({"v1alpha3": ["podgroups"]}, "v1alpha3"),
    ({"v1beta1": ["priorityclasses"]}, None),  # a 1.35 API server: PriorityClasses only
    ({"v1alpha1": ["workloads"]}, None),       # 1.35's alpha: no PodGroups
    ({}, None),
])
def test_the_version_read_is_the_newest_that_serves_podgroups(
        served: dict[str, list[str]], chosen: str | None) -> None:
    assert workload.choose_version(served) == chosen


# -- a PodGroup's policy --------------------------------------------------------------------------
@pytest.mark.parametrize(("group", "policy"), [
    (PODGROUP_136, workload.Policy(gang=True, min_count=4)),
    (PODGROUP_137, workload.Policy(gang=True, min_count=4)),
    (BASIC, workload.Policy(gang=False)),
    ({"spec": {"schedulingPolicy": {"gang": {"minCount": True}}}},
     workload.Policy(gang=True, min_count=None)),
    ({"spec": {"schedulingPolicy": {}}}, None),
    ({"spec": {"schedulingPolicy": "gang"}}, None),
    ({"spec": None}, None),
    ({}, None),
])
def test_a_podgroups_policy(group: dict[str, Any], policy: workload.Policy | None) -> None:
    assert workload.policy(group) == policy


# -- its Pods' gang -------------------------------------------------------------------------------
@pytest.mark.parametrize("group", [PODGROUP_136, PODGROUP_137])
def test_a_gang_podgroup_makes_its_pods_one_gang_of_min_count(group: dict[str, Any]) -> None:
    known = owners({"train-workers": group})
    assert gang_name(member("w-0"), PREFIX) == "workload:train-workers"
    assert claim(member("w-0"), PREFIX, known) == Claim("workload:train-workers", "4")
    # the Job controller's Pods: ranked by their completion index
    assert claim(member("w-1", index="3"), PREFIX, known) == Claim(
        "workload:train-workers", "4", "3")


def test_a_podgroup_not_seen_yet_makes_its_pods_wait() -> None:
    assert claim(member("w-0"), PREFIX, owners({})) == Claim(
        "workload:train-workers", None, waiting="PodGroup train-workers (scheduling.k8s.io) "
                                                "not found")
    waiting = claim(member("w-0"), PREFIX, owners({}, known=False))
    assert waiting is not None and "serves no PodGroups" in waiting.waiting


def test_a_basic_podgroup_asks_for_no_gang_and_the_other_sources_still_apply() -> None:
    known = owners({"g": BASIC}, jobs={"train": (4, 4)})
    assert claim(member("w-0", "g"), PREFIX, known) is None  # a bare one: each Pod alone
    # the Job controller gives every Job a basic PodGroup: a Job that runs all at once stays
    # one gang, as it was without the API
    assert claim(member("w-0", "g", job="train", index="1"), PREFIX, known) == Claim(
        "job:train", "4", "1")
    assert gang_name(member("w-0", "g", job="train"), PREFIX, known) == "job:train"


def test_sunks_own_label_comes_first() -> None:
    labelled = member("w-0")
    labelled["metadata"]["labels"] = {PREFIX + "gang": "mine"}
    assert gang_name(labelled, PREFIX) == "label:mine"


# -- the index files Pods again as their PodGroup is seen -----------------------------------------
def test_pods_are_filed_again_when_their_podgroup_turns_out_basic() -> None:
    index = GangIndex(api=None, annotation_prefix=PREFIX)  # type: ignore[arg-type]
    looked: list[str] = []
    index.handlers.append(looked.append)
    index.pod_handlers.append(lambda kind, pod: looked.append(kube.key(pod)))
    pods = [member(f"w-{i}", "g", job="train") for i in range(2)]
    for p in pods:
        index.observe("ADDED", p)
    assert index.gang_of(pods[0]) == "ns/workload:g"  # not seen yet: it waits for the group
    assert len(index.pods("ns/workload:g")) == 2
    put(index.workload_informer, BASIC | {"metadata": {"name": "g", "namespace": "ns"}})
    index._on_group("workload", index.workload_informer.cache["ns/g"])
    assert index.pods("ns/workload:g") == []
    assert {p["metadata"]["name"] for p in index.pods("ns/job:train")} == {"w-0", "w-1"}
    assert looked == ["ns/workload:g", "ns/w-0", "ns/w-1"]  # each Pod finds its gang anew
    index.observe("DELETED", pods[0])
    index.observe("DELETED", pods[1])
    assert index._in_group == {}


def test_the_owners_lookups_are_made_once_and_read_the_caches_as_they_are_now() -> None:
    """Every Pod event asks for them: made again only when an informer's first listing lands,
    and a relist (a new cache) is read, not the cache they were made with."""
    index = GangIndex(api=None, annotation_prefix=PREFIX)  # type: ignore[arg-type]
    first = index.owners()
    assert index.owners() is first and not first.workloads_known
    index.job_informer.cache = {"ns/train": {"spec": {"parallelism": 4, "completions": 4}}}
    assert first.job("ns", "train") == (4, 4)
    put(index.workload_informer, BASIC | {"metadata": {"name": "g", "namespace": "ns"}})
    assert first.workload("ns", "g") == workload.policy(BASIC)
    index.workload_informer.synced.set()
    now = index.owners()
    assert now is not first and now.workloads_known and index.owners() is now


# -- the condition on the PodGroup ----------------------------------------------------------------
def condition(version: str = "v1beta1", **over: Any) -> dict[str, Any] | None:
    facts: dict[str, Any] = {"gang": "workload:g", "size": 4, "bound": 0, "job_id": 7,
                             "problem": "", "waiting": "", "generation": 2, "now": NOW,
                             "current": []}
    return workload.gang_condition(version, **(facts | over))


def test_the_condition_is_kube_schedulers_of_the_version() -> None:
    placed = condition(bound=4)
    assert placed == {"type": "PodGroupInitiallyScheduled", "status": "True",
                      "reason": "Scheduled", "observedGeneration": 2,
                      "message": "all 4 members are bound to the nodes of Slurm job 7",
                      "lastTransitionTime": NOW}
    older = condition("v1alpha2", waiting="job 7 pending (Resources): waiting for Slurm")
    assert older is not None and older["type"] == "PodGroupScheduled"
    assert (older["status"], older["reason"]) == ("False", "Unschedulable")
    assert older["message"] == "gang workload:g: job 7 pending (Resources): waiting for Slurm"
    refused = condition(problem="5 Pods claim a gang of 4")
    assert refused is not None and refused["message"].endswith("5 Pods claim a gang of 4")
    assert condition() is None  # nothing to say


def test_the_condition_is_written_only_when_it_changes_and_never_turned_back() -> None:
    first = condition(waiting="submitting its job")
    assert first is not None
    assert condition(waiting="submitting its job", current=[first]) is None
    later = condition(waiting="job 7 pending (Priority)", now="2026-11-28T12:01:00Z",
                      current=[first])
    assert later is not None and later["lastTransitionTime"] == NOW  # the status stayed False
    placed = condition(bound=4, now="2026-11-28T12:02:00Z", current=[later])
    assert placed is not None and placed["lastTransitionTime"] == "2026-11-28T12:02:00Z"
    # placed once: a member deleted later does not turn it back
    assert condition(bound=3, waiting="binding every member", current=[placed]) is None


def test_a_pod_whose_group_label_changed_is_not_filed_again_under_the_old_group() -> None:
    index = GangIndex(api=None, annotation_prefix=PREFIX)  # type: ignore[arg-type]
    seen: list[str] = []
    index.pod_handlers.append(lambda kind, pod: seen.append(kube.key(pod)))
    pod = member("w-0", "old")
    index.observe("ADDED", pod)
    moved = member("w-0", "new")
    index.observe("MODIFIED", moved)
    index.observe("DELETED", moved)
    assert index._in_group == {} and index._groups_named == {}
    put(index.workload_informer, BASIC | {"metadata": {"name": "old", "namespace": "ns"}})
    index._on_group("workload", index.workload_informer.cache["ns/old"])
    assert seen == [] and index.pods("ns/workload:old") == []  # no ghost of the deleted Pod


def test_a_status_change_of_a_group_files_nothing_again() -> None:
    index = GangIndex(api=None, annotation_prefix=PREFIX)  # type: ignore[arg-type]
    looked: list[str] = []
    index.handlers.append(looked.append)
    index.observe("ADDED", member("w-0", "g"))
    group = PODGROUP_137 | {"metadata": {"name": "g", "namespace": "ns"}}
    put(index.workload_informer, group)
    index._on_group("workload", index.workload_informer.cache["ns/g"])
    assert looked == ["ns/workload:g"]
    put(index.workload_informer, group | {"status": {"conditions": [{"type": "X"}]}})
    index._on_group("workload", index.workload_informer.cache["ns/g"])
    assert looked == ["ns/workload:g"]  # the same policy: nothing to look at again


@pytest.mark.parametrize("group", [{"versions": "v1beta1"}, {"versions": [None, 3]}, {}])
def test_an_odd_discovery_document_lists_no_version(group: dict[str, Any]) -> None:
    assert workload.served_versions(group) == []
    assert workload.served_resources({"resources": [None, {"name": "podgroups"}]}) == [
        "podgroups"]
