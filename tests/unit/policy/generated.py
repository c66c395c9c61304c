"""Pods and Namespaces generated from a seed, covering what the default and example policies read.

``generated_pods(count, seed)`` gives the same Pods for the same arguments (``random.Random``,
no hypothesis), as plain JSON data. Each Pod is drawn piece by piece:

- every ``sunk.coreweave.com/`` annotation the policies read, each absent, valid, near-valid
  (a boundary, or one character off), invalid, empty or odd (whitespace, control characters,
  huge and negative numbers, ``0x10``, unicode, very long), and a few look-alike keys;
- the gang label and gang-size / gang-index pairs (index 0, size - 1, size, beyond, negative);
- 0 to 4 containers whose cpu and memory requests are present, absent, zero, malformed, JSON
  numbers instead of strings or null, with limits equal to the requests (Guaranteed QoS, often
  with whole CPUs), different from them or absent, and GPU limits around each namespace's cap;
- init containers with and without ``restartPolicy: Always`` (sidecars);
- ``terminationGracePeriodSeconds`` absent, small, around the limit (KillWait 30 s - 5 s),
  large, negative, null, a string or a float;
- ``status.qosClass``, ``priorityClassName`` and the namespace the example policies key on.

One Pod in twenty (``ODD_SHARE``) is then made structurally odd: fields of the wrong JSON type
(annotations a list, containers a string, requests a number, null metadata, ...).

``NAMESPACES`` are Namespace objects with and without the label the examples read
(``example.com/max-gpus-per-pod``); ``namespace_for`` pairs a Pod with one of them, or none.

Numbers stay within int64 (the API server's JSON), so every Pod converts to CEL values.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Sequence
from typing import Any, Final

PREFIX: Final = "sunk.coreweave.com/"
GANG_LABEL: Final = PREFIX + "gang"
GPU: Final = "nvidia.com/gpu"
GPU_LABEL: Final = "example.com/max-gpus-per-pod"
ODD_SHARE: Final = 20  # one Pod in this many is structurally odd

INT64_MAX: Final = 2**63 - 1
UINT32_MAX: Final = 2**32 - 1
MAX_UINT32_ALLOWED: Final = 4294967293  # params.maxUint32 of 10-annotations.yaml
MAX_GANG: Final = 512  # params.maxGang

Pod = dict[str, Any]
Namespace = dict[str, Any]

# Values any annotation may get: empty, whitespace, control characters, numbers in odd
# spellings, unicode, very long.
ODD_STRINGS: Final[tuple[str, ...]] = (
    "",
    " ",
    "\t",
    "\n",
    " 1",
    "1 ",
    "1\n",
    "\x00",
    "a\x00b",
    "\x1b[31m",
    "\x7f",
    "\x85",
    "\u202e",
    "\ufeff1",
    "0x10",
    "0o7",
    "0b1",
    "1e3",
    "1.0",
    "-0",
    "+5",
    "-1",
    "-9223372036854775808",
    "9223372036854775807",
    "9223372036854775808",
    "99999999999999999999",
    "9" * 400,
    "NaN",
    "Infinity",
    "null",
    "true",
    "[]",
    "{}",
    "\uff11\uff12",  # fullwidth digits
    "\u0663",  # Arabic-Indic three
    "日本語",
    "🎉",
    "ü" * 300,
    "x" * 5000,
)

INTEGER_ANNOTATIONS: Final[dict[str, tuple[int, int]]] = {
    # name: (smallest valid, largest valid)
    "priority": (0, MAX_UINT32_ALLOWED),
    "user-id": (0, MAX_UINT32_ALLOWED),
    "group-id": (0, MAX_UINT32_ALLOWED),
    "timeout": (1, MAX_UINT32_ALLOWED),
    "segment": (1, MAX_GANG),
}
CHOICE_ANNOTATIONS: Final[dict[str, tuple[str, ...]]] = {
    "exclusive": ("none", "ok", "user", "mcs", "topo", "true", "false"),
    "gang-shape": ("exact", "largest", "exact-or-largest"),
}
NODE_LIST_ANNOTATIONS: Final = ("excluded-nodes", "required-nodes")
TEXT_ANNOTATIONS: Final = (
    "account",
    "comment",
    "constraints",
    "current-working-dir",
    "partition",
    "prefer",
    "qos",
    "reservation",
)
GANG_ANNOTATIONS: Final = ("gang-size", "gang-index")
ANNOTATIONS: Final[tuple[str, ...]] = (
    *INTEGER_ANNOTATIONS,
    *CHOICE_ANNOTATIONS,
    *NODE_LIST_ANNOTATIONS,
    *TEXT_ANNOTATIONS,
    *GANG_ANNOTATIONS,
)

# Namespaces the example policies name (account-per-namespace, gpus-per-pod), and others.
POD_NAMESPACES: Final = ("team-a", "team-b", "research", "inference", "default", "tenant-x", "")
ACCOUNTS: Final = {"team-a": "research-a", "team-b": "research-b"}
PRIORITY_CLASSES: Final = ("system-cluster-critical", "production", "batch", "other", "")

NAMESPACES: Final[tuple[Namespace, ...]] = (
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}},
    {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "team-a", "labels": {GPU_LABEL: "2"}},
    },
    {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "research", "labels": {"team": "ml"}},
    },
    {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "inference", "labels": {GPU_LABEL: "0"}},
    },
    {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "default", "labels": {GPU_LABEL: "not-a-number"}},
    },
    {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "tenant-x", "labels": {GPU_LABEL: "99999999999999999999"}},
    },
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "odd", "labels": ["x"]}},
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"labels": {GPU_LABEL: 3}}},
    {"apiVersion": "v1", "kind": "Namespace"},
)


def namespace_for(pod: Any, index: int) -> Namespace | None:
    """The Namespace to evaluate the ``index``-th Pod with: none for one Pod in seven, else
    one of ``NAMESPACES``, by preference one named as the Pod's namespace."""
    if index % 7 == 3:
        return None
    metadata = pod.get("metadata") if isinstance(pod, dict) else None
    name = metadata.get("namespace") if isinstance(metadata, dict) else None
    named = [ns for ns in NAMESPACES if ns.get("metadata", {}).get("name") == name]
    if named and index % 3 != 0:
        return named[index % len(named)]
    return NAMESPACES[index % len(NAMESPACES)]


