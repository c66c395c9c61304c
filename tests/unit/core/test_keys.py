"""The scheduler's queue keys (sunk.plans.keys): typed, and named the way the cluster model
and the logs name Pods and gangs."""

from __future__ import annotations

import pytest

from sunk.plans.gang import gang_name
from sunk.plans.keys import GangKey, PodKey, ReleaseJob


def test_a_pod_key_is_the_pods_namespace_and_name() -> None:
    pod = {"metadata": {"namespace": "team-a", "name": "web-0", "uid": "u"}}
    assert PodKey.of(pod) == PodKey("team-a", "web-0") == PodKey.parse("team-a/web-0")
    assert str(PodKey.of(pod)) == "team-a/web-0"
    assert PodKey.of({}) == PodKey("", "")


@pytest.mark.parametrize("labels", [
    {"sunk.coreweave.com/gang": "train"}, {"scheduling.x-k8s.io/pod-group": "g"},
    {"leaderworkerset.sigs.k8s.io/group-key": "k", "leaderworkerset.sigs.k8s.io/name": "lws",
     "leaderworkerset.sigs.k8s.io/group-index": "0"}])
def test_a_gang_key_round_trips_the_cluster_models_name_of_a_gang(labels: dict[str, str]
                                                                   ) -> None:
    pod = {"metadata": {"namespace": "ns", "name": "p", "labels": labels}}
    name = gang_name(pod, "sunk.coreweave.com/")
    assert name is not None and ":" in name
    key = GangKey("ns", name)
    assert GangKey.parse(str(key)) == key and str(key) == f"ns/{name}"


def test_keys_of_a_pod_a_gang_and_a_released_job_never_collide() -> None:
    keys = {PodKey("ns", "p"), GangKey("ns", "label:p"), ReleaseJob(PodKey("ns", "p"), "u", 4)}
    assert len(keys) == 3
    same_text: set[object] = {PodKey("ns", "p"), GangKey("ns", "p")}
    assert len(same_text) == 2, "the same text names two different things"
    assert str(ReleaseJob(PodKey("ns", "p"), "u", 4)) == "ns/p (uid u, job 4)"
