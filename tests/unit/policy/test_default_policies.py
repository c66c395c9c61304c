"""Every rule of the reference product, as the default policies in policies/ encode it."""

from __future__ import annotations

from typing import Any

import pytest

from sunk.policy import Decision, PolicyEngine, load_directory

from .pods import POLICIES, PREFIX, container, pod, realistic_pod, with_status


def denied(decision: Decision, reason: str) -> str:
    """The single denial's message, after checking its reason."""
    assert not decision.allowed, decision
    assert [denial.reason for denial in decision.denials] == [reason], decision
    assert not decision.errors, decision.errors
    return decision.denials[0].message


def test_a_realistic_gpu_pod_passes_and_maps_every_annotation(defaults: PolicyEngine) -> None:
    decision = defaults.evaluate(realistic_pod())
    assert decision.allowed
    assert not decision.warnings and not decision.errors
    assert dict(decision.mappings) == {
        "account": "inference",
        "comment": "A Kubernetes job",
        "partition": "h100",
        "shared": "user",
        "user_id": 1001,
        "group_id": 1001,
        "time_limit": 720,
    }


def test_a_pod_without_annotations_runs_as_root(defaults: PolicyEngine) -> None:
    plain = pod()
    del plain["metadata"]["annotations"]
    decision = defaults.evaluate(plain)
    assert decision.allowed and not decision.errors
    assert dict(decision.mappings) == {"user_id": 0, "group_id": 0}


# --- integer annotations ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["priority", "user-id", "group-id"])
@pytest.mark.parametrize("value", ["0", "100", "007", "+5", "4294967293"])
def test_integer_annotations_accept_what_slurm_can_hold(
    defaults: PolicyEngine, name: str, value: str
) -> None:
    assert defaults.evaluate(pod(annotations={name: value})).allowed


@pytest.mark.parametrize("name", ["priority", "user-id", "group-id"])
@pytest.mark.parametrize(
    "value", ["", "abc", "1.5", "-1", " 1", "1_000", "0x10", "١٢", "4294967294", "9" * 30]
)
def test_integer_annotations_refuse_anything_else(
    defaults: PolicyEngine, name: str, value: str
) -> None:
    message = denied(defaults.evaluate(pod(annotations={name: value})), "InvalidAnnotation")
    assert message == (
        f'annotation {PREFIX}{name} must be an integer from 0 to 4294967293, got "{value}"'
    )


@pytest.mark.parametrize("value", ["0", "-5", "1.5", "forever", ""])
def test_timeout_is_a_positive_number_of_minutes(defaults: PolicyEngine, value: str) -> None:
    message = denied(defaults.evaluate(pod(annotations={"timeout": value})), "InvalidAnnotation")
    assert message == (
        f"annotation {PREFIX}timeout must be a number of minutes from 1 to 4294967293, "
        f'got "{value}"'
    )


def test_timeout_maps_to_the_time_limit_in_minutes(defaults: PolicyEngine) -> None:
    decision = defaults.evaluate(pod(annotations={"timeout": "123"}))
    assert decision.allowed
    assert decision.mappings["time_limit"] == 123


def test_priority_maps_to_the_job_priority(defaults: PolicyEngine) -> None:
    assert defaults.evaluate(pod(annotations={"priority": "100"})).mappings["priority"] == 100


@pytest.mark.parametrize(
    ("annotations", "user", "group"),
    [
        ({}, 0, 0),
        ({"user-id": "1001"}, 1001, 1001),
        ({"user-id": "1001", "group-id": "1002"}, 1001, 1002),
        ({"group-id": "1002"}, 0, 1002),
    ],
)
def test_user_and_group_ids(
    defaults: PolicyEngine, annotations: dict[str, str], user: int, group: int
) -> None:
    mappings = defaults.evaluate(pod(annotations=annotations)).mappings
    assert (mappings["user_id"], mappings["group_id"]) == (user, group)


# --- exclusive ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "shared"),
    [
        ("none", "none"),
        ("ok", "oversubscribe"),
        ("user", "user"),
        ("mcs", "mcs"),
        ("topo", "topo"),
        ("true", "none"),
        ("false", None),
        (None, None),
    ],
)
def test_exclusive_maps_to_the_jobs_sharing_mode(
    defaults: PolicyEngine, value: str | None, shared: str | None
) -> None:
    decision = defaults.evaluate(pod(annotations={} if value is None else {"exclusive": value}))
    assert decision.allowed
    assert decision.mappings.get("shared") == shared


