"""The Kubernetes release the bed runs: its binaries, its gang API flags, its controllers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed import __main__ as cli
from testbed import build, cluster
from testbed.errors import TestbedError

GANG_1_36 = "--feature-gates=GenericWorkload=true,GangScheduling=true,WorkloadWithJob=true"
GANG_1_37 = "--feature-gates=GenericWorkload=true,WorkloadWithJob=true"
BED_CONTROLLERS = ("job-controller,statefulset-controller,garbage-collector-controller,"
                   "resourceclaim-controller")


def _bed(tmp_path: Path, kubernetes: str) -> cluster.Testbed:
    return cluster.Testbed(dir=str(tmp_path), suite="trixie", chroot=str(tmp_path / "chroot"),
                           node_count=2, kill_wait=30, kubernetes=kubernetes,
                           ports={"etcd": 2379, "apiserver": 6443, "controller_manager": 10257,
                                  "slurmrestd": 6820, "hooks": 8085})


def _bins(version: str) -> build.Binaries:
    bin_dir = Path("/cache/bin")
    return build.Binaries(
        etcd=bin_dir / "etcd", kube_apiserver=bin_dir / f"kube-apiserver-{version}",
        kube_controller_manager=bin_dir / f"kube-controller-manager-{version}",
        kubectl=bin_dir / f"kubectl-{version}", kwok=bin_dir / "kwok", helm=bin_dir / "helm",
        lws=bin_dir / "lws", jobset=bin_dir / "jobset")


def _flags(cmd: list[str], name: str) -> list[str]:
    return [arg for arg in cmd if arg.partition("=")[0] == name]


def _commands(tmp_path: Path, kubernetes: str) -> tuple[list[str], list[str]]:
    tb = _bed(tmp_path, kubernetes)
    bins = _bins(tb.release.version)
    return cluster.apiserver_cmd(tb, bins), cluster.controller_manager_cmd(tb, bins)


def test_the_releases_offered_and_the_default() -> None:
    assert {n: r.version for n, r in build.KUBERNETES_RELEASES.items()} == {
        "1.35": "v1.35.4", "1.36": "v1.36.3", "1.37": "v1.37.2"}
    assert build.DEFAULT_KUBERNETES == "1.37"


def test_1_35_runs_with_the_flags_it_always_had(tmp_path: Path) -> None:
    apiserver, controller_manager = _commands(tmp_path, "1.35")
    p = tmp_path / "pki"
    assert apiserver == [
        "/cache/bin/kube-apiserver-v1.35.4", "--etcd-servers=http://127.0.0.1:2379",
        f"--cert-dir={p}", f"--tls-cert-file={p / 'apiserver.crt'}",
        f"--tls-private-key-file={p / 'apiserver.key'}", f"--client-ca-file={p / 'ca.crt'}",
        "--secure-port=6443", "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
        "--service-cluster-ip-range=10.0.0.0/24", "--authorization-mode=RBAC",
        "--allow-privileged=true", "--service-account-issuer=https://127.0.0.1:6443",
        f"--service-account-key-file={p / 'sa.pub'}",
        f"--service-account-signing-key-file={p / 'sa.key'}",
        "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition", "--v=0"]
    assert controller_manager == [
        "/cache/bin/kube-controller-manager-v1.35.4", f"--kubeconfig={tmp_path / 'kubeconfig'}",
        f"--controllers={BED_CONTROLLERS}", "--leader-elect=false", "--bind-address=127.0.0.1",
        "--secure-port=10257", f"--cert-dir={tmp_path / 'controller-manager'}",
        "--kube-api-qps=100", "--kube-api-burst=200", "--v=0"]


@pytest.mark.parametrize(("kubernetes", "runtime_config", "gates", "more"), [
    ("1.36", "--runtime-config=scheduling.k8s.io/v1alpha2=true", GANG_1_36, ()),
    # 1.37 refuses the bed's loopback --advertise-address with an endpoint reconciler
    ("1.37", "--runtime-config=scheduling.k8s.io/v1beta1=true", GANG_1_37,
     ("--endpoint-reconciler-type=none",)),
])
def test_the_gang_api_is_switched_on(tmp_path: Path, kubernetes: str, runtime_config: str,
                                     gates: str, more: tuple[str, ...]) -> None:
    apiserver, controller_manager = _commands(tmp_path, kubernetes)
    version = build.KUBERNETES_RELEASES[kubernetes].version
    assert apiserver[0].endswith(f"kube-apiserver-{version}")
    assert _flags(apiserver, "--runtime-config") == [runtime_config]
    assert _flags(apiserver, "--feature-gates") == [gates]
    assert controller_manager[0].endswith(f"kube-controller-manager-{version}")
    assert _flags(controller_manager, "--feature-gates") == [gates]
    assert _flags(controller_manager, "--runtime-config") == []
    assert _flags(controller_manager, "--controllers") == [
        f"--controllers={BED_CONTROLLERS},podgroup-protection-controller"]
    # Nothing else differs from 1.35's.
    old_apiserver, old_controller_manager = _commands(tmp_path, "1.35")
    assert [a for a in apiserver[1:] if a not in (runtime_config, gates)] == [
        *old_apiserver[1:], *more]
    assert ([a for a in controller_manager[1:] if a != gates and "--controllers=" not in a]
            == [a for a in old_controller_manager[1:] if "--controllers=" not in a])


def test_1_37_has_no_gang_scheduling_gate() -> None:
    """1.37 removed it: a binary given an unknown gate refuses to start."""
    release = build.KUBERNETES_RELEASES["1.37"]
    assert not any("GangScheduling" in f
                   for f in release.apiserver_flags + release.controller_manager_flags)


@pytest.mark.parametrize(("kubernetes", "added"), [
    ("1.35", ()), ("1.36", ("podgroup-protection-controller",)),
    ("1.37", ("podgroup-protection-controller",)),
])
def test_controllers_per_release(kubernetes: str, added: tuple[str, ...]) -> None:
    assert cluster.controllers(build.kubernetes_release(kubernetes)) == (
        "job-controller", "statefulset-controller", "garbage-collector-controller",
        "resourceclaim-controller", *added)


def test_list_flags_already_given_are_merged_into_one() -> None:
    cmd = ["kube-apiserver", "--feature-gates=Foo=true,GenericWorkload=false",
           "--runtime-config=api/beta=true", "--v=0"]
    merged = build.with_flags(cmd, build.KUBERNETES_RELEASES["1.36"].apiserver_flags)
    assert merged == [
        "kube-apiserver",
        "--feature-gates=Foo=true,GenericWorkload=true,GangScheduling=true,WorkloadWithJob=true",
        "--runtime-config=api/beta=true,scheduling.k8s.io/v1alpha2=true", "--v=0"]


def test_other_flags_are_appended_even_when_given_already() -> None:
    assert build.with_flags(["x", "--v=0"], ["--v=2", "--feature-gates=A=true"]) == [
        "x", "--v=0", "--v=2", "--feature-gates=A=true"]


def test_an_unknown_release_is_refused_naming_the_choices() -> None:
    with pytest.raises(TestbedError) as refused:
        build.kubernetes_release("1.34")
    assert str(refused.value) == ("unknown Kubernetes release '1.34': choose one of "
                                  "1.35 (v1.35.4), 1.36 (v1.36.3), 1.37 (v1.37.2)")


def test_the_environment_chooses_the_release(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(build.KUBERNETES_ENV, raising=False)
    assert build.wanted_kubernetes() == "1.37"
    monkeypatch.setenv(build.KUBERNETES_ENV, "")  # `export` of an unset make variable
    assert build.wanted_kubernetes() == "1.37"
    monkeypatch.setenv(build.KUBERNETES_ENV, "1.36")
    assert build.wanted_kubernetes() == "1.36"


def test_state_records_the_release(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUNK_TESTBED_DIR", str(tmp_path))
    _bed(tmp_path, "1.36").save()
    loaded = cluster.Testbed.load()
    assert loaded is not None and loaded.release == build.KUBERNETES_RELEASES["1.36"]


def test_a_state_file_from_before_the_choice_is_a_1_35_bed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUNK_TESTBED_DIR", str(tmp_path))
    _bed(tmp_path, "1.35").save()
    state = json.loads((tmp_path / "state.json").read_text())
    del state["kubernetes"]
    (tmp_path / "state.json").write_text(json.dumps(state))
    loaded = cluster.Testbed.load()
    assert loaded is not None and loaded.release.version == "v1.35.4"


def test_status_names_the_release_and_its_controllers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUNK_TESTBED_DIR", str(tmp_path))
    tb = _bed(tmp_path, "1.37")
    tb.pids["kube-controller-manager"] = 0  # never alive
    tb.save()
    shown = cluster.status()
    assert "Kubernetes v1.37.2" in shown.splitlines()[0]
    assert "podgroup-protection-controller" in shown


# -- the CLI ---------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["up", "demo", "build"])
def test_cli_offers_the_table_s_releases(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(build.KUBERNETES_ENV, raising=False)
    parser = cli._parser()
    assert parser.parse_args([command]).kubernetes == "1.37"
    for name in build.KUBERNETES_RELEASES:
        assert parser.parse_args([command, "--kubernetes", name]).kubernetes == name
    monkeypatch.setenv(build.KUBERNETES_ENV, "1.35")
    assert cli._parser().parse_args([command]).kubernetes == "1.35"


def test_cli_refuses_an_unknown_release(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["up", "--kubernetes", "1.34"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--kubernetes" in err and "'1.35', '1.36', '1.37'" in err


def test_an_unknown_release_in_the_environment_is_one_error_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SUNK_TESTBED_DIR", str(tmp_path / "state"))
    monkeypatch.setenv(build.KUBERNETES_ENV, "1.34")
    assert cli.main(["up"]) == 1  # refused before it asks for root or builds anything
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["testbed: error: unknown Kubernetes release '1.34': choose one of "
                   "1.35 (v1.35.4), 1.36 (v1.36.3), 1.37 (v1.37.2)"]


# -- building ----------------------------------------------------------------------------------

GOMOD = """module k8s.io/kubernetes

