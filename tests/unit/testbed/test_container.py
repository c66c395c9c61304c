"""testbed.container's pure part, the kubelet's reading of a Pod spec: environment, the OCI
runtime config (Kubernetes' command/args rules, security contexts, mounts, namespaces) and
the volumes written as files."""

from __future__ import annotations

import base64
import copy
import stat
from pathlib import Path
from typing import Any

import pytest

from testbed import container as c
from testbed.errors import TestbedError

POD = c.PodIdentity(name="sunk-7d9f", namespace="slurm", uid="0b6e-11", service_account="sunk")
ALL_CAPS = ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"]


def umoci_config() -> dict[str, Any]:
    """What ``umoci unpack`` writes for an image (trimmed to the parts that matter)."""
    return {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": True,
            "user": {"uid": 65532, "gid": 65532},
            "args": ["/usr/local/bin/sunk-scheduler"],
            "env": ["PATH=/usr/local/bin:/usr/bin:/bin", "TERM=xterm", "PYTHONUNBUFFERED=1",
                    "SUNK_POLICIES_DIR=/etc/sunk/policies"],
            "cwd": "/",
            "capabilities": {kind: list(ALL_CAPS) for kind in
                             ("bounding", "effective", "inheritable", "permitted", "ambient")},
            "noNewPrivileges": False,
        },
        "root": {"path": "rootfs"},
        "hostname": "umoci-default",
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
        "linux": {
            "namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "ipc"},
                           {"type": "uts"}, {"type": "mount"}],
            "resources": {"devices": [{"allow": False, "access": "rwm"}]},
            "cgroupsPath": "/default",
        },
    }


IMAGE_CONFIG: dict[str, Any] = {"Entrypoint": ["/usr/local/bin/sunk-scheduler"],
                                "Cmd": ["--default"], "User": "65532:65532"}


def run_config(pod_spec: dict[str, Any] | None = None, container: dict[str, Any] | None = None,
               *, env: list[str] | None = None,
               mounts: list[tuple[str, Path, bool]] | None = None,
               image: dict[str, Any] | None = None,
               image_config: dict[str, Any] | None = None) -> dict[str, Any]:
    return c.runtime_config(umoci_config() if image is None else image,
                            IMAGE_CONFIG if image_config is None else image_config,
                            pod_spec or {}, container or {"name": "scheduler"}, env or [],
                            mounts or [], "sunk-7d9f")


# -- resolve_env -----------------------------------------------------------------------------


def env_of(*entries: dict[str, Any],
           secrets: dict[str, dict[str, str]] | None = None) -> list[str]:
    return c.resolve_env({"env": list(entries)}, POD, secrets or {})


def test_resolve_env_values_in_order() -> None:
    assert env_of({"name": "B", "value": "2"}, {"name": "A", "value": "x=y"},
                  {"name": "EMPTY", "value": ""}) == ["B=2", "A=x=y", "EMPTY="]


def test_resolve_env_no_env_at_all() -> None:
    assert c.resolve_env({"name": "scheduler"}, POD, {}) == []
    assert c.resolve_env({"name": "scheduler", "env": None}, POD, {}) == []


@pytest.mark.parametrize(("path", "expected"), [
    ("metadata.name", POD.name), ("metadata.namespace", POD.namespace),
    ("metadata.uid", POD.uid), ("spec.serviceAccountName", POD.service_account),
])
def test_resolve_env_field_refs(path: str, expected: str) -> None:
    entry = {"name": "X", "valueFrom": {"fieldRef": {"fieldPath": path}}}
    assert env_of(entry) == [f"X={expected}"]


def test_resolve_env_unsupported_field_ref_raises() -> None:
    entry = {"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}}
    with pytest.raises(TestbedError, match=r"X: fieldRef metadata.labels\['app'\]"):
        env_of(entry)


def test_resolve_env_secret_key_ref() -> None:
    entry = {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "slurm", "key": "jwt"}}}
    assert env_of(entry, secrets={"slurm": {"jwt": "abc.def", "other": "no"}}) == \
        ["TOKEN=abc.def"]