@pytest.mark.parametrize(
    "value",
    ["", "None", "TRUE", "True", "yes", "1", "exclusive", " none", "none ", "oversubscribe"],
)
def test_exclusive_refuses_other_values(defaults: PolicyEngine, value: str) -> None:
    message = denied(defaults.evaluate(pod(annotations={"exclusive": value})), "InvalidAnnotation")
    assert message == (
        f"annotation {PREFIX}exclusive must be one of none, ok, user, mcs or topo "
        f'(or the older "true" or "false"), got "{value}"'
    )


# --- node lists ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["excluded-nodes", "required-nodes"])
@pytest.mark.parametrize(
    ("value", "nodes"),
    [
        ("a100-092-01", ["a100-092-01"]),
        ("a100-092-01,a100-092-02", ["a100-092-01", "a100-092-02"]),
        ("node_1.rack2,N3", ["node_1.rack2", "N3"]),
    ],
)
def test_node_lists_map_to_lists_of_names(
    defaults: PolicyEngine, name: str, value: str, nodes: list[str]
) -> None:
    decision = defaults.evaluate(pod(annotations={name: value}))
    assert decision.allowed
    assert decision.mappings[name.replace("-", "_")] == nodes


@pytest.mark.parametrize("name", ["excluded-nodes", "required-nodes"])
@pytest.mark.parametrize("value", ["", "a, b", "a100-[01-02]", ",a", "a,", "a;b", "-a", "nœud"])
def test_node_lists_refuse_anything_but_node_names(
    defaults: PolicyEngine, name: str, value: str
) -> None:
    message = denied(defaults.evaluate(pod(annotations={name: value})), "InvalidAnnotation")
    assert message == (
        f'annotation {PREFIX}{name} must be comma-separated Slurm node names, got "{value}"'
    )


# --- string annotations -------------------------------------------------------------------

STRINGS = {
    "account": "account",
    "comment": "comment",
    "constraints": "constraints",
    "current-working-dir": "current_working_directory",
    "partition": "partition",
    "prefer": "prefer",
    "qos": "qos",
    "reservation": "reservation",
}


@pytest.mark.parametrize(("name", "field"), STRINGS.items())
def test_string_annotations_map_to_job_fields(
    defaults: PolicyEngine, name: str, field: str
) -> None:
    decision = defaults.evaluate(pod(annotations={name: "Café [1-2] & 'quotes'"}))
    assert decision.allowed
    assert decision.mappings[field] == "Café [1-2] & 'quotes'"


@pytest.mark.parametrize(("name", "field"), STRINGS.items())
def test_an_empty_string_annotation_sets_nothing(
    defaults: PolicyEngine, name: str, field: str
) -> None:
    decision = defaults.evaluate(pod(annotations={name: ""}))
    assert decision.allowed
    assert field not in decision.mappings


@pytest.mark.parametrize("name", STRINGS)
@pytest.mark.parametrize("character", ["\n", "\t", "\x00", "\x1b", "\x7f", "\x85"])
def test_string_annotations_refuse_control_characters(
    defaults: PolicyEngine, name: str, character: str
) -> None:
    decision = defaults.evaluate(pod(annotations={name: f"a{character}b"}))
    message = denied(decision, "InvalidAnnotation")
    assert message == f"annotation {PREFIX}{name} must not contain control characters"


def test_every_invalid_annotation_is_reported(defaults: PolicyEngine) -> None:
    decision = defaults.evaluate(pod(annotations={"priority": "high", "exclusive": "maybe"}))
    assert [denial.reason for denial in decision.denials] == ["InvalidAnnotation"] * 2
    assert "priority" in decision.message and "exclusive" in decision.message


def test_other_annotations_are_ignored(defaults: PolicyEngine) -> None:
    decision = defaults.evaluate(
        pod(annotations={"example.com/priority": "high", f"{PREFIX}unknown": "\x00"})
    )
    assert decision.allowed


