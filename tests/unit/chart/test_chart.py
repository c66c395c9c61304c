"""The Helm chart, rendered by the test bed's helm: scopes, RBAC, arguments, files, values.

Nothing here talks to a cluster (``helm template`` with ``--kube-version``);
tests/e2e/test_chart.py installs the chart into the test bed's API server.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from celpy import celtypes
from celpy.evaluation import CELEvalError
from prometheus_client import REGISTRY

import sunk.runtime.metrics  # noqa: F401  (registers the scheduler's metrics)
from sunk.plans.translate import OWNED_ANNOTATIONS
from sunk.policy.cel import compile_expression, new_activation, to_cel
from sunk.settings import from_args
from testbed import build

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "sunk"
KUBE_VERSION = "1.35.0"
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def helm() -> Path:
    return build.build_helm()


def run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=60,
                          check=False)


def flags(values: dict[str, Any]) -> list[str]:
    return [f"--set-json={key}={json.dumps(value)}" for key, value in values.items()]


def render(helm: Path, values: dict[str, Any] | None = None, *, namespace: str = "slurm",
           release: str = "r") -> list[Obj]:
    values = {"slurm.auth.token": "jwt", **(values or {})}
    done = run_helm(helm, "template", release, str(CHART), "--namespace", namespace,
                    "--kube-version", KUBE_VERSION, *flags(values))
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def only(objects: list[Obj], kind: str, name: str | None = None,
         namespace: str | None = None) -> Obj:
    found = [o for o in objects if o["kind"] == kind
             and (name is None or o["metadata"]["name"] == name)
             and (namespace is None or o["metadata"].get("namespace") == namespace)]
    assert len(found) == 1, f"{len(found)} {kind} {namespace}/{name}"
    return found[0]


def container(objects: list[Obj]) -> Obj:
    deployment = only(objects, "Deployment")
    c: Obj = deployment["spec"]["template"]["spec"]["containers"][0]
    return c


def args(objects: list[Obj]) -> list[str]:
    return list(container(objects)["args"])


def rules(objects: list[Obj]) -> Iterator[tuple[str, str | None, str, str, str | None]]:
    """(kind, namespace, resource, verb, resourceName) for every grant of every (Cluster)Role."""
    for role in objects:
        if role["kind"] not in ("Role", "ClusterRole"):
            continue
        for rule in role["rules"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    for name in rule.get("resourceNames") or [None]:
                        yield (role["kind"], role["metadata"].get("namespace"), resource, verb,
                               name)


SCOPES: dict[str, dict[str, Any]] = {
    "cluster": {"scheduler.scope.type": "cluster"},
    "two namespaces": {"scheduler.scope.type": "namespace",
                       "scheduler.scope.namespaces": "team-a, team-b"},
    "blank namespaces": {"scheduler.scope.type": "namespace", "scheduler.scope.namespaces": ""},
}


# -- lint ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("scope", SCOPES)
def test_the_chart_lints_in_every_scope(helm: Path, scope: str) -> None:
    done = run_helm(helm, "lint", "--strict", str(CHART), "--namespace", "slurm",
                    "--kube-version", KUBE_VERSION, *flags(SCOPES[scope]))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 chart(s) failed" in done.stdout


def test_the_chart_lints_with_its_defaults_and_with_everything_on(helm: Path) -> None:
    everything = {"scheduler.replicas": 3, "scheduler.podMonitor.enabled": True,
                  "scheduler.gpuTypes": {"H100_NVLINK_80GB": "h100"},
                  "scheduler.dashboard.auth.basicAuth": "admin:secret",
                  "slurm.scripts.namespace": "slurm-nodes",
                  "scheduler.priorityClassName": "system-cluster-critical"}
    for values in ({}, everything):
        done = run_helm(helm, "lint", "--strict", str(CHART), "--kube-version", KUBE_VERSION,
                        *flags(values))
        assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(("values", "problem"), [
    ({"scheduler.scope.type": "everywhere"}, "/scheduler/scope/type"),
    ({"scheduler.components": ["scheduler", "kubelet"]}, "/scheduler/components/1"),
    ({"slurm.killWait": "30s"}, "/slurm/killWait"),
    ({"scheduler.extraPolicies": {"no-suffix": "x"}}, "invalid propertyName 'no-suffix'"),
    ({"scheduler.leaderElection": {"leaseDuration": "1.5s"}}, "leaseDuration"),
    ({"scheduler.sheduler": {}}, "additional properties 'sheduler'"),
    ({"scheduler.admissionPolicy": {"enabled": "yes"}}, "/scheduler/admissionPolicy/enabled"),
])
def test_the_schema_refuses_wrong_values(helm: Path, values: dict[str, Any],
                                         problem: str) -> None:
    done = run_helm(helm, "template", "r", str(CHART), *flags(values))
    assert done.returncode != 0
    assert problem in done.stderr


# -- scope and RBAC -------------------------------------------------------------------------------


def test_cluster_scope_grants_pods_everywhere_through_one_cluster_role(helm: Path) -> None:
    objects = render(helm, SCOPES["cluster"])
    grants = set(rules(objects))
    for verb in ("list", "watch", "patch", "delete"):
        assert ("ClusterRole", None, "pods", verb, None) in grants
    assert ("ClusterRole", None, "pods/binding", "create", None) in grants
    assert ("ClusterRole", None, "pods/status", "patch", None) in grants
    assert not [o for o in objects if o["kind"] == "Role"
                and o["metadata"]["name"] in ("r-sunk", "r-sunk-slurmd")]
    binding = only(objects, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == only(objects, "ClusterRole")["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "r-sunk",
                                    "namespace": "slurm"}]
    assert "--scope=cluster" in args(objects)
    assert not [a for a in args(objects) if a.startswith("--watch-namespace")]


def test_namespace_scope_grants_pods_only_in_each_listed_namespace(helm: Path) -> None:
    objects = render(helm, SCOPES["two namespaces"])
    for ns in ("team-a", "team-b"):
        role = only(objects, "Role", "r-sunk", ns)
        assert {(r, v) for _, _, r, v, _ in rules([role])} == {
            ("pods", "list"), ("pods", "watch"), ("pods", "patch"), ("pods", "delete"),
            ("pods/binding", "create"), ("pods/status", "patch"), ("events", "create"),
            ("events", "list")}
        binding = only(objects, "RoleBinding", "r-sunk", ns)
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                      "name": "r-sunk"}
        assert binding["subjects"][0]["namespace"] == "slurm"
    cluster_grants = {(r, v) for k, _, r, v, _ in rules(objects) if k == "ClusterRole"}
    assert ("pods/binding", "create") not in cluster_grants
    assert ("pods/status", "patch") not in cluster_grants
    assert ("pods", "patch") not in cluster_grants and ("pods", "delete") not in cluster_grants
    assert "--watch-namespace=team-a,team-b" in args(objects)
    assert "--scope=namespace" in args(objects)


def test_podgroup_status_is_granted_only_when_kept(helm: Path) -> None:
    objects = render(helm, {"scheduler.gangs.writePodGroupStatus": False})
    assert "--no-podgroup-status" in args(objects)
    assert not from_args(args(objects)).podgroup_status
    assert not [r for r in rules(objects) if r[2] == "podgroups/status"]
    assert "--podgroup-status" in args(render(helm, {}))


def test_blank_namespaces_mean_the_release_namespace(helm: Path) -> None:
    objects = render(helm, SCOPES["blank namespaces"], namespace="hpc")
    only(objects, "Role", "r-sunk", "hpc")
    only(objects, "RoleBinding", "r-sunk", "hpc")
    assert "--watch-namespace=hpc" in args(objects)
    assert from_args(args(objects)).namespaces() == ["hpc"]


def test_duplicate_and_blank_entries_in_the_namespace_list_are_ignored(helm: Path) -> None:
    objects = render(helm, {"scheduler.scope.namespaces": "a,,a , b,"})
    assert sorted(o["metadata"]["namespace"] for o in objects
                  if o["kind"] == "Role" and o["metadata"]["name"] == "r-sunk") == ["a", "b"]


def test_the_whole_grant_is_exactly_what_the_code_uses(helm: Path) -> None:
    """Any widening of the RBAC must be deliberate (and explained in docs/chart.md)."""
    objects = render(helm, {**SCOPES["two namespaces"], "scheduler.replicas": 2,
                            "scheduler.slurmd.namespace": "slurmd"})
    assert set(rules(objects)) == {
        ("ClusterRole", None, "nodes", "list", None),
        ("ClusterRole", None, "nodes", "watch", None),
        ("ClusterRole", None, "nodes", "patch", None),
        ("ClusterRole", None, "jobs", "list", None),
        ("ClusterRole", None, "jobs", "watch", None),
        ("ClusterRole", None, "podgroups", "list", None),
        ("ClusterRole", None, "podgroups/status", "patch", None),
        ("ClusterRole", None, "jobsets", "list", None),
        ("ClusterRole", None, "jobsets", "watch", None),
        ("ClusterRole", None, "podgroups", "watch", None),
        ("ClusterRole", None, "resourceclaims", "list", None),
        ("ClusterRole", None, "resourceclaims", "watch", None),
        ("ClusterRole", None, "resourceslices", "list", None),
        ("ClusterRole", None, "resourceslices", "watch", None),
        ("ClusterRole", None, "resourceclaims/status", "patch", None),
        ("ClusterRole", None, "namespaces", "list", None),
        ("ClusterRole", None, "namespaces", "watch", None),
        ("ClusterRole", None, "pods", "list", None),
        ("ClusterRole", None, "pods", "watch", None),
        ("ClusterRole", None, "pods/eviction", "create", None),
        ("ClusterRole", None, "events", "create", None),
        *{("Role", ns, res, verb, None) for ns in ("team-a", "team-b")
          for res, verb in (("pods", "list"), ("pods", "watch"), ("pods", "patch"),
                            ("pods", "delete"), ("pods/binding", "create"),
                            ("pods/status", "patch"), ("events", "create"),
                            ("events", "list"))},
        ("Role", "slurmd", "pods", "list", None),
        ("Role", "slurmd", "pods", "watch", None),
        ("Role", "slurmd", "pods", "patch", None),
        ("Role", "slurm", "configmaps", "get", "r-sunk-policies"),
        ("Role", "slurm", "configmaps", "list", "r-sunk-policies"),
        ("Role", "slurm", "configmaps", "watch", "r-sunk-policies"),
        ("Role", "slurm", "leases", "create", None),
        ("Role", "slurm", "leases", "get", "r-sunk"),
        ("Role", "slurm", "leases", "update", "r-sunk"),
        ("Role", "slurm", "pods", "patch", None),
    }


def test_without_the_syncer_cluster_wide_it_reads_and_writes_only_podgroup_status(
        helm: Path) -> None:
    objects = render(helm, {"scheduler.components": ["scheduler"]})
    cluster = {(r, v) for k, _, r, v, _ in rules(objects) if k == "ClusterRole"}
    assert cluster == {(r, v) for r in ("nodes", "namespaces", "pods", "jobs", "podgroups",
                                        "jobsets", "resourceclaims", "resourceslices")
                       for v in ("list", "watch")} | {("podgroups/status", "patch"),
                                                      ("resourceclaims/status", "patch")}
    assert {(r, v) for _, ns, r, v, _ in rules(objects) if ns == "slurm" and r == "pods"} >= {
        ("pods", "list"), ("pods", "watch")}
    assert "--components=scheduler" in args(objects)


def test_two_releases_in_two_namespaces_do_not_share_cluster_objects(helm: Path) -> None:
    one = only(render(helm, namespace="a"), "ClusterRole")["metadata"]["name"]
    two = only(render(helm, namespace="b"), "ClusterRole")["metadata"]["name"]
    assert one != two


# -- the Deployment -------------------------------------------------------------------------------


def test_the_scheduler_name_defaults_to_namespace_dash_release(helm: Path) -> None:
    objects = render(helm, namespace="tenant-slurm-staging", release="slurm-scheduler")
    assert "--scheduler-name=tenant-slurm-staging-slurm-scheduler" in args(objects)
    named = render(helm, {"scheduler.name": "gpu-pods"})
    assert "--scheduler-name=gpu-pods" in args(named)


def test_the_rendered_arguments_are_flags_the_scheduler_accepts(helm: Path) -> None:
    objects = render(helm, {"scheduler.replicas": 2, "slurm.killWait": 45,
                            "scheduler.gpuTypes": {"H100_NVLINK_80GB": "h100",
                                                   "A100_PCIE_80GB": "a100"},
                            "scheduler.scope.namespaces": "a,b"}, namespace="hpc")
    settings = from_args(args(objects))
    assert settings.scheduler_name == "hpc-r"
    assert settings.namespaces() == ["a", "b"]
    assert settings.slurm_kill_wait == 45
    assert settings.gpu_types == {"H100_NVLINK_80GB": "h100", "A100_PCIE_80GB": "a100"}
    assert settings.components == ["scheduler", "syncer"]
    assert settings.policies_configmap == "hpc/r-sunk-policies"
    assert settings.slurmd_namespace == "hpc"
    assert settings.leader_elect
    assert (settings.leader_elect_lease_duration, settings.leader_elect_renew_deadline,
            settings.leader_elect_retry_period) == (15, 10, 2)
    assert (settings.leader_elect_resource_namespace,
            settings.leader_elect_resource_name) == ("hpc", "r-sunk")
    assert settings.slurm_auth_token_file is not None
    assert settings.hooks_token_file is not None
    assert settings.dra and settings.dra_classes == {"gpu.nvidia.com": "gpu"}


def test_the_dra_mapping_reaches_the_scheduler_and_off_takes_its_grant_away(helm: Path) -> None:
    objects = render(helm, {"scheduler.dra.types": {"NVIDIA H100 80GB HBM3": "h100",
                                                    "NVIDIA A100 80GB PCIe": "a100"},
                            "scheduler.dra.classes": {"gpu.nvidia.com": "gpu",
                                                      "mig.nvidia.com": "mig"}})
    settings = from_args(args(objects))
    assert settings.dra_types == {"NVIDIA H100 80GB HBM3": "h100",
                                  "NVIDIA A100 80GB PCIe": "a100"}
    assert settings.dra_classes == {"gpu.nvidia.com": "gpu", "mig.nvidia.com": "mig"}
    assert (settings.dra_driver, settings.dra_type_attribute, settings.dra_index_attribute) == (
        "gpu.nvidia.com", "productName", "index")
    off = render(helm, {"scheduler.dra.enabled": False})
    assert not from_args(args(off)).dra
    assert not [r for r in rules(off) if r[2].startswith("resource")]


def test_leader_election_comes_with_more_than_one_replica(helm: Path) -> None:
    single = render(helm)
    assert "--leader-elect" not in args(single)
    assert not [g for g in rules(single) if g[2] == "leases"]
    hooks = only(single, "Service", "r-sunk-hooks")
    assert hooks["spec"]["publishNotReadyAddresses"] is True, "hooks answer during outages"
    assert hooks["spec"]["selector"]["sunk.coreweave.com/leader"] == "true", (
        "the one replica labels itself: no other Pod with the app's labels gets hook calls")
    assert ("Role", "slurm", "pods", "patch", None) in set(rules(single))
    pair = render(helm, {"scheduler.replicas": 2})
    assert "--leader-elect" in args(pair)
    assert only(pair, "Deployment")["spec"]["replicas"] == 2
    for service in ("r-sunk-hooks", "r-sunk-dashboard"):
        selector = only(pair, "Service", service)["spec"]["selector"]
        assert selector["sunk.coreweave.com/leader"] == "true"
    metrics = only(pair, "Service", "r-sunk-metrics")["spec"]["selector"]
    assert "sunk.coreweave.com/leader" not in metrics
    forced = render(helm, {"scheduler.leaderElection.enabled": True})
    assert "--leader-elect" in args(forced)
    # Without a Lease an update must not overlap two schedulers; with one, rolling is safe.
    assert only(single, "Deployment")["spec"]["strategy"] == {"type": "Recreate"}
    assert "strategy" not in only(pair, "Deployment")["spec"]
    assert "strategy" not in only(forced, "Deployment")["spec"]
    env = {e["name"]: e for e in container(pair)["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"


def test_probes_use_the_health_port(helm: Path) -> None:
    c = container(render(helm))
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"hooks": 8000, "metrics": 8080, "health": 8081, "dashboard": 8082}
    assert "--health-probe-bind-address=:8081" in c["args"]


def test_scheduling_constraints_and_resources_reach_the_pod(helm: Path) -> None:
    objects = render(helm, {
        "scheduler.nodeSelector": {"node-role": "control"},
        "scheduler.tolerations": [{"key": "dedicated", "operator": "Exists"}],
        "scheduler.priorityClassName": "system-cluster-critical",
        "scheduler.resources": {"requests": {"cpu": "1"}},
        "scheduler.image": {"repository": "registry.local/sunk", "tag": "1.2.3"}})
    spec = only(objects, "Deployment")["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"node-role": "control"}
    assert spec["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
    assert spec["priorityClassName"] == "system-cluster-critical"
    assert spec["containers"][0]["resources"] == {"requests": {"cpu": "1", "memory": "256Mi"},
                                                  "limits": {"memory": "1Gi"}}
    assert spec["containers"][0]["image"] == "registry.local/sunk:1.2.3"
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True


def test_disabled_renders_nothing(helm: Path) -> None:
    assert render(helm, {"scheduler.enabled": False}) == []


# -- Secrets, the Slurm side ---------------------------------------------------------------------


def test_the_tokens_are_mounted_from_secrets(helm: Path) -> None:
    objects = render(helm, {"scheduler.hooks.token": "hook-secret"})
    volumes = {v["name"]: v for v in
               only(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    assert volumes["slurm-token"]["secret"]["secretName"] == "r-sunk-slurm-token"
    assert only(objects, "Secret", "r-sunk-slurm-token")["stringData"] == {"token": "jwt"}
    assert volumes["hooks-token"]["secret"]["secretName"] == "r-sunk-hooks"
    hooks = only(objects, "Secret", "r-sunk-hooks", "slurm")["stringData"]
    assert hooks["token"] == "hook-secret"
    existing = render(helm, {"slurm.auth.token": "", "slurm.auth.existingSecret": "slurm-jwt",
                             "slurm.auth.existingSecretKey": "auth-token"})
    volume = {v["name"]: v for v in
              only(existing, "Deployment")["spec"]["template"]["spec"]["volumes"]}["slurm-token"]
    assert volume["secret"] == {"secretName": "slurm-jwt",
                                "items": [{"key": "auth-token", "path": "token"}]}
    assert not [o for o in existing if o["kind"] == "Secret" and "slurm" in o["metadata"]["name"]]


def test_a_generated_hook_token_is_the_same_for_the_scheduler_and_the_slurm_side(
        helm: Path) -> None:
    objects = render(helm, {"slurm.scripts.namespace": "slurm-nodes"})
    mine = only(objects, "Secret", "r-sunk-hooks", "slurm")["stringData"]
    theirs = only(objects, "Secret", "r-sunk-hooks", "slurm-nodes")["stringData"]
    assert len(mine["token"]) == 48
    env = dict(line.split("=", 1) for line in theirs["sunk-hooks.env"].splitlines())
    # The env file every job reads holds no secret; the prolog's token file does.
    assert env == {"SUNK_HOOK_URL": "http://r-sunk-hooks.slurm.svc.cluster.local:8000",
                   "SUNK_LOCK_TIMEOUT": "300"}
    assert theirs["sunk-hooks.token"] == mine["token"] == mine["sunk-hooks.token"]
    assert mine["sunk-hooks.env"] == theirs["sunk-hooks.env"]
    assert "token" not in theirs


def test_the_slurm_side_gets_the_scripts_and_the_same_kill_wait(helm: Path) -> None:
    objects = render(helm, {"slurm.killWait": 45, "slurm.scripts.lockTimeout": 120})
    scripts = only(objects, "ConfigMap", "r-sunk-slurm-scripts")["data"]
    for script in ("prolog.sh", "placeholder.sh"):  # (the copies are checked below)
        assert scripts[script] == (CHART / "files" / "scripts" / script).read_text()
    conf = scripts["sunk.conf"].splitlines()
    assert "KillWait=45" in conf
    assert "Prolog=/opt/sunk/scripts/prolog.sh" in conf
    assert "BatchStartTimeout=150" in conf  # above the prolog's wait for its lock
    assert "--slurm-kill-wait=45s" in args(objects)
    assert "--placeholder-script=/opt/sunk/scripts/placeholder.sh" in args(objects)


def test_the_dashboard_has_a_service_and_credentials_or_stays_on_localhost(helm: Path) -> None:
    objects = render(helm, {"scheduler.dashboard.auth.basicAuth": "admin:pw"})
    assert only(objects, "Service", "r-sunk-dashboard")["spec"]["ports"][0]["port"] == 8082
    assert only(objects, "Secret", "r-sunk-dashboard")["stringData"] == {"basic-auth": "admin:pw"}
    env = {e["name"] for e in container(objects)["env"]}
    assert {"SUNK_DASHBOARD_TOKEN", "SUNK_DASHBOARD_BASIC_AUTH"} <= env
    generated = only(render(helm), "Secret", "r-sunk-dashboard")["stringData"]
    assert len(generated["token"]) == 48
    off = render(helm, {"scheduler.dashboard.enabled": False})
    assert not [o for o in off if o["metadata"]["name"] == "r-sunk-dashboard"]
    assert "--dashboard-bind-address=127.0.0.1:8082" in args(off)


def test_the_pod_monitor_is_optional(helm: Path) -> None:
    assert not [o for o in render(helm) if o["kind"] == "PodMonitor"]
    monitor = only(render(helm, {"scheduler.podMonitor.enabled": True,
                                 "scheduler.podMonitor.labels": {"release": "prom"}}),
                   "PodMonitor")
    assert monitor["spec"]["podMetricsEndpoints"] == [
        {"port": "metrics", "path": "/metrics", "interval": "30s"}]
    assert monitor["metadata"]["labels"]["release"] == "prom"


def test_the_grafana_dashboard_is_optional_and_reads_metrics_the_scheduler_has(
        helm: Path) -> None:
    assert not [o for o in render(helm) if o["kind"] == "ConfigMap"
                and o["metadata"]["name"].endswith("-grafana-dashboard")]
    (config_map,) = [o for o in render(helm, {"scheduler.grafanaDashboard.enabled": True})
                     if o["kind"] == "ConfigMap"
                     and o["metadata"]["name"].endswith("-grafana-dashboard")]
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(config_map["data"]["sunk.json"])
    used = {name for panel in dashboard["panels"] for target in panel["targets"]
            for name in re.findall(r"\bsunk_[a-z_]+", target["expr"])}
    assert {"sunk_pods_waiting", "sunk_pod_creation_to_bound_seconds_bucket",
            "sunk_start_estimate_error_seconds_bucket"} <= used
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"),
                "gauge": ("",)}
    known = {metric.name + suffix for metric in REGISTRY.collect()
             if metric.name.startswith("sunk_") for suffix in suffixes.get(metric.type, ())}
    assert used <= known, used - known  # every series it plots, the scheduler exports


# -- policies ------------------------------------------------------------------------------------


def repo_policies() -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((REPO / "policies").glob("*.yaml"))}


def test_the_policies_configmap_holds_the_repositorys_default_policies(helm: Path) -> None:
    data = only(render(helm), "ConfigMap", "r-sunk-policies")["data"]
    assert data == {p.name: p.read_text() for p in (CHART / "files" / "policies").glob("*")}
    assert sorted(data) == sorted(repo_policies())


def test_extra_policies_add_to_replace_or_drop_defaults(helm: Path) -> None:
    as_text = "apiVersion: sunk.coreweave.com/v1alpha1\nkind: SchedulingPolicy\n"
    as_object = {"apiVersion": "sunk.coreweave.com/v1alpha1", "kind": "SchedulingPolicy",
                 "metadata": {"name": "x"}, "spec": {"validations": [{"expression": "true"}]}}
    data = only(render(helm, {"scheduler.extraPolicies": {
        "50-text.yaml": as_text, "60-object.yaml": as_object, "20-pod.yaml": "",
        "10-annotations.yaml": as_text}}), "ConfigMap", "r-sunk-policies")["data"]
    assert sorted(data) == ["10-annotations.yaml", "50-text.yaml", "60-object.yaml"]
    assert data["50-text.yaml"] == as_text == data["10-annotations.yaml"]
    assert yaml.safe_load(data["60-object.yaml"]) == as_object
    none = only(render(helm, {"scheduler.defaultPolicies": False}), "ConfigMap",
                "r-sunk-policies")
    assert none["data"] == {}


def test_the_charts_copies_of_policies_and_scripts_are_current() -> None:
    """Helm packages only the chart's folder: it ships copies. Run charts/sync-files.sh."""
    files = CHART / "files"
    copies = {p.name: p.read_text() for p in sorted((files / "policies").glob("*"))}
    assert copies == repo_policies(), "charts/sunk/files/policies is stale: charts/sync-files.sh"
    scripts = {p.name: p.read_text() for p in sorted((REPO / "sunk" / "scripts").glob("*.sh"))}
    copies = {p.name: p.read_text() for p in sorted((files / "scripts").glob("*"))}
    assert copies == scripts, "charts/sunk/files/scripts is stale: run charts/sync-files.sh"


