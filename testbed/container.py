"""The kubelet's part for one Pod: run the scheduler's image with a container of a Pod spec.

The test bed has no kubelet (kwok only pretends Pods run), so the chart's Deployment never
starts there. This module starts it for real, from the image archive ``make image`` writes:

- **the image**: ``skopeo copy`` of the ``oci-archive`` into an OCI layout, ``umoci unpack`` to
  a runtime bundle (its ``config.json`` says what the image's own config says);
- **the Pod's inputs**: the container's command and arguments (Kubernetes' rules: ``command``
  replaces the entrypoint, ``args`` the image's ``Cmd``), its environment (``fieldRef`` and
  ``secretKeyRef`` resolved as the kubelet does), its volume mounts (Secrets and ConfigMaps as
  files, ``emptyDir``, and the service account's token, CA and namespace where every Pod finds
  them, with ``KUBERNETES_SERVICE_HOST`` and ``_PORT``), its user, groups, capabilities and
  read-only root file system from the Pod's and the container's security contexts;
- **the runtime**: ``runc``. crun would do as well but refuses this machine's hybrid cgroup
  hierarchy (crun 1.8: "cgroups in hybrid mode not supported"); no cgroup limits are set.

One difference, on purpose: the container shares the host's network namespace, because the
test bed's API server and slurmrestd listen on 127.0.0.1 only. Each Pod would have its own,
so two replicas could not both run this way; the ports come from the chart's values.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.build import ensure_host_packages
from testbed.errors import TestbedError

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
RUNTIME = "runc"
#: Host tools this module needs, and the Debian packages they come in.
TOOLS = {"skopeo": "skopeo", "umoci": "umoci", "runc": "runc"}


def ensure_tools() -> None:
    """Install skopeo, umoci and runc with apt if they are missing."""
    ensure_host_packages(*TOOLS.items())


def _run(cmd: list[str], what: str) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=300)
    if done.returncode != 0:
        raise TestbedError(f"{what} failed ({done.returncode}): {done.stdout}{done.stderr}")
    return done.stdout


def image_config(archive: Path) -> dict[str, Any]:
    """The image's ``config`` (Entrypoint, Cmd, Env, User, ...) as skopeo reads it."""
    full: dict[str, Any] = json.loads(_run(["skopeo", "inspect", "--config",
                                            f"oci-archive:{archive}"], "skopeo inspect"))
    return dict(full.get("config") or {})


def unpack(archive: Path, ref: str, directory: Path) -> Path:
    """The image in ``archive`` as a runtime bundle (``rootfs`` and ``config.json``)."""
    ensure_tools()
    layout, bundle = directory / "layout", directory / "bundle"
    shutil.rmtree(layout, ignore_errors=True)
    shutil.rmtree(bundle, ignore_errors=True)
    _run(["skopeo", "copy", "--quiet", f"oci-archive:{archive}", f"oci:{layout}:{ref}"],
         "skopeo copy")
    _run(["umoci", "unpack", "--image", f"{layout}:{ref}", str(bundle)], "umoci unpack")
    shutil.rmtree(layout)
    return bundle


# -- what the kubelet works out from the Pod spec (pure) ---------------------------------------


@dataclass(frozen=True)
class PodIdentity:
    """The Pod object the container belongs to (``fieldRef`` reads these)."""

    name: str
    namespace: str
    uid: str
    service_account: str