def test_the_annotation_prefix_is_a_setting() -> None:
    engine = load_directory(POLICIES, settings={"annotationPrefix": "slurm.example.org/"})
    decision = engine.evaluate(
        pod(annotations={"slurm.example.org/priority": "7", f"{PREFIX}priority": "not read"})
    )
    assert decision.allowed
    assert decision.mappings["priority"] == 7
    bad = engine.evaluate(pod(annotations={"slurm.example.org/priority": "x"}))
    assert bad.denials[0].message.startswith("annotation slurm.example.org/priority must")


# --- resource requests --------------------------------------------------------------------


def test_every_container_must_request_cpu_and_memory(defaults: PolicyEngine) -> None:
    containers = [
        container("ok"),
        container("no-cpu", cpu=None),
        container("no-memory", memory=None),
        container("zero-cpu", cpu="0"),
        container("zero-memory", memory="0Mi"),
        container("nonsense", cpu="lots"),
        {"name": "bare", "image": "ubuntu"},
    ]
    message = denied(defaults.evaluate(pod(containers=containers)), "MissingResourceRequests")
    assert message == (
        "every container must request non-zero cpu and memory (resources.requests); "
        "missing in: no-cpu, no-memory, zero-cpu, zero-memory, nonsense, bare"
    )


@pytest.mark.parametrize(("cpu", "memory"), [("1", "1"), ("100m", "128Gi"), ("0.5", "1e9")])
def test_any_positive_quantity_is_a_request(defaults: PolicyEngine, cpu: str, memory: str) -> None:
    assert defaults.evaluate(pod(containers=[container(cpu=cpu, memory=memory)])).allowed


def test_init_containers_need_no_requests_but_sidecars_do(defaults: PolicyEngine) -> None:
    init = {"name": "init", "image": "busybox"}
    assert defaults.evaluate(pod(initContainers=[init])).allowed
    sidecar = {"name": "proxy", "image": "envoy", "restartPolicy": "Always"}
    message = denied(defaults.evaluate(pod(initContainers=[sidecar])), "MissingResourceRequests")
    assert message.endswith("missing in: proxy")
    assert defaults.evaluate(pod(initContainers=[{**container("proxy"), **sidecar}])).allowed


# --- termination grace period -------------------------------------------------------------


@pytest.mark.parametrize("grace", [0, 5, 24])
def test_a_grace_period_under_kill_wait_minus_5_passes(defaults: PolicyEngine, grace: int) -> None:
    assert defaults.evaluate(pod(grace=grace)).allowed


@pytest.mark.parametrize("grace", [25, 30, 3600])
def test_a_longer_grace_period_is_refused(defaults: PolicyEngine, grace: int) -> None:
    message = denied(defaults.evaluate(pod(grace=grace)), "TerminationGracePeriodTooLong")
    assert message == (
        "terminationGracePeriodSeconds must be less than 25 (the scheduler's "
        f"--slurm-kill-wait of 30s minus 5s), got {grace}"
    )


def test_the_default_grace_period_of_30_s_is_too_long_for_the_default_kill_wait(
    defaults: PolicyEngine,
) -> None:
    message = denied(defaults.evaluate(pod(grace=None)), "TerminationGracePeriodTooLong")
    assert message.endswith("got 30 (the default)")


def test_the_limit_follows_kill_wait() -> None:
    engine = load_directory(POLICIES, settings={"killWaitSeconds": 120})
    assert engine.evaluate(pod(grace=None)).allowed
    assert engine.evaluate(pod(grace=114)).allowed
    message = denied(engine.evaluate(pod(grace=115)), "TerminationGracePeriodTooLong")
    assert message.startswith("terminationGracePeriodSeconds must be less than 115 ")


# --- static CPU allocation ----------------------------------------------------------------

GUARANTEED = {"cpu": "8", "memory": "16Gi"}


def warned(decision: Decision) -> str:
    assert decision.allowed and not decision.errors, decision
    assert [warning.reason for warning in decision.warnings] == ["StaticCPUAllocation"]
    return decision.warnings[0].message