# -- the admission policy ------------------------------------------------------------------------
# tests/e2e/test_admission_policy.py applies the rendered objects to the real API server; here
# the rendering, and its CEL run through sunk's CEL evaluator over every case.

ADMISSION = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
#: (field, key) of every validation: what the expression reads, from its first operand.
_VALIDATED = re.compile(r'^"([^"]+)" in variables\.(annotations|labels)\b')


def admission(objects: list[Obj]) -> tuple[Obj, Obj]:
    return only(objects, ADMISSION[0]), only(objects, ADMISSION[1])


def field_and_key(validation: Obj) -> tuple[str, str]:
    match = _VALIDATED.match(validation["expression"])
    assert match, validation["expression"]
    return match[2], match[1]


def key_of(validation: Obj) -> str:
    return field_and_key(validation)[1]


def validated(policy: Obj) -> set[tuple[str, str]]:
    return {field_and_key(v) for v in policy["spec"]["validations"]}


def selected_namespaces(binding: Obj) -> list[str] | None:
    """The namespaces the binding names, or None for every namespace."""
    selector = binding["spec"].get("matchResources", {}).get("namespaceSelector")
    if not selector:
        return None
    assert set(selector) == {"matchExpressions"}
    [expression] = selector["matchExpressions"]
    assert (expression["key"], expression["operator"]) == ("kubernetes.io/metadata.name", "In")
    return list(expression["values"])