def resolve_env(container: dict[str, Any], pod: PodIdentity,
                secrets: dict[str, dict[str, str]]) -> list[str]:
    """``NAME=value`` for each of the container's ``env`` entries, in order. ``secrets`` maps a
    Secret's name to its decoded data; an ``optional`` reference to a missing key is left out,
    as the kubelet does, and a required one is an error (the kubelet would not start it)."""
    fields = {"metadata.name": pod.name, "metadata.namespace": pod.namespace,
              "metadata.uid": pod.uid, "spec.serviceAccountName": pod.service_account,
              "status.podIP": "127.0.0.1", "status.hostIP": "127.0.0.1"}
    out = []
    for entry in container.get("env") or []:
        name = entry["name"]
        if "valueFrom" not in entry:  # a value, or none: an empty variable
            out.append(f"{name}={entry.get('value', '')}")
            continue
        source = entry["valueFrom"] or {}
        if "fieldRef" in source:
            path = source["fieldRef"]["fieldPath"]
            if path not in fields:
                raise TestbedError(f"env {name}: fieldRef {path} is not supported here")
            out.append(f"{name}={fields[path]}")
        elif "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            value = secrets.get(ref["name"], {}).get(ref["key"])
            if value is None:
                if ref.get("optional"):
                    continue
                raise TestbedError(f"env {name}: Secret {ref['name']} has no key {ref['key']}")
            out.append(f"{name}={value}")
        else:
            raise TestbedError(f"env {name}: {sorted(source)} is not supported here")
    return out


def _security(pod_spec: dict[str, Any], container: dict[str, Any]) -> dict[str, Any]:
    """The container's security context over the Pod's (the container's fields win)."""
    return {**(pod_spec.get("securityContext") or {}), **(container.get("securityContext") or {})}


def runtime_config(image: dict[str, Any], image_config: dict[str, Any],
                   pod_spec: dict[str, Any], container: dict[str, Any], env: list[str],
                   mounts: list[tuple[str, Path, bool]], hostname: str) -> dict[str, Any]:
    """The OCI runtime config for ``container``, from the one umoci wrote for the image and
    the image's own config (its ``Entrypoint`` and ``Cmd``). ``mounts`` are (container path,
    host path, read-only) for every volume mount."""
    config = copy.deepcopy(image)
    process = config["process"]
    entrypoint = image_config.get("Entrypoint") or []
    cmd = image_config.get("Cmd") or []
    if container.get("command"):  # Kubernetes: command replaces both, args replaces Cmd
        args = list(container["command"]) + list(container.get("args") or [])
    else:
        args = list(entrypoint) + list(container.get("args") or cmd)
    process["args"] = args
    process["terminal"] = False
    image_env = [e for e in process.get("env", []) if not e.startswith("TERM=")]
    names = {e.split("=", 1)[0] for e in env}
    process["env"] = [e for e in image_env if e.split("=", 1)[0] not in names] + env
    if container.get("workingDir"):
        process["cwd"] = container["workingDir"]
    sec = _security(pod_spec, container)
    user = process.setdefault("user", {"uid": 0, "gid": 0})
    if "runAsUser" in sec:
        user["uid"] = sec["runAsUser"]
    if "runAsGroup" in sec:
        user["gid"] = sec["runAsGroup"]
    groups = list((pod_spec.get("securityContext") or {}).get("supplementalGroups") or [])
    if fs_group := (pod_spec.get("securityContext") or {}).get("fsGroup"):
        groups.append(fs_group)
    if groups:
        user["additionalGids"] = groups
    if sec.get("runAsNonRoot") and user["uid"] == 0:
        raise TestbedError("runAsNonRoot, but the container would run as root")
    caps = sec.get("capabilities") or {}
    dropped = {f"CAP_{c}" for c in caps.get("drop") or []}
    added = [f"CAP_{c}" for c in caps.get("add") or []]
    for kind in ("bounding", "effective", "inheritable", "permitted", "ambient"):
        have = process.get("capabilities", {}).get(kind, [])
        kept = [] if "CAP_ALL" in dropped else [c for c in have if c not in dropped]
        process.setdefault("capabilities", {})[kind] = sorted({*kept, *added})
    process["noNewPrivileges"] = sec.get("allowPrivilegeEscalation") is False or bool(
        process.get("noNewPrivileges"))
    config["root"] = {"path": "rootfs", "readonly": bool(sec.get("readOnlyRootFilesystem"))}
    config["hostname"] = hostname
    config["mounts"] = [*config.get("mounts", []), *(
        {"destination": dest, "type": "bind", "source": str(src),
         "options": ["rbind", "ro" if ro else "rw", "nosuid", "nodev"]}
        for dest, src, ro in mounts)]
    linux = config.setdefault("linux", {})
    linux["namespaces"] = [n for n in linux.get("namespaces", []) if n["type"] != "network"]
    linux.pop("resources", None)  # no cgroup limits: see the module's docstring
    linux.pop("cgroupsPath", None)
    return config


