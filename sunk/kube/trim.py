"""What the Pod cache keeps of a Pod: the fields sunk reads, not the whole object.

Every Pod in the cluster is cached (node locks and fit checks need what is bound where), and a
Pod decoded from JSON takes about 12 kB of Python objects, most of it in fields nothing in
sunk reads: volumes and mounts, environment, probes, container statuses, IPs. At 11,000 Pods
that was over 100 MB of the scheduler's memory, and every full garbage collection walked it.

The cache drops the fields listed here (a list of what is dropped, not of what is kept: a
field Kubernetes adds later stays). Before reading a new field of a cached Pod, check that it
is not dropped here. Policies are the exception: an operator's policy may read any field, so
they are given the whole Pod (:meth:`sunk.model.cluster.Cluster.whole_pod`).
"""

from __future__ import annotations

import sys
from typing import Any, Final

Obj = dict[str, Any]

#: Pod spec fields no part of sunk reads.
SPEC_DROPPED: Final = frozenset({
    "volumes", "dnsPolicy", "dnsConfig", "enableServiceLinks", "serviceAccount",
    "serviceAccountName", "automountServiceAccountToken", "securityContext",
    "imagePullSecrets", "hostAliases", "readinessGates", "preemptionPolicy",
})
#: Container fields no part of sunk reads (it reads name, resources and restartPolicy).
CONTAINER_DROPPED: Final = frozenset({
    "volumeMounts", "volumeDevices", "env", "envFrom", "command", "args",
    "terminationMessagePath", "terminationMessagePolicy", "imagePullPolicy",
    "livenessProbe", "readinessProbe", "startupProbe", "lifecycle", "ports",
    "securityContext", "workingDir", "stdin", "stdinOnce", "tty", "resizePolicy",
})
#: Pod status fields no part of sunk reads (it reads phase, and the dashboard the
#: PodScheduled condition: the other conditions are dropped too).
STATUS_DROPPED: Final = frozenset({
    "containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses",
    "hostIP", "hostIPs", "podIP", "podIPs", "startTime",
})
KEPT_CONDITIONS: Final = frozenset({"PodScheduled"})
#: Metadata fields unique to each Pod: not worth sharing (see :func:`_share_strings`).
_UNIQUE_METADATA: Final = frozenset({"name", "uid", "resourceVersion", "creationTimestamp",
                                     "generateName", "managedFields"})
_SHARED_MAX_LENGTH: Final = 64


def trim_pod(pod: Obj) -> Obj:
    """``pod`` without managedFields and the fields listed above (changed in place, and
    returned). Never raises, whatever shape the object has."""
    meta = pod.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    spec = pod.get("spec")
    if isinstance(spec, dict):
        for name in SPEC_DROPPED.intersection(spec):
            del spec[name]
        for list_name in ("containers", "initContainers"):
            containers = spec.get(list_name)
            if isinstance(containers, list):
                for container in containers:
                    if isinstance(container, dict):
                        for name in CONTAINER_DROPPED.intersection(container):
                            del container[name]
    status = pod.get("status")
    if isinstance(status, dict):
        for name in STATUS_DROPPED.intersection(status):
            del status[name]
        conditions = status.get("conditions")
        if isinstance(conditions, list):
            status["conditions"] = [c for c in conditions if isinstance(c, dict)
                                    and c.get("type") in KEPT_CONDITIONS]
    for name, part in pod.items():
        if name == "metadata" and isinstance(part, dict):
            for field, value in part.items():
                if field not in _UNIQUE_METADATA:
                    _share_in(part, field, value)
        else:
            _share_in(pod, name, part)
    return pod


def _share_in(parent: Any, at: Any, value: Any) -> None:
    """``parent[at]`` (``value``) shared if a short string, else the strings within it."""
    if type(value) is str:
        if len(value) <= _SHARED_MAX_LENGTH:
            parent[at] = sys.intern(value)
    elif type(value) is dict or type(value) is list:
        _share_strings(value)


def _share_strings(value: dict[Any, Any] | list[Any]) -> None:
    """Short strings within ``value`` replaced by one shared copy: Pods of one template repeat
    the same namespace, image, labels, tolerations and phase, and JSON decoding gives each its
    own copy (about 1 kB a Pod). The strings are replaced where they are found, without a call
    for each (a Pod event has about 40 of them, and every Pod event is trimmed)."""
    items = value.items() if type(value) is dict else enumerate(value)
    for key, item in items:
        kind = type(item)
        if kind is str:
            if len(item) <= _SHARED_MAX_LENGTH:
                value[key] = sys.intern(item)
        elif kind is dict or kind is list:
            _share_strings(item)