def test_the_admission_policy_guards_every_key_the_scheduler_owns(helm: Path) -> None:
    policy, binding = admission(render(helm))
    assert policy["apiVersion"] == binding["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert "namespace" not in policy["metadata"] and "namespace" not in binding["metadata"]
    assert policy["metadata"]["name"] == binding["metadata"]["name"] == "r-sunk-slurm"
    assert binding["spec"]["policyName"] == "r-sunk-slurm"
    assert binding["spec"]["validationActions"] == ["Deny"]
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods", "pods/status"],
            "operations": ["CREATE", "UPDATE"]} in spec["matchConstraints"]["resourceRules"]
    # Exactly the keys the scheduler's code calls its own; the leader's is a label.
    assert validated(policy) == {("labels" if k == "leader" else "annotations",
                                  f"sunk.coreweave.com/{k}") for k in OWNED_ANNOTATIONS}
    assert len(spec["validations"]) == len(OWNED_ANNOTATIONS)
    for validation in spec["validations"]:
        assert validation["reason"] == "Forbidden"
        key = key_of(validation)
        assert validation["message"].startswith(
            f"{key} is written only by the scheduler (system:serviceaccount:slurm:r-sunk)")


@pytest.mark.parametrize(("values", "user"), [
    ({}, "system:serviceaccount:hpc:r-sunk"),
    ({"scheduler.serviceAccount.name": "sched"}, "system:serviceaccount:hpc:sched"),
    ({"scheduler.serviceAccount.create": False}, "system:serviceaccount:hpc:default"),
    ({"scheduler.serviceAccount": {"create": False, "name": "theirs"}},
     "system:serviceaccount:hpc:theirs"),
])
def test_the_admission_policy_exempts_the_charts_service_account_only(
        helm: Path, values: dict[str, Any], user: str) -> None:
    objects = render(helm, values, namespace="hpc")
    policy, _ = admission(objects)
    assert policy["spec"]["matchConditions"] == [
        {"name": "not-the-scheduler", "expression": f'request.userInfo.username != "{user}"'}]
    deployment = only(objects, "Deployment")["spec"]["template"]["spec"]
    assert user.rpartition(":")[2] == deployment["serviceAccountName"]