@pytest.mark.parametrize("status", [{"qosClass": "Guaranteed"}, None])
def test_guaranteed_qos_with_whole_cpus_is_warned_about(
    defaults: PolicyEngine, status: dict[str, Any] | None
) -> None:
    base = pod(containers=[container("main", cpu="8", memory="16Gi", limits=GUARANTEED)])
    message = warned(defaults.evaluate(with_status(base, **status) if status else base))
    assert message == (
        "Guaranteed QoS with whole-number CPU requests (containers: main): the static CPU "
        "manager pins these CPUs, which conflicts with Slurm's CPU accounting and ends in "
        "node drains; request fractional CPUs (for example 7900m) or set CPU limits above "
        "requests"
    )


@pytest.mark.parametrize(
    ("requests", "limits"),
    [
        ({"cpu": "7900m", "memory": "16Gi"}, {"cpu": "7900m", "memory": "16Gi"}),  # fractional
        ({"cpu": "8", "memory": "16Gi"}, {"cpu": "16", "memory": "16Gi"}),  # Burstable
        ({"cpu": "8", "memory": "16Gi"}, {"memory": "16Gi"}),  # Burstable
    ],
)
def test_other_pods_get_no_warning(
    defaults: PolicyEngine, requests: dict[str, str], limits: dict[str, str]
) -> None:
    base = pod(
        containers=[container(cpu=requests["cpu"], memory=requests["memory"], limits=limits)]
    )
    decision = defaults.evaluate(base)
    assert decision.allowed and not decision.warnings and not decision.errors


def test_the_api_servers_qos_class_is_trusted(defaults: PolicyEngine) -> None:
    base = pod(containers=[container(cpu="8", memory="16Gi", limits=GUARANTEED)])
    decision = defaults.evaluate(with_status(base, qosClass="Burstable"))
    assert not decision.warnings


# --- gangs and topology -------------------------------------------------------------------


def member(**annotations: str) -> dict[str, Any]:
    body = pod(annotations=annotations)
    body["metadata"]["labels"] = {f"{PREFIX}gang": "train"}
    return body


@pytest.mark.parametrize(("size", "index"), [("1", "0"), ("4", "3"), ("512", "0"), ("4", None)])
def test_a_gang_member_gives_a_whole_size_and_a_rank_below_it(
        defaults: PolicyEngine, size: str, index: str | None) -> None:
    annotations = {"gang-size": size} | ({"gang-index": index} if index is not None else {})
    assert defaults.evaluate(member(**annotations)).allowed


@pytest.mark.parametrize("size", ["0", "abc", "-1", "1.5", "513", "٣", ""])
def test_a_gang_size_that_is_not_a_number_of_pods_is_refused(
        defaults: PolicyEngine, size: str) -> None:
    message = denied(defaults.evaluate(member(**{"gang-size": size})), "InvalidAnnotation")
    assert message == (f"annotation {PREFIX}gang-size must be a number of Pods from 1 to 512, "
                       f'got "{size}"')


@pytest.mark.parametrize("index", ["4", "-1", "x", "99"])
def test_a_rank_outside_the_gang_is_refused(defaults: PolicyEngine, index: str) -> None:
    message = denied(defaults.evaluate(member(**{"gang-size": "4", "gang-index": index})),
                     "InvalidAnnotation")
    assert f"{PREFIX}gang-index must be a rank" in message and f'"{index}"' in message


@pytest.mark.parametrize("annotation", ["gang-size", "gang-index"])
def test_gang_annotations_without_the_gang_label_are_refused(
        defaults: PolicyEngine, annotation: str) -> None:
    message = denied(defaults.evaluate(pod(annotations={annotation: "1"})), "InvalidAnnotation")
    assert f"the Pod needs the label {PREFIX}gang" in message


def test_a_segment_maps_to_the_jobs_segment_size(defaults: PolicyEngine) -> None:
    decision = defaults.evaluate(pod(annotations={"segment": "4"}))
    assert decision.allowed and decision.mappings["segment_size"] == 4


@pytest.mark.parametrize("value", ["0", "four", "-2", "513"])
def test_a_segment_that_is_not_a_number_of_nodes_is_refused(
        defaults: PolicyEngine, value: str) -> None:
    message = denied(defaults.evaluate(pod(annotations={"segment": value})), "InvalidAnnotation")
    assert f"{PREFIX}segment must be a number of nodes" in message
