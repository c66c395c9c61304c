"""The Helm chart, rendered by the test bed's helm: scopes, RBAC, arguments, files, values.

Nothing here talks to a cluster (``helm template`` with ``--kube-version``);
tests/e2e/test_chart.py installs the chart into the test bed's API server.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sunk.settings import from_args
from testbed import build

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "sunk"
KUBE_VERSION = "1.35.0"
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def helm() -> Path:
    return build.build_binaries().helm


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
            ("pods/binding", "create"), ("events", "create"), ("events", "list")}
        binding = only(objects, "RoleBinding", "r-sunk", ns)
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                      "name": "r-sunk"}
        assert binding["subjects"][0]["namespace"] == "slurm"
    cluster_grants = {(r, v) for k, _, r, v, _ in rules(objects) if k == "ClusterRole"}
    assert ("pods/binding", "create") not in cluster_grants
    assert ("pods", "patch") not in cluster_grants and ("pods", "delete") not in cluster_grants
    assert "--watch-namespace=team-a,team-b" in args(objects)
    assert "--scope=namespace" in args(objects)


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
        ("ClusterRole", None, "pods", "list", None),
        ("ClusterRole", None, "pods", "watch", None),
        ("ClusterRole", None, "pods/eviction", "create", None),
        ("ClusterRole", None, "events", "create", None),
        *{("Role", ns, res, verb, None) for ns in ("team-a", "team-b")
          for res, verb in (("pods", "list"), ("pods", "watch"), ("pods", "patch"),
                            ("pods", "delete"), ("pods/binding", "create"),
                            ("events", "create"), ("events", "list"))},
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


def test_without_the_syncer_nothing_cluster_wide_but_reading_nodes(helm: Path) -> None:
    objects = render(helm, {"scheduler.components": ["scheduler"]})
    cluster = {(r, v) for k, _, r, v, _ in rules(objects) if k == "ClusterRole"}
    assert cluster == {("nodes", "list"), ("nodes", "watch")}
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


def test_leader_election_comes_with_more_than_one_replica(helm: Path) -> None:
    single = render(helm)
    assert "--leader-elect" not in args(single)
    assert not [g for g in rules(single) if g[2] == "leases"]
    hooks = only(single, "Service", "r-sunk-hooks")
    assert "sunk.coreweave.com/leader" not in hooks["spec"]["selector"]
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
    objects = render(helm, {"slurm.killWait": 45})
    scripts = only(objects, "ConfigMap", "r-sunk-slurm-scripts")["data"]
    for script in ("prolog.sh", "placeholder.sh"):  # (the copies are checked below)
        assert scripts[script] == (CHART / "files" / "scripts" / script).read_text()
    conf = scripts["sunk.conf"].splitlines()
    assert "KillWait=45" in conf
    assert "Prolog=/opt/sunk/scripts/prolog.sh" in conf
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