@pytest.mark.parametrize("secrets", [{}, {"slurm": {}}, {"slurm": {"other": "x"}}])
def test_resolve_env_optional_missing_secret_key_is_left_out(
        secrets: dict[str, dict[str, str]]) -> None:
    entries: list[dict[str, Any]] = [
        {"name": "A", "value": "1"},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {
            "name": "slurm", "key": "jwt", "optional": True}}},
        {"name": "B", "value": "2"}]
    assert env_of(*entries, secrets=secrets) == ["A=1", "B=2"]


@pytest.mark.parametrize("optional", [None, False])
def test_resolve_env_required_missing_secret_key_raises(optional: bool | None) -> None:
    ref: dict[str, Any] = {"name": "slurm", "key": "jwt"}
    if optional is not None:
        ref["optional"] = optional
    entry = {"name": "TOKEN", "valueFrom": {"secretKeyRef": ref}}
    with pytest.raises(TestbedError, match="TOKEN: Secret slurm has no key jwt"):
        env_of(entry, secrets={"slurm": {"other": "x"}})
    with pytest.raises(TestbedError, match="Secret slurm"):
        env_of(entry)


def test_resolve_env_unsupported_source_raises() -> None:
    entry = {"name": "CFG", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}
    with pytest.raises(TestbedError, match=r"CFG: \['configMapKeyRef'\] is not supported"):
        env_of(entry)


# -- runtime_config: what runs ---------------------------------------------------------------


def test_no_command_runs_the_entrypoint_with_the_image_cmd() -> None:
    assert run_config()["process"]["args"] == ["/usr/local/bin/sunk-scheduler", "--default"]


def test_args_replace_the_image_cmd() -> None:
    config = run_config(container={"args": ["--port", "8000"]})
    assert config["process"]["args"] == ["/usr/local/bin/sunk-scheduler", "--port", "8000"]


def test_command_replaces_entrypoint_and_cmd() -> None:
    config = run_config(container={"command": ["/usr/bin/python3", "-m", "sunk"]})
    assert config["process"]["args"] == ["/usr/bin/python3", "-m", "sunk"]


def test_command_and_args() -> None:
    config = run_config(container={"command": ["/bin/run"], "args": ["--once"]})
    assert config["process"]["args"] == ["/bin/run", "--once"]


def test_image_without_cmd_or_entrypoint() -> None:
    config = run_config(container={"args": ["a"]}, image_config={"Entrypoint": ["/e"]})
    assert config["process"]["args"] == ["/e", "a"]
    assert run_config(image_config={"Entrypoint": ["/e"]})["process"]["args"] == ["/e"]


def test_terminal_off_and_working_dir() -> None:
    assert run_config()["process"]["terminal"] is False
    assert run_config()["process"]["cwd"] == "/"
    assert run_config(container={"workingDir": "/work"})["process"]["cwd"] == "/work"


def test_env_overrides_an_image_variable_by_name_and_drops_term() -> None:
    config = run_config(env=["PYTHONUNBUFFERED=0", "SUNK_X=1"])
    assert config["process"]["env"] == ["PATH=/usr/local/bin:/usr/bin:/bin",
                                        "SUNK_POLICIES_DIR=/etc/sunk/policies",
                                        "PYTHONUNBUFFERED=0", "SUNK_X=1"]


def test_env_name_is_matched_whole() -> None:
    # PATH_EXTRA is not PATH: the image's PATH stays
    env = run_config(env=["PATH_EXTRA=/x"])["process"]["env"]
    assert "PATH=/usr/local/bin:/usr/bin:/bin" in env and env[-1] == "PATH_EXTRA=/x"


# -- runtime_config: security context --------------------------------------------------------


def test_image_user_kept_without_a_security_context() -> None:
    assert run_config()["process"]["user"] == {"uid": 65532, "gid": 65532}


def test_pod_run_as_user_overridden_by_the_container() -> None:
    pod = {"securityContext": {"runAsUser": 1000, "runAsGroup": 1000}}
    user = run_config(pod, {"securityContext": {"runAsUser": 2000}})["process"]["user"]
    assert (user["uid"], user["gid"]) == (2000, 1000)
    user = run_config(pod, {})["process"]["user"]
    assert (user["uid"], user["gid"]) == (1000, 1000)