def test_the_admission_policy_follows_the_annotation_prefix(helm: Path) -> None:
    policy, _ = admission(render(helm, {"scheduler.annotationPrefix": "hpc.example.com/"}))
    assert {key for _, key in validated(policy)} == {f"hpc.example.com/{k}"
                                                     for k in OWNED_ANNOTATIONS}
    assert "sunk.coreweave.com" not in json.dumps(policy)


@pytest.mark.parametrize(("scope", "values", "namespaces"), [
    ("cluster", {"scheduler.slurmd.namespace": "slurmd"}, None),
    ("two namespaces", {}, ["team-a", "team-b", "hpc"]),
    ("two namespaces", {"scheduler.slurmd.namespace": "slurmd"},
     ["team-a", "team-b", "slurmd", "hpc"]),
    ("blank namespaces", {}, ["hpc"]),
    ("blank namespaces", {"scheduler.slurmd.namespace": "slurmd"}, ["hpc", "slurmd"]),
])
def test_the_admission_policy_binding_follows_the_scope_and_the_slurmd_namespace(
        helm: Path, scope: str, values: dict[str, Any], namespaces: list[str] | None) -> None:
    """The watched namespaces (job-id, ...), the slurmd Pods' (lock, ...) and the release
    namespace (the leader label on the scheduler's own Pods); in cluster scope, all."""
    _, binding = admission(render(helm, {**SCOPES[scope], **values}, namespace="hpc"))
    assert selected_namespaces(binding) == namespaces
    if namespaces is None:
        assert binding["spec"]["matchResources"] == {}