# -- the Pod's volumes, as files -------------------------------------------------------------


def write_volume(volume: dict[str, Any], directory: Path, objects: dict[str, dict[str, str]],
                 service_account: dict[str, str] | None = None) -> Path | None:
    """Write the files of one Pod volume under ``directory/<name>``. ``objects`` maps
    ``secret/<name>`` and ``configmap/<name>`` to their decoded data. Returns None for a
    volume kind this stand-in does not know (the caller fails on it if it is mounted)."""
    target: Path = directory / str(volume["name"])
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    if "emptyDir" in volume:
        target.chmod(0o1777)  # as the kubelet makes it: any user may write
        return target
    if "secret" in volume or "configMap" in volume:
        kind, spec = (("secret", volume["secret"]) if "secret" in volume
                      else ("configmap", volume["configMap"]))
        name = spec.get("secretName") or spec.get("name")
        data = objects.get(f"{kind}/{name}")
        if data is None:
            if spec.get("optional"):
                return target
            raise TestbedError(f"volume {volume['name']}: {kind} {name} does not exist")
        items = spec.get("items") or [{"key": k, "path": k} for k in sorted(data)]
        mode = spec.get("defaultMode", 0o644)
        for item in items:
            if item["key"] not in data:
                if spec.get("optional"):
                    continue
                raise TestbedError(f"volume {volume['name']}: {kind} {name} has no key "
                                   f"{item['key']}")
            path = target / item["path"]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(data[item["key"]])
            path.chmod(item.get("mode", mode))
        return target
    if "projected" in volume and service_account is not None:
        for name, value in service_account.items():
            (target / name).write_text(value)
            (target / name).chmod(0o644)
        return target
    return None


def decode_secret(secret: dict[str, Any]) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}


# -- running it ------------------------------------------------------------------------------


@dataclass
class Container:
    """One container run by runc from a bundle; its output goes to ``log``."""

    id: str
    bundle: Path
    log: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self, config: dict[str, Any]) -> None:
        (self.bundle / "config.json").write_text(json.dumps(config, indent=1))
        subprocess.run([RUNTIME, "delete", "--force", self.id], capture_output=True,
                       check=False)
        with self.log.open("ab") as out:
            self.process = subprocess.Popen([RUNTIME, "run", "--bundle", str(self.bundle),
                                             self.id], stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def pid(self) -> int:
        """The container's first process, as the host sees it."""
        state = json.loads(_run([RUNTIME, "state", self.id], "runc state"))
        return int(state["pid"])

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> None:
        """Signal the container's process (runc forwards nothing we do not send), wait, and
        delete the container."""
        if self.alive():
            subprocess.run([RUNTIME, "kill", self.id, str(int(sig))], capture_output=True,
                           check=False)
            deadline = time.monotonic() + timeout
            assert self.process is not None
            while self.process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            if self.process.poll() is None:
                subprocess.run([RUNTIME, "kill", self.id, "KILL"], capture_output=True,
                               check=False)
                self.process.wait(timeout=10)
        subprocess.run([RUNTIME, "delete", "--force", self.id], capture_output=True, check=False)


def process_status(pid: int) -> dict[str, str]:
    """``/proc/<pid>/status`` as a dict (Uid, Gid, CapEff, NoNewPrivs, ...)."""
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}


def root_is_read_only(pid: int) -> bool:
    """Whether the container's ``/`` is mounted read-only, as its own mount table says."""
    for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == "/":
            return "ro" in fields[5].split(",")
    return False


def ensure_root() -> None:
    if os.geteuid() != 0:
        raise TestbedError("running a container with runc needs root here")