def test_supplemental_groups_and_fs_group() -> None:
    pod = {"securityContext": {"supplementalGroups": [10, 20], "fsGroup": 30}}
    assert run_config(pod)["process"]["user"]["additionalGids"] == [10, 20, 30]
    assert "additionalGids" not in run_config()["process"]["user"]


@pytest.mark.parametrize(("pod_sec", "container_sec"), [
    ({"runAsNonRoot": True, "runAsUser": 0}, {}),
    ({"runAsNonRoot": True}, {"runAsUser": 0}),
    ({"runAsUser": 0}, {"runAsNonRoot": True}),
])
def test_run_as_non_root_with_uid_0_raises(pod_sec: dict[str, Any],
                                           container_sec: dict[str, Any]) -> None:
    with pytest.raises(TestbedError, match="runAsNonRoot"):
        run_config({"securityContext": pod_sec}, {"securityContext": container_sec})


def test_run_as_non_root_with_an_image_running_as_root_raises() -> None:
    image = umoci_config()
    image["process"]["user"] = {"uid": 0, "gid": 0}
    with pytest.raises(TestbedError, match="runAsNonRoot"):
        run_config({"securityContext": {"runAsNonRoot": True}}, image=image)


def test_run_as_non_root_with_a_non_root_user_is_fine() -> None:
    config = run_config({"securityContext": {"runAsNonRoot": True}},
                        {"securityContext": {"runAsUser": 65532}})
    assert config["process"]["user"]["uid"] == 65532
    # the container saying false wins over the Pod saying true
    image = umoci_config()
    image["process"]["user"] = {"uid": 0, "gid": 0}
    config = run_config({"securityContext": {"runAsNonRoot": True}},
                        {"securityContext": {"runAsNonRoot": False}}, image=image)
    assert config["process"]["user"]["uid"] == 0


def caps_of(config: dict[str, Any]) -> dict[str, list[str]]:
    caps: dict[str, list[str]] = config["process"]["capabilities"]
    return caps


def test_drop_all_empties_every_capability_set() -> None:
    config = run_config(container={"securityContext": {"capabilities": {"drop": ["ALL"]}}})
    assert caps_of(config) == {kind: [] for kind in
                               ("bounding", "effective", "inheritable", "permitted", "ambient")}


def test_drop_one_capability_removes_only_it() -> None:
    config = run_config(container={"securityContext": {"capabilities": {"drop": ["KILL"]}}})
    for kind, have in caps_of(config).items():
        assert have == ["CAP_AUDIT_WRITE", "CAP_NET_BIND_SERVICE"], kind