def test_the_admission_policy_can_be_turned_off(helm: Path) -> None:
    objects = render(helm, {"scheduler.admissionPolicy.enabled": False})
    assert not [o for o in objects if o["kind"] in ADMISSION]
    assert only(objects, "Deployment")  # and the rest is still there
    assert render(helm, {"scheduler.enabled": False}) == []


def test_the_admission_policy_needs_kubernetes_1_30(helm: Path) -> None:
    """The chart installs on 1.29, which has no admissionregistration.k8s.io/v1 policies: say
    so, rather than leave the API server to refuse an unknown kind half-way through."""
    base = ["template", "r", str(CHART), "--kube-version", "1.29.4",
            "--set", "slurm.auth.token=jwt"]
    done = run_helm(helm, *base)
    assert done.returncode != 0
    assert "scheduler.admissionPolicy needs Kubernetes 1.30 or later" in done.stderr
    assert "scheduler.admissionPolicy.enabled=false" in done.stderr
    off = run_helm(helm, *base, "--set", "scheduler.admissionPolicy.enabled=false")
    assert off.returncode == 0, off.stderr
    assert "kind: Deployment" in off.stdout and "ValidatingAdmissionPolicy" not in off.stdout
    on = run_helm(helm, *base[:3], "--kube-version", "1.30.0", *base[5:])
    assert on.returncode == 0, on.stderr
    assert "kind: ValidatingAdmissionPolicyBinding" in on.stdout