def generated_pods(count: int, seed: int) -> list[Pod]:
    """``count`` Pods drawn from ``random.Random(seed)``; one in ``ODD_SHARE`` structurally odd."""
    rng = random.Random(seed)
    pods = []
    for index in range(count):
        pod = _pod(rng, index)
        if index % ODD_SHARE == ODD_SHARE - 1:
            pod = _make_odd(rng, pod)
        pods.append(pod)
    return pods


# --- annotations ------------------------------------------------------------------------------


def _integer_value(rng: random.Random, low: int, high: int) -> str:
    kind = rng.random()
    if kind < 0.45:  # valid, boundaries included
        return str(rng.choice([low, low + 1, high, high - 1, rng.randint(low, min(high, 10**6))]))
    if kind < 0.75:  # near-valid: just outside, or a valid number spelled oddly
        value = rng.choice([low, high, 7])
        return rng.choice(
            [
                str(low - 1),
                str(high + 1),
                str(UINT32_MAX),
                f" {value}",
                f"{value} ",
                f"+{value}",
                f"0{value}",
                f"{value}.0",
                f"{value}\n",
                hex(value),
                str(value) * 3,
            ]
        )
    if kind < 0.85:  # invalid
        return rng.choice(["abc", "-1", "one", "1,2", "--1", "1-", "½", str(-(2**31))])
    return rng.choice(ODD_STRINGS)


def _choice_value(rng: random.Random, choices: Sequence[str]) -> str:
    kind = rng.random()
    if kind < 0.5:
        return rng.choice(choices)
    if kind < 0.75:
        word = rng.choice(choices)
        return rng.choice(
            [word.upper(), word.title(), f" {word}", f"{word}\n", word[:-1], word + "s"]
        )
    if kind < 0.85:
        return rng.choice(["exclusive", "shared", "yes", "no", "1", "0", "exact,largest"])
    return rng.choice(ODD_STRINGS)