def test_add_a_capability_after_drop_all() -> None:
    config = run_config(container={"securityContext": {"capabilities": {
        "drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}})
    assert caps_of(config)["bounding"] == ["CAP_NET_BIND_SERVICE"]
    assert caps_of(config)["effective"] == ["CAP_NET_BIND_SERVICE"]


def test_add_a_capability_the_image_lacks() -> None:
    config = run_config(container={"securityContext": {"capabilities": {"add": ["SYS_TIME"]}}})
    assert caps_of(config)["permitted"] == sorted([*ALL_CAPS, "CAP_SYS_TIME"])


def test_no_capabilities_field_keeps_the_image_sets() -> None:
    assert caps_of(run_config()) == {kind: ALL_CAPS for kind in
                                     ("bounding", "effective", "inheritable", "permitted",
                                      "ambient")}


def test_allow_privilege_escalation_false_sets_no_new_privileges() -> None:
    config = run_config(container={"securityContext": {"allowPrivilegeEscalation": False}})
    assert config["process"]["noNewPrivileges"] is True
    assert run_config()["process"]["noNewPrivileges"] is False
    pod_level = run_config({"securityContext": {"allowPrivilegeEscalation": False}})
    assert pod_level["process"]["noNewPrivileges"] is True


def test_read_only_root_filesystem() -> None:
    config = run_config(container={"securityContext": {"readOnlyRootFilesystem": True}})
    assert config["root"] == {"path": "rootfs", "readonly": True}
    assert run_config()["root"] == {"path": "rootfs", "readonly": False}


# -- runtime_config: mounts, namespaces, cgroups ---------------------------------------------


def test_mounts_appended_as_bind_mounts(tmp_path: Path) -> None:
    mounts = [("/etc/sunk/slurm", tmp_path / "slurm", True), ("/tmp", tmp_path / "tmp", False)]
    config = run_config(mounts=mounts)
    assert config["mounts"] == [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/etc/sunk/slurm", "type": "bind", "source": str(tmp_path / "slurm"),
         "options": ["rbind", "ro", "nosuid", "nodev"]},
        {"destination": "/tmp", "type": "bind", "source": str(tmp_path / "tmp"),
         "options": ["rbind", "rw", "nosuid", "nodev"]},
    ]


def test_network_namespace_removed_others_kept() -> None:
    namespaces = [n["type"] for n in run_config()["linux"]["namespaces"]]
    assert namespaces == ["pid", "ipc", "uts", "mount"]


def test_cgroup_resources_removed_and_hostname_set() -> None:
    config = run_config()
    assert "resources" not in config["linux"]
    assert "cgroupsPath" not in config["linux"]
    assert config["hostname"] == "sunk-7d9f"


def test_inputs_are_not_mutated(tmp_path: Path) -> None:
    image = umoci_config()
    image_config = copy.deepcopy(IMAGE_CONFIG)
    pod = {"securityContext": {"runAsUser": 1000, "supplementalGroups": [5], "fsGroup": 6}}
    container = {"args": ["--x"], "securityContext": {"capabilities": {"drop": ["ALL"]},
                                                      "readOnlyRootFilesystem": True}}
    env = ["A=1"]
    mounts = [("/m", tmp_path, True)]
    saved = copy.deepcopy((image, image_config, pod, container, env, mounts))
    config = c.runtime_config(image, image_config, pod, container, env, mounts, "h")
    assert (image, image_config, pod, container, env, mounts) == saved
    config["process"]["args"].append("changed")
    config["linux"]["namespaces"].clear()
    assert image == umoci_config()


# -- write_volume ----------------------------------------------------------------------------


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


OBJECTS = {"secret/slurm": {"jwt": "token", "ca.crt": "PEM"},
           "configmap/topology": {"topology.conf": "SwitchName=s1\n", "other": "o"}}


def test_secret_items_with_path_and_mode(tmp_path: Path) -> None:
    volume = {"name": "slurm-auth", "secret": {
        "secretName": "slurm", "defaultMode": 0o440,
        "items": [{"key": "jwt", "path": "auth/token", "mode": 0o400},
                  {"key": "ca.crt", "path": "ca.pem"}]}}
    target = c.write_volume(volume, tmp_path, OBJECTS)
    assert target == tmp_path / "slurm-auth"
    assert (target / "auth/token").read_text() == "token"
    assert mode(target / "auth/token") == 0o400
    assert (target / "ca.pem").read_text() == "PEM"
    assert mode(target / "ca.pem") == 0o440
    assert sorted(p.name for p in target.iterdir()) == ["auth", "ca.pem"]


def test_secret_without_items_writes_every_key(tmp_path: Path) -> None:
    target = c.write_volume({"name": "s", "secret": {"secretName": "slurm"}}, tmp_path, OBJECTS)
    assert target is not None
    assert {p.name: p.read_text() for p in target.iterdir()} == OBJECTS["secret/slurm"]
    assert {mode(p) for p in target.iterdir()} == {0o644}


def test_config_map(tmp_path: Path) -> None:
    volume = {"name": "topo", "configMap": {"name": "topology",
                                            "items": [{"key": "topology.conf",
                                                       "path": "topology.conf"}]}}
    target = c.write_volume(volume, tmp_path, OBJECTS)
    assert target is not None
    assert [p.name for p in target.iterdir()] == ["topology.conf"]
    assert (target / "topology.conf").read_text() == "SwitchName=s1\n"


def test_a_secret_and_a_config_map_of_the_same_name_are_different_objects(
        tmp_path: Path) -> None:
    with pytest.raises(TestbedError, match="configmap slurm does not exist"):
        c.write_volume({"name": "v", "configMap": {"name": "slurm"}}, tmp_path, OBJECTS)


@pytest.mark.parametrize("volume", [
    {"name": "v", "secret": {"secretName": "missing", "optional": True}},
    {"name": "v", "configMap": {"name": "missing", "optional": True}},
])
def test_optional_missing_object_gives_an_empty_directory(volume: dict[str, Any],
                                                          tmp_path: Path) -> None:
    target = c.write_volume(volume, tmp_path, OBJECTS)
    assert target == tmp_path / "v"
    assert target.is_dir() and not any(target.iterdir())


@pytest.mark.parametrize("volume", [
    {"name": "v", "secret": {"secretName": "missing"}},
    {"name": "v", "configMap": {"name": "missing", "optional": False}},
])
def test_required_missing_object_raises(volume: dict[str, Any], tmp_path: Path) -> None:
    with pytest.raises(TestbedError, match=r"volume v: .* missing does not exist"):
        c.write_volume(volume, tmp_path, OBJECTS)


def test_rewriting_a_volume_replaces_its_old_files(tmp_path: Path) -> None:
    c.write_volume({"name": "s", "secret": {"secretName": "slurm"}}, tmp_path, OBJECTS)
    target = c.write_volume({"name": "s", "secret": {"secretName": "slurm", "items": [
        {"key": "jwt", "path": "jwt"}]}}, tmp_path, OBJECTS)
    assert target is not None
    assert [p.name for p in target.iterdir()] == ["jwt"]


def test_empty_dir_is_world_writable_and_sticky(tmp_path: Path) -> None:
    target = c.write_volume({"name": "scratch", "emptyDir": {}}, tmp_path, OBJECTS)
    assert target is not None
    assert target.is_dir() and not any(target.iterdir())
    assert mode(target) == 0o1777


def test_projected_service_account(tmp_path: Path) -> None:
    account = {"token": "eyJ", "ca.crt": "PEM", "namespace": "slurm"}
    volume = {"name": "kube-api-access", "projected": {"sources": [
        {"serviceAccountToken": {"path": "token"}}]}}
    target = c.write_volume(volume, tmp_path, OBJECTS, account)
    assert target is not None
    assert {p.name: p.read_text() for p in target.iterdir()} == account
    assert {mode(p) for p in target.iterdir()} == {0o644}


@pytest.mark.parametrize("volume", [
    {"name": "host", "hostPath": {"path": "/etc"}},
    {"name": "kube-api-access", "projected": {"sources": []}},  # no service account given
])
def test_unknown_volume_kind_returns_none(volume: dict[str, Any], tmp_path: Path) -> None:
    assert c.write_volume(volume, tmp_path, OBJECTS) is None


def test_decode_secret() -> None:
    secret = {"data": {"jwt": base64.b64encode(b"a.b.c").decode(),
                       "ca.crt": base64.b64encode("é\n".encode()).decode()}}
    assert c.decode_secret(secret) == {"jwt": "a.b.c", "ca.crt": "é\n"}
    assert c.decode_secret({}) == {}
    assert c.decode_secret({"data": None}) == {}


def test_resolve_env_an_entry_with_only_a_name_is_an_empty_variable() -> None:
    pod = c.PodIdentity("p", "ns", "uid-1", "sa")
    assert c.resolve_env({"env": [{"name": "EMPTY"}, {"name": "A", "value": "1"}]}, pod,
                         {}) == ["EMPTY=", "A=1"]


def test_write_volume_an_item_missing_from_the_object(tmp_path: Path) -> None:
    objects = {"secret/s": {"present": "yes"}}
    items = [{"key": "absent", "path": "a"}, {"key": "present", "path": "p"}]
    with pytest.raises(TestbedError, match="has no key absent"):
        c.write_volume({"name": "v", "secret": {"secretName": "s", "items": items}},
                       tmp_path, objects)
    written = c.write_volume({"name": "v", "secret": {"secretName": "s", "items": items,
                                                      "optional": True}}, tmp_path, objects)
    assert written is not None
    assert sorted(p.name for p in written.iterdir()) == ["p"]