def test_two_releases_in_two_namespaces_have_their_own_admission_policies(helm: Path) -> None:
    one, _ = admission(render(helm, namespace="a"))
    two, _ = admission(render(helm, namespace="b"))
    assert one["metadata"]["name"] != two["metadata"]["name"]


# The policy's CEL, run through sunk's own CEL evaluator (cel-python) the way the API server
# runs it: matchConditions, then the variables, then each validation and, when one fails, its
# messageExpression. The e2e test checks that the API server agrees.

SCHEDULER = "system:serviceaccount:slurm:r-sunk"
JOB_ID = "sunk.coreweave.com/job-id"
LEADER = "sunk.coreweave.com/leader"


def pod_meta(annotations: dict[str, str] | None = None,
             labels: dict[str, str] | None = None) -> Obj:
    metadata: Obj = {"name": "p", "namespace": "ns"}
    if annotations is not None:
        metadata["annotations"] = annotations
    if labels is not None:
        metadata["labels"] = labels
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": {}}


def admit(policy: Obj, obj: Obj, old: Obj | None = None, *, user: str = "alice",
          sub_resource: str = "") -> list[str]:
    """The messages of the validations that fail: [] when the request is admitted."""
    spec = policy["spec"]
    request: Obj = {"operation": "CREATE" if old is None else "UPDATE",
                    "userInfo": {"username": user}, "resource": {"resource": "pods"}}
    if sub_resource:  # the API server leaves an empty subResource out
        request["subResource"] = sub_resource
    values: dict[str, Any] = {"object": to_cel(obj), "oldObject": to_cel(old),
                              "request": to_cel(request), "variables": celtypes.MapType()}
    names = values.keys()

    def run(expression: str) -> Any:
        variables = [str(v) for v in values["variables"]]
        result = compile_expression(expression, names=names, variables=variables).run(
            new_activation(values))
        assert not isinstance(result, CELEvalError), (expression, result)
        return result

    if not all(run(c["expression"]) for c in spec["matchConditions"]):
        return []
    for variable in spec["variables"]:
        values["variables"][celtypes.StringType(variable["name"])] = run(variable["expression"])
    return [str(run(v["messageExpression"])) for v in spec["validations"]
            if not run(v["expression"])]


