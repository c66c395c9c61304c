"""The JobSet controller in the test bed: what is generated and built for it, its webhook
configurations pointed at 127.0.0.1, its configuration and command line, its status row."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import pytest

from testbed import build, cluster, procs
from testbed.cluster import (
    JOBSET_POD_SELECTOR,
    LWS_POD_SELECTOR,
    jobset_webhook_configurations,
    lws_webhook_configurations,
)

#: The shape controller-gen writes (JobSet v0.11.1's config/components/webhook/manifests.yaml,
#: shortened).
GENERATED = """---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: mutating-webhook-configuration
webhooks:
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: webhook-service, namespace: system,
              path: /mutate-jobset-x-k8s-io-v1alpha2-jobset}
  failurePolicy: Fail
  name: mjobset.kb.io
  rules:
  - {apiGroups: [jobset.x-k8s.io], apiVersions: [v1alpha2], operations: [CREATE],
     resources: [jobsets]}
  sideEffects: None
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}
  failurePolicy: Fail
  name: mpod.kb.io
  rules:
  - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  sideEffects: None
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: validating-webhook-configuration
webhooks:
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: webhook-service, namespace: system,
              path: /validate-jobset-x-k8s-io-v1alpha2-jobset}
  failurePolicy: Fail
  name: vjobset.kb.io
  rules:
  - {apiGroups: [jobset.x-k8s.io], apiVersions: [v1alpha2], operations: [CREATE, UPDATE],
     resources: [jobsets]}
  sideEffects: None
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /validate--v1-pod}
  failurePolicy: Fail
  name: vpod.kb.io
  rules:
  - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  sideEffects: None
"""


@pytest.fixture(autouse=True)
def _no_testbed_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Point the state directory somewhere empty, never at a running test bed's."""
    monkeypatch.setenv("SUNK_TESTBED_DIR", str(tmp_path))