go 1.26.0

godebug default=go1.26

require (
\tk8s.io/api v0.0.0
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/client-go => ./staging/src/k8s.io/client-go
)
"""


def test_each_release_is_built_with_its_own_go_line_and_cached_apart(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUNK_TESTBED_CACHE", str(tmp_path))
    monkeypatch.setattr(build, "_go_env", lambda work: {})
    monkeypatch.setattr(build, "_kubernetes_gomod", lambda version, env, log: GOMOD)
    built: list[str] = []

    def run(cmd: list[str], **_: object) -> None:
        if cmd[:2] == ["go", "build"]:
            out = Path(cmd[cmd.index("-o") + 1])
            out.write_text("")
            built.append(out.name.removesuffix(".tmp"))

    monkeypatch.setattr(build, "_run", run)
    bins = tmp_path / "bin"
    bins.mkdir()
    outs = build._build_kubernetes(bins, tmp_path / "logs", build.KUBERNETES_RELEASES["1.37"])
    assert {p.name for p in outs.values()} == {
        "kube-apiserver-v1.37.2", "kube-controller-manager-v1.37.2", "kubectl-v1.37.2"}
    assert all(p.exists() for p in outs.values())
    gomod = (tmp_path / "build/kubernetes-v1.37.2/go.mod").read_text()
    assert "\ngo 1.26.0\n" in gomod and "require k8s.io/kubernetes v1.37.2\n" in gomod
    assert "replace k8s.io/api => k8s.io/api v0.37.2" in gomod
    assert "replace k8s.io/client-go => k8s.io/client-go v0.37.2" in gomod
    # Another release builds beside it; the cached one is not built again.
    build._build_kubernetes(bins, tmp_path / "logs", build.KUBERNETES_RELEASES["1.36"])
    build._build_kubernetes(bins, tmp_path / "logs", build.KUBERNETES_RELEASES["1.37"])
    assert sorted(built) == sorted([*(p.name for p in outs.values()),
                                    "kube-apiserver-v1.36.3", "kube-controller-manager-v1.36.3",
                                    "kubectl-v1.36.3"])


def test_go_line_of_1_35() -> None:
    assert build.go_directive(GOMOD.replace("go 1.26.0", "go 1.25.0")) == "1.25.0"
    with pytest.raises(TestbedError, match="no go line"):
        build.go_directive("module x\n")