def said(key: str, why: str) -> list[str]:
    return [f"{key} is written only by the scheduler ({SCHEDULER}); {why}"]


def test_the_admission_policys_cel_refuses_a_create_with_any_owned_key(helm: Path) -> None:
    policy, _ = admission(render(helm))
    assert admit(policy, pod_meta()) == []
    assert admit(policy, pod_meta({"team": "x"}, {"app": "y"})) == []
    assert admit(policy, pod_meta({"sunk.coreweave.com/partition": "batch"})) == []
    for key in OWNED_ANNOTATIONS:
        full = f"sunk.coreweave.com/{key}"
        pod = pod_meta(labels={full: "true"}) if key == "leader" else pod_meta({full: "1"})
        assert admit(policy, pod) == said(full, "remove it from the Pod (copied from another Pod?)")
        assert admit(policy, pod, user=SCHEDULER) == []
    # An owned annotation used as a label, or the other way round, is not the owned key.
    assert admit(policy, pod_meta({LEADER: "true"}, {JOB_ID: "1"})) == []
    # A Binding's annotations are copied onto the Pod.
    assert admit(policy, {"kind": "Binding", "metadata": {"annotations": {JOB_ID: "1"}}},
                 sub_resource="binding") == said(
        JOB_ID, "remove it from the Binding (copied from another Pod?)")