def _hooks(configs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {h["name"]: h for c in configs for h in c["webhooks"]}


# -- webhook configurations ------------------------------------------------------------------


def test_services_become_urls_on_127_0_0_1_with_the_ca_bundle() -> None:
    configs = jobset_webhook_configurations(GENERATED, port=9444, ca_bundle=b"PEM")
    assert [(c["kind"], c["metadata"]["name"]) for c in configs] == [
        ("MutatingWebhookConfiguration", "jobset-mutating-webhook-configuration"),
        ("ValidatingWebhookConfiguration", "jobset-validating-webhook-configuration")]
    hooks = [h for c in configs for h in c["webhooks"]]
    assert [h["clientConfig"]["url"] for h in hooks] == [
        "https://127.0.0.1:9444/mutate-jobset-x-k8s-io-v1alpha2-jobset",
        "https://127.0.0.1:9444/mutate--v1-pod",
        "https://127.0.0.1:9444/validate-jobset-x-k8s-io-v1alpha2-jobset",
        "https://127.0.0.1:9444/validate--v1-pod"]
    assert all(base64.b64decode(h["clientConfig"]["caBundle"]) == b"PEM" for h in hooks)
    assert all(set(h["clientConfig"]) == {"url", "caBundle"} for h in hooks)
    # The rest of what controller-gen wrote is kept.
    assert all(h["failurePolicy"] == "Fail" and h["sideEffects"] == "None" for h in hooks)
    assert _hooks(configs)["vjobset.kb.io"]["rules"][0]["operations"] == ["CREATE", "UPDATE"]


def test_only_pods_of_a_jobset_reach_the_pod_webhooks() -> None:
    """As JobSet's kustomize patches (config/components/webhook/patches/*-patch.yaml) say."""
    assert JOBSET_POD_SELECTOR == {"matchExpressions": [
        {"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]}
    hooks = _hooks(jobset_webhook_configurations(GENERATED, port=1, ca_bundle=b""))
    assert hooks["mpod.kb.io"]["objectSelector"] == JOBSET_POD_SELECTOR
    assert hooks["vpod.kb.io"]["objectSelector"] == JOBSET_POD_SELECTOR
    assert "objectSelector" not in hooks["mjobset.kb.io"]
    assert "objectSelector" not in hooks["vjobset.kb.io"]


def test_each_pod_webhook_has_a_selector_of_its_own() -> None:
    hooks = _hooks(jobset_webhook_configurations(GENERATED, port=1, ca_bundle=b""))
    hooks["mpod.kb.io"]["objectSelector"]["matchExpressions"].append({"key": "x"})
    assert hooks["vpod.kb.io"]["objectSelector"] == JOBSET_POD_SELECTOR
    assert JOBSET_POD_SELECTOR["matchExpressions"] == [
        {"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]


def test_jobset_and_lws_configurations_live_side_by_side() -> None:
    """controller-gen names every project's configurations alike: one would replace the
    other's, and each project's Pod webhooks keep their own selector."""
    jobset = jobset_webhook_configurations(GENERATED, port=1, ca_bundle=b"")
    lws = lws_webhook_configurations(GENERATED, port=2, ca_bundle=b"")
    names = [c["metadata"]["name"] for c in [*jobset, *lws]]
    assert len(set(names)) == 4
    assert _hooks(lws)["mpod.kb.io"]["objectSelector"] == LWS_POD_SELECTOR
    assert _hooks(jobset)["mpod.kb.io"]["objectSelector"] == JOBSET_POD_SELECTOR


# -- configuration and command line -------------------------------------------------------------


def _bed(tmp_path: Path) -> cluster.Testbed:
    return cluster.Testbed(dir=str(tmp_path), suite="trixie", chroot=str(tmp_path / "chroot"),
                           node_count=2, kill_wait=30, kubernetes="1.37",
                           ports={"etcd": 2379, "apiserver": 6443, "lws_webhook": 9443,
                                  "lws_health": 8081, "jobset_webhook": 9444,
                                  "jobset_health": 8082, "slurmrestd": 6820, "hooks": 8085})


def _bins() -> build.Binaries:
    d = Path("/cache/bin")
    return build.Binaries(etcd=d / "etcd", kube_apiserver=d / "kube-apiserver",
                          kube_controller_manager=d / "kube-controller-manager",
                          kubectl=d / "kubectl", kwok=d / "kwok", helm=d / "helm",
                          lws=d / "lws-controller-v0.8.0",
                          jobset=d / "jobset-controller-v0.11.1")


def test_the_configuration_serves_the_beds_cert_on_loopback(tmp_path: Path) -> None:
    """Every key is one JobSet's Configuration knows (it is decoded strictly)."""
    assert cluster.jobset_config(_bed(tmp_path)) == {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1", "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        # on, it would write a Secret for a Service in a namespace the bed does not have
        "internalCertManagement": {"enable": False},
        "webhook": {"host": "127.0.0.1", "port": 9444,
                    "certDir": str(tmp_path / "jobset" / "certs")},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": "127.0.0.1:8082"},
    }


def test_the_command_line(tmp_path: Path) -> None:
    assert cluster.jobset_cmd(_bed(tmp_path), _bins()) == [
        "/cache/bin/jobset-controller-v0.11.1", f"--kubeconfig={tmp_path / 'kubeconfig'}",
        f"--config={tmp_path / 'jobset' / 'config.yaml'}", "--zap-devel=false",
        "--zap-log-level=info"]


def test_the_flags_that_would_override_the_configuration_are_not_given(tmp_path: Path) -> None:
    """main.go lets --leader-elect, --metrics-bind-address and --health-probe-bind-address
    win over the file: none is given, so the file's loopback addresses hold."""
    flags = {a.partition("=")[0] for a in cluster.jobset_cmd(_bed(tmp_path), _bins())[1:]}
    assert not flags & {"--leader-elect", "--metrics-bind-address",
                        "--health-probe-bind-address"}


# -- status --------------------------------------------------------------------------------------


def test_status_shows_the_jobset_controller(tmp_path: Path) -> None:
    tb = _bed(tmp_path)
    tb.pids["jobset-controller"] = os.getpid()
    tb.save()
    rows = [line for line in cluster.status().splitlines() if "jobset-controller" in line]
    assert len(rows) == 1
    assert "running" in rows[0] and f"pid {os.getpid()}" in rows[0]
    assert "https://127.0.0.1:9444" in rows[0] and "http://127.0.0.1:8082" in rows[0]


def test_status_of_a_bed_started_without_it_has_no_row(tmp_path: Path) -> None:
    _bed(tmp_path).save()
    assert "jobset-controller" not in cluster.status()


def test_it_cannot_be_killed_as_an_outage_part() -> None:
    """As the LWS controller: not one of the parts outage tests stop and start."""
    assert "jobset-controller" not in cluster.RESTARTABLE
    assert "lws-controller" not in cluster.RESTARTABLE


# -- up ------------------------------------------------------------------------------------------


class _Stopped(Exception):
    pass


def _running_bed(tmp_path: Path, pids: dict[str, int]) -> cluster.Testbed:
    tb = _bed(tmp_path)
    tb.ready, tb.accounting, tb.pids = True, True, pids
    return tb


@pytest.mark.parametrize("parts", [("lws-controller", "dradriver"),  # no JobSet controller
                                   ("lws-controller", "jobset-controller")])  # no DRA driver
def test_a_running_bed_without_a_part_is_restarted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parts: tuple[str, ...]) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    old = _running_bed(tmp_path, {"kube-apiserver": os.getpid(),
                                  **dict.fromkeys(parts, os.getpid())})
    monkeypatch.setattr(cluster.Testbed, "load", classmethod(lambda cls: old))

    def down(**_: object) -> None:  # never the real one: these pids are the test's own
        raise _Stopped

    monkeypatch.setattr(cluster, "down", down)
    with pytest.raises(_Stopped):
        cluster.up(kubernetes="1.37")


def test_a_running_bed_with_it_is_reused(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    running = _running_bed(tmp_path, {"kube-apiserver": os.getpid(),
                                      "jobset-controller": os.getpid(),
                                      "dradriver": os.getpid()})
    monkeypatch.setattr(cluster.Testbed, "load", classmethod(lambda cls: running))

    def down(**_: object) -> None:  # never the real one: these pids are the test's own
        raise _Stopped

    monkeypatch.setattr(cluster, "down", down)
    assert cluster.up(kubernetes="1.37") is running


def test_up_picks_ports_for_it_apart_from_every_other(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(cluster.Testbed, "load", classmethod(lambda cls: None))
    asked: list[int] = []
    real = procs.free_ports

    def free_ports(count: int) -> list[int]:
        asked.append(count)
        return real(count)

    def stop(*_: object, **__: object) -> None:
        raise _Stopped

    monkeypatch.setattr(procs, "free_ports", free_ports)
    monkeypatch.setattr(build, "build_binaries", stop)
    # Reaches the build (every port was picked, none twice) with all optional ports picked.
    with pytest.raises(_Stopped):
        cluster.up(kubernetes="1.37", accounting=True)
    assert asked == [12]


# -- building -----------------------------------------------------------------------------------


def test_generated_as_jobset_s_makefile_does() -> None:
    src = build.JOBSET_SOURCE
    assert (src.module, src.version) == ("sigs.k8s.io/jobset", "v0.11.1")
    # Without generateEmbeddedObjectMeta the API server would prune the Pod template's labels.
    assert src.generators == ("crd:generateEmbeddedObjectMeta=true", "webhook")
    assert src.packages == ("sigs.k8s.io/jobset/api/jobset/v1alpha2",
                            "sigs.k8s.io/jobset/pkg/webhooks")
    assert src.files == ("jobset.x-k8s.io_jobsets.yaml", "manifests.yaml")
    assert cluster._crd_name(Path(src.files[0])) == "jobsets.jobset.x-k8s.io"


def test_build_manifests_installs_its_crd_and_hands_its_webhooks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUNK_TESTBED_CACHE", str(tmp_path))

    def generate(src: build.GeneratedSource, bins: Path, logs: Path) -> dict[str, Path]:
        return {f: tmp_path / src.name / f for f in src.files}

    monkeypatch.setattr(build, "_generate", generate)
    manifests = build.build_manifests()
    assert tmp_path / "jobset" / "jobset.x-k8s.io_jobsets.yaml" in manifests.crds
    assert tmp_path / "jobset" / "manifests.yaml" not in manifests.crds
    assert manifests.jobset_webhooks == tmp_path / "jobset" / "manifests.yaml"
    assert manifests.lws_webhooks == tmp_path / "lws" / "manifests.yaml"


def test_the_controller_is_built_from_main_go_with_its_version_stamped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUNK_TESTBED_CACHE", str(tmp_path))
    built: dict[str, tuple[str, ...]] = {}

    def build_main(bins: Path, logs: Path, name: str, module: str, version: str,
                   package: str, ldflags: str) -> Path:
        built[name] = (module, version, package, ldflags)
        return bins / f"{name}-{version}"

    monkeypatch.setattr(build, "_build_main", build_main)
    monkeypatch.setattr(build, "_build_kubernetes", lambda bins, logs, release: {
        n: bins / n for n in build.KUBERNETES_COMMANDS})
    monkeypatch.setattr(build, "_go_install", lambda bins, logs, name, *_: bins / name)
    bins = build.build_binaries(build.KUBERNETES_RELEASES["1.37"])
    assert bins.jobset == tmp_path / "bin" / "jobset-controller-v0.11.1"
    module, version, package, ldflags = built["jobset-controller"]
    # main.go is at the module's root
    assert (module, version, package) == ("sigs.k8s.io/jobset", "v0.11.1", "sigs.k8s.io/jobset")
    assert ldflags.split() == [
        "-s", "-w", "-X", "sigs.k8s.io/jobset/pkg/version.GitVersion=v0.11.1",
        "-X", "sigs.k8s.io/jobset/pkg/version.GitCommit=ecaf56ab2dffb6edce074beda10ea092e71f62e5"]
