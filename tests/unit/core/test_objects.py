"""The typed fields of Pods and Nodes: API defaults, camelCase names, the decode-once cache."""

from __future__ import annotations

import logging

import msgspec
import pytest

from sunk import objects


def test_fields_are_read_by_their_api_names_and_missing_ones_take_the_api_default() -> None:
    pod = objects.pod({
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                     "deletionTimestamp": "2026-11-28T10:00:00Z",
                     "ownerReferences": [{"kind": "Job", "name": "j", "uid": "u2",
                                          "apiVersion": "batch/v1", "controller": True}]},
        "spec": {"nodeName": "n1", "schedulerName": "sunk",
                 "initContainers": [{"name": "side", "restartPolicy": "Always",
                                     "resources": {"requests": {"cpu": "1"}}}],
                 "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                     "nodeSelectorTerms": [{"matchExpressions": []}]}}}},
    })
    assert (pod.metadata.key, pod.metadata.resource_version, pod.metadata.terminating) == (
        "ns/p", "7", True)
    assert pod.metadata.owner_references[0].api_version == "batch/v1"
    assert pod.spec.init_containers[0].restart_policy == "Always"
    assert pod.spec.init_containers[0].resources.requests == {"cpu": "1"}
    assert pod.spec.required_node_terms == ({"matchExpressions": []},)
    assert (pod.status.phase, pod.spec.hostname, pod.metadata.labels) == ("Pending", "", {})
    assert objects.pod({}).spec.required_node_terms == ()
    assert objects.node({"metadata": {"name": "n1"}}).metadata.key == "n1"


def test_an_explicit_null_reads_as_the_default() -> None:
    pod = objects.pod({"metadata": {"name": "p", "labels": None},
                       "spec": {"nodeName": None, "containers": [None]}})
    assert (pod.metadata.name, pod.metadata.labels, pod.spec.node_name) == ("p", {}, "")


def test_a_field_of_the_wrong_type_reads_as_an_empty_object_and_is_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "sunk.objects"):
        pod = objects.pod({"metadata": {"name": "odd"}, "spec": {"nodeName": ["a"]}})
    assert pod == objects.Pod()
    assert "'odd'" in caplog.text and "nodeName" in caplog.text


def test_the_fields_are_read_only() -> None:
    pod = objects.pod({"spec": {"nodeName": "n1"}})
    with pytest.raises(AttributeError):
        pod.spec.node_name = "n2"  # type: ignore[misc]


def test_a_kept_object_is_decoded_once_and_another_dict_every_time() -> None:
    decoded = objects.Decoded(objects.Node)
    kept = {"metadata": {"name": "n1"}, "spec": {"unschedulable": True}}
    equal_but_other = msgspec.json.decode(msgspec.json.encode(kept))
    decoded.keep(kept)
    assert decoded.read(kept) is decoded.read(kept)
    assert decoded.read(equal_but_other) == decoded.read(kept)
    assert decoded.read(equal_but_other) is not decoded.read(equal_but_other)
    decoded.drop(equal_but_other)  # not the kept dict: nothing dropped
    assert len(decoded) == 1
    decoded.drop(kept)
    assert len(decoded) == 0 and decoded.read(kept).spec.unschedulable


def test_an_object_cached_as_a_node_is_read_as_one_and_any_other_as_a_pod() -> None:
    node = {"metadata": {"name": "n1", "uid": "u-n1"}, "spec": {"unschedulable": True}}
    objects.NODES.keep(node)
    try:
        assert objects.pod_or_node(node) is objects.NODES.cached(node)
        assert isinstance(objects.pod_or_node(node), objects.Node)
    finally:
        objects.NODES.drop(node)
    assert objects.NODES.cached(node) is None
    other = objects.pod_or_node({"metadata": {"uid": "u-p"}, "spec": {"nodeName": "n1"}})
    assert isinstance(other, objects.Pod) and other.spec.node_name == "n1"