def test_the_admission_policys_cel_keeps_owned_keys_as_they_were_on_update(helm: Path) -> None:
    policy, _ = admission(render(helm))
    plain = pod_meta(None, None)
    owned = pod_meta({JOB_ID: "7", "team": "x"}, {LEADER: "true", "app": "y"})
    # Unrelated changes pass, with or without owned keys on the Pod.
    assert admit(policy, pod_meta({"team": "x"}, {"app": "z"}), plain) == []
    assert admit(policy, pod_meta({JOB_ID: "7", "team": "changed"}, {LEADER: "true"}),
                 owned) == []
    assert admit(policy, owned, owned, sub_resource="status") == []
    # Added, changed, removed: refused, for each key and in either map.
    why = {"added": "it may not be added to an existing Pod", "changed": "it may not be changed",
           "removed": "it may not be removed (to start over, recreate the Pod)"}
    for field, key in (("annotations", JOB_ID), ("labels", LEADER)):

        def pod(value: str | None, key: str = key, field: str = field) -> Obj:
            keys = {} if value is None else {key: value}
            return pod_meta(keys, None) if field == "annotations" else pod_meta(None, keys)

        assert admit(policy, pod("1"), pod(None)) == said(key, why["added"])
        assert admit(policy, pod(""), pod(None)) == said(key, why["added"])
        assert admit(policy, pod("1"), pod("2")) == said(key, why["changed"])
        assert admit(policy, pod(None), pod("2")) == said(key, why["removed"])
        assert admit(policy, pod_meta(), pod("2")) == said(key, why["removed"])  # no map at all
        assert admit(policy, pod("1"), pod(None), sub_resource="status") == said(key, why["added"])
        assert admit(policy, pod("2"), pod("2")) == []
        for new, old in (("1", None), ("1", "2"), (None, "2")):
            assert admit(policy, pod(new), pod(old), user=SCHEDULER) == []