NEAR_NODE_LISTS: Final = (
    "a,,b", "a, b", ",a", "a,", "node[1-4]", "-a", ".a", "_a", "a b", "a;b", "n\u00f6de", "a,\tb",
)  # fmt: skip
# Control characters of either range (C0 and DEL, C1), and characters just past them.
CONTROL_TEXTS: Final = (
    "a\nb", "tab\there", "\x00", "bell\x07", "\x1f", "del\x7f", "\x80", "\x9f", "\xa0", "\u00e9",
)  # fmt: skip


def _node_list_value(rng: random.Random) -> str:
    kind = rng.random()
    names = ["a", "node-1", "gpu.rack_2", "N01", "x" * 60, "h100-0042"]
    if kind < 0.45:
        return ",".join(rng.sample(names, rng.randint(1, 4)))
    if kind < 0.8:
        return rng.choice(NEAR_NODE_LISTS)
    return rng.choice(ODD_STRINGS)


def _text_value(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.5:
        return rng.choice(
            ["research", "h100", "normal", "A Kubernetes job", "/home/user", "gpu&ib", "resv-1"]
        )
    if kind < 0.8:
        return rng.choice(CONTROL_TEXTS)
    return rng.choice(ODD_STRINGS)


def _gang(rng: random.Random, annotations: dict[str, Any], labels: dict[str, Any]) -> None:
    """The gang label and gang-size / gang-index, alone or together, consistent or not."""
    kind = rng.random()
    if kind < 0.5:
        return
    if rng.random() < 0.7:
        labels[GANG_LABEL] = rng.choice(["job-1", "g", ""])
    if kind < 0.8:
        size = rng.choice([1, 2, 8, MAX_GANG, MAX_GANG + 1, 0])
        index = rng.choice([0, size - 1, size, size + 1, -1])
        if rng.random() < 0.9:
            annotations[PREFIX + "gang-size"] = str(size)
        if rng.random() < 0.9:
            annotations[PREFIX + "gang-index"] = str(index)
    else:
        for name in GANG_ANNOTATIONS:
            if rng.random() < 0.6:
                annotations[PREFIX + name] = _integer_value(rng, 0, MAX_GANG)
    if rng.random() < 0.3:
        annotations[PREFIX + "gang-shape"] = _choice_value(rng, CHOICE_ANNOTATIONS["gang-shape"])


def _annotations(rng: random.Random, labels: dict[str, Any]) -> dict[str, Any]:
    annotations: dict[str, Any] = {}
    present = rng.choice([0.0, 0.1, 0.25, 0.5, 0.9])  # share of the annotations set
    for name in ANNOTATIONS:
        if name in GANG_ANNOTATIONS or rng.random() >= present:
            continue
        if name in INTEGER_ANNOTATIONS:
            value = _integer_value(rng, *INTEGER_ANNOTATIONS[name])
        elif name in CHOICE_ANNOTATIONS:
            value = _choice_value(rng, CHOICE_ANNOTATIONS[name])
        elif name in NODE_LIST_ANNOTATIONS:
            value = _node_list_value(rng)
        else:
            value = _text_value(rng)
        annotations[PREFIX + name] = value
    _gang(rng, annotations, labels)
    if rng.random() < 0.2:  # keys that look like ours and are not, or are not ours at all
        key = rng.choice(
            [
                PREFIX,
                PREFIX + "Priority",
                PREFIX + "priority ",
                "sunk.coreweave.com.priority",
                "other.example.com/priority",
                "kubectl.kubernetes.io/restartedAt",
                PREFIX + "unknown",
            ]
        )
        annotations[key] = rng.choice(["1", "", "x"])
    return annotations


# --- containers -------------------------------------------------------------------------------

CPU_REQUESTS: Final[tuple[Any, ...]] = (
    "1", "2", "4", "32", "500m", "250m", "7900m", "1.5", "0.5", "2000m", "100",
    "0", "0m", "-1", "", "abc", "1Gi", "1e3", "0x10", "1 ", "one",
    2, 1, 0, 1.5, None,
)  # fmt: skip
MEMORY_REQUESTS: Final[tuple[Any, ...]] = (
    "1Gi", "128Mi", "256Mi", "512M", "1G", "1.5Gi", "1000", "100Ki",
    "0", "0Gi", "-1Gi", "", "1GB", "lots", "1Gi ",
    1073741824, 0, None,
)  # fmt: skip
GPU_COUNTS: Final[tuple[Any, ...]] = ("0", "1", "2", "3", "4", "5", "8", "9", "1.5", "abc", 4, 2)


def _resource_list(rng: random.Random, cpu_share: float, memory_share: float) -> dict[str, Any]:
    values: dict[str, Any] = {}
    if rng.random() < cpu_share:
        values["cpu"] = rng.choice(CPU_REQUESTS)
    if rng.random() < memory_share:
        values["memory"] = rng.choice(MEMORY_REQUESTS)
    return values


def _container(rng: random.Random, index: int, *, init: bool = False) -> dict[str, Any]:
    container: dict[str, Any] = {"image": "ubuntu"}
    name_kind = rng.random()
    if name_kind < 0.85:
        container["name"] = f"{'init' if init else 'c'}{index}"
    elif name_kind < 0.9:
        container["name"] = ""
    if init:
        policy = rng.choice(["Always", "Always", "Never", "OnFailure", "always", None, "absent"])
        if policy != "absent":
            container["restartPolicy"] = policy
    resources_kind = rng.random()
    if resources_kind < 0.08:
        return container  # no resources at all
    resources: dict[str, Any] = {}
    if resources_kind < 0.12:
        container["resources"] = resources
        return container
    requests = _resource_list(rng, 0.85, 0.85)
    if rng.random() < 0.9:
        resources["requests"] = requests
    limits_kind = rng.random()
    if limits_kind < 0.35:  # Guaranteed: limits are the requests
        resources["limits"] = dict(requests)
    elif limits_kind < 0.45:  # Guaranteed with whole CPUs, whatever was drawn before
        cpus = rng.choice(["1", "2", "8", 4])
        resources["requests"] = {**requests, "cpu": cpus, "memory": "1Gi"}
        resources["limits"] = {"cpu": cpus, "memory": "1Gi"}
    elif limits_kind < 0.6:
        resources["limits"] = _resource_list(rng, 0.7, 0.7)
    elif limits_kind < 0.65:
        resources["limits"] = {}
    # else: no limits
    if not init and rng.random() < 0.35:
        resources.setdefault("limits", {})[GPU] = rng.choice(GPU_COUNTS)
    container["resources"] = resources
    return container


def _grace_period(rng: random.Random) -> Any:
    """terminationGracePeriodSeconds, or the string "absent"."""
    return rng.choice(
        ["absent", "absent", 0, 1, 5, 24, 25, 26, 30, 3600, INT64_MAX, -1, None, "5", "", 5.0, 24.5]
    )


# --- Pods -------------------------------------------------------------------------------------


def _pod(rng: random.Random, index: int) -> Pod:
    labels: dict[str, Any] = {}
    if rng.random() < 0.5:
        labels["app"] = rng.choice(["inference", "train", ""])
    annotations = _annotations(rng, labels)
    if rng.random() < 0.3:  # the account of account-per-namespace's namespaces, or another
        annotations[PREFIX + "account"] = rng.choice([*ACCOUNTS.values(), "someone-else", ""])
    metadata: dict[str, Any] = {"name": f"pod-{index}", "uid": f"uid-{index:06d}"}
    namespace = rng.choice(POD_NAMESPACES)
    if namespace or rng.random() < 0.5:
        metadata["namespace"] = namespace
    if annotations or rng.random() < 0.5:
        metadata["annotations"] = annotations
    if labels or rng.random() < 0.3:
        metadata["labels"] = labels

    spec: dict[str, Any] = {"schedulerName": "slurm"}
    count = rng.choices([0, 1, 2, 3, 4], weights=[1, 8, 5, 2, 1])[0]
    spec["containers"] = [_container(rng, i) for i in range(count)]
    init_kind = rng.random()
    if init_kind < 0.35:
        spec["initContainers"] = [
            _container(rng, i, init=True) for i in range(rng.choice([0, 1, 1, 2]))
        ]
    grace = _grace_period(rng)
    if grace != "absent":
        spec["terminationGracePeriodSeconds"] = grace
    if rng.random() < 0.4:
        spec["priorityClassName"] = rng.choice(PRIORITY_CLASSES)

    pod: Pod = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    status_kind = rng.random()
    if status_kind < 0.4:
        qos = rng.choice(["Guaranteed", "Burstable", "BestEffort", "Guaranteed", ""])
        pod["status"] = {"phase": "Pending", "qosClass": qos}
    elif status_kind < 0.5:
        pod["status"] = {"phase": "Pending"}
    elif status_kind < 0.55:
        pod["status"] = {}
    return pod


# --- structurally odd Pods --------------------------------------------------------------------

WRONG_TYPES: Final[tuple[Any, ...]] = (None, 1, -1, 1.5, True, "", "text", [], ["a"], {}, {"a": 1})


def _set(path: Sequence[str], value: Any) -> Callable[[Pod], None]:
    """A change that sets ``path`` of a Pod to ``value`` where the path exists as mappings."""

    def change(pod: Pod) -> None:
        node: Any = pod
        for key in path[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node[path[-1]] = copy.deepcopy(value)

    return change


def _each_container(field: str, value: Any) -> Callable[[Pod], None]:
    """A change that sets ``resources.<field>`` of every container to ``value``."""

    def change(pod: Pod) -> None:
        spec = pod.get("spec")
        containers = spec.get("containers") if isinstance(spec, dict) else None
        for container in containers if isinstance(containers, list) else []:
            if isinstance(container, dict):
                container.setdefault("resources", {})
                if isinstance(container["resources"], dict):
                    container["resources"][field] = copy.deepcopy(value)

    return change


def _odd_changes(rng: random.Random) -> list[Callable[[Pod], None]]:
    wrong = rng.choice(WRONG_TYPES)
    return [
        _set(["metadata"], None),
        _set(["metadata"], rng.choice(["pod", ["metadata"], 3])),
        _set(["metadata", "annotations"], ["not", "a", "map"]),
        _set(["metadata", "annotations"], rng.choice(["a=b", 7, None])),
        _set(
            ["metadata", "annotations"],
            {PREFIX + name: rng.choice(WRONG_TYPES) for name in rng.sample(ANNOTATIONS, 3)},
        ),
        _set(["metadata", "labels"], rng.choice([["gang"], "gang", None, {GANG_LABEL: 1}])),
        _set(["metadata", "namespace"], rng.choice([None, 5, ["team-a"], {"name": "team-a"}])),
        _set(["spec"], rng.choice([None, "spec", [], 0])),
        _set(["spec", "containers"], rng.choice(["none", 3, None, {"name": "c"}])),
        _set(["spec", "containers"], rng.choice([["c"], [None], [1, {"name": "c"}], [[]]])),
        _set(["spec", "initContainers"], rng.choice(["i", {}, [None], [{"restartPolicy": 1}]])),
        _set(["spec", "terminationGracePeriodSeconds"], rng.choice([{}, [5], True])),
        _set(["spec", "priorityClassName"], rng.choice([None, 1, ["batch"], {"batch": 1}])),
        _set(["status"], rng.choice(["Pending", [], None, {"qosClass": wrong}])),
        _each_container("requests", rng.choice([4, "cpu=1", ["1"], None, True])),
        _each_container("limits", rng.choice([4, "2", [GPU], None, {GPU: None}])),
        _each_container("requests", {"cpu": wrong, "memory": wrong}),
    ]


def _make_odd(rng: random.Random, pod: Pod) -> Pod:
    """The Pod with one to three fields of the wrong JSON type; now and then nothing at all."""
    if rng.random() < 0.05:
        return {}
    odd = copy.deepcopy(pod)
    for change in rng.sample(_odd_changes(rng), rng.randint(1, 3)):
        change(odd)
    return odd
