"""What the Pod cache keeps of a Pod (sunk.kube.trim)."""

from __future__ import annotations

import copy
import json
import random
from typing import Any

from sunk.kube.trim import CONTAINER_DROPPED, SPEC_DROPPED, STATUS_DROPPED, trim_pod


def running_pod() -> dict[str, Any]:
    """A Pod as the API server returns it once bound and running (kwok's status)."""
    container = {
        "name": "main", "image": "busybox", "restartPolicy": "Always",
        "resources": {"requests": {"cpu": "1", "memory": "100Mi"}},
        "command": ["sleep"], "args": ["inf"], "env": [{"name": "A", "value": "b"}],
        "volumeMounts": [{"name": "token", "mountPath": "/var/run/secrets"}],
        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
        "imagePullPolicy": "Always", "ports": [{"containerPort": 80}]}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "labels": {"app": "x"},
                     "annotations": {"a": "b"}, "ownerReferences": [{"kind": "Job"}],
                     "managedFields": [{"manager": "kubectl"}]},
        "spec": {"schedulerName": "sunk", "nodeName": "n1", "terminationGracePeriodSeconds": 5,
                 "containers": [container], "initContainers": [dict(container, name="init")],
                 "tolerations": [{"key": "k", "operator": "Exists"}],
                 "nodeSelector": {"zone": "a"}, "affinity": {"nodeAffinity": {}},
                 "overhead": {"cpu": "1"}, "priority": 7, "hostname": "h",
                 "volumes": [{"name": "token", "projected": {"sources": []}}],
                 "dnsPolicy": "ClusterFirst", "serviceAccountName": "default",
                 "serviceAccount": "default", "securityContext": {},
                 "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority",
                 "someFutureField": {"kept": True}},
        "status": {"phase": "Running", "qosClass": "Burstable",
                   "conditions": [{"type": "Ready", "status": "True"},
                                  {"type": "PodScheduled", "status": "True",
                                   "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                   "containerStatuses": [{"name": "main", "ready": True}],
                   "hostIP": "10.0.0.1", "hostIPs": [{"ip": "10.0.0.1"}],
                   "podIP": "10.0.0.2", "podIPs": [{"ip": "10.0.0.2"}],
                   "startTime": "2026-01-01T00:00:00Z"}}


def test_a_trimmed_pod_keeps_what_sunk_reads() -> None:
    trimmed = trim_pod(running_pod())
    meta, spec, status = trimmed["metadata"], trimmed["spec"], trimmed["status"]
    assert "managedFields" not in meta
    assert meta == {k: v for k, v in running_pod()["metadata"].items() if k != "managedFields"}
    for kept in ("schedulerName", "nodeName", "terminationGracePeriodSeconds", "tolerations",
                 "nodeSelector", "affinity", "overhead", "priority", "hostname",
                 "someFutureField"):
        assert spec[kept] == running_pod()["spec"][kept], kept
    for name in ("containers", "initContainers"):
        (container,) = spec[name]
        assert set(container) == {"name", "image", "restartPolicy", "resources"}
    assert status == {"phase": "Running", "qosClass": "Burstable", "conditions": [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}


def test_a_trimmed_pod_drops_every_listed_field() -> None:
    trimmed = trim_pod(running_pod())
    assert not SPEC_DROPPED & set(trimmed["spec"])
    assert not STATUS_DROPPED & set(trimmed["status"])
    for container in trimmed["spec"]["containers"] + trimmed["spec"]["initContainers"]:
        assert not CONTAINER_DROPPED & set(container)


def test_trimming_any_shape_never_raises_and_keeps_what_it_does_not_know() -> None:
    """Objects come from the API server, but a garbled one must not stop the watch."""
    odd_values: list[Any] = [None, 1, "x", [], {}, [1, "a", None], {"a": 1}]
    rng = random.Random(7)
    for _ in range(500):
        pod: dict[str, Any] = {}
        for part in ("metadata", "spec", "status"):
            if rng.random() < 0.8:
                value = rng.choice(odd_values)
                if isinstance(value, dict) and rng.random() < 0.7:
                    value = {"containers": rng.choice(odd_values),
                             "initContainers": [rng.choice(odd_values)],
                             "conditions": [rng.choice(odd_values), {"type": "PodScheduled"}],
                             "volumes": rng.choice(odd_values), "other": 1}
                pod[part] = copy.deepcopy(value)
        before = copy.deepcopy(pod)
        trimmed = trim_pod(pod)
        assert set(trimmed) == set(before)
        for part, value in before.items():
            if not isinstance(value, dict):
                assert trimmed[part] == value
            elif "other" in value:
                assert trimmed[part]["other"] == 1


def test_pods_of_one_template_share_their_repeated_strings() -> None:
    first, second = (trim_pod(json.loads(json.dumps(running_pod()))) for _ in range(2))
    assert first == second == trim_pod(running_pod())
    assert first["metadata"]["namespace"] is second["metadata"]["namespace"]
    assert first["spec"]["containers"][0]["image"] is second["spec"]["containers"][0]["image"]
    assert first["spec"]["tolerations"][0]["key"] is second["spec"]["tolerations"][0]["key"]
    assert first["status"]["phase"] is second["status"]["phase"]
    assert first["metadata"]["labels"]["app"] is second["metadata"]["labels"]["app"]
