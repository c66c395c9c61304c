"""Bring the test bed up, describe it, and take it down again.

One test bed per machine. Its live state (ports, pids, tokens, paths) is kept in
``$SUNK_TESTBED_DIR/state.json`` (default ``/tmp/sunk-testbed``), written as each process
starts, so ``down`` can clean up even after a half-finished ``up``.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import fcntl
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from sunk.plans.topology import BLOCK_LABEL
from testbed import accounting, build, pki, procs, slurmconf
from testbed.build import say
from testbed.errors import TestbedError
from testbed.topology import (
    NODE_CPUS,
    NODE_GPUS,
    NODE_MEMORY_MIB,
    NODESET,
    SLURM_NAMESPACE,
    SLURMD_CPUS,
    SLURMD_MEMORY_MIB,
    TestbedNode,
    nodes,
)

REPO = Path(__file__).resolve().parent.parent
SCRIPTS_DIR = REPO / "sunk" / "scripts"
CHROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SLURM_USER = "root"
MAX_NODES = 500
#: How long the prolog waits for a node lock here (a SUNK cluster would wait longer).
LOCK_TIMEOUT = 20
#: The longest a prolog may be made to wait (:func:`patient_prolog`): the chart's default, as
#: on a real cluster. Slurm's BatchStartTimeout is set above it.
PATIENT_LOCK_TIMEOUT = 300


@contextlib.contextmanager
def patient_prolog(tb: Testbed, seconds: int = PATIENT_LOCK_TIMEOUT) -> Iterator[None]:
    """The prolog waits up to ``seconds`` for its lock (as on a real cluster, where it waits
    300 s) while in this block; the bed's short wait is for its lock tests. For outages and
    benchmarks: a burst of 1,000 Pods on 2 cores has prologs waiting more than 20 s."""
    if seconds > PATIENT_LOCK_TIMEOUT:
        raise TestbedError(f"a prolog may wait {PATIENT_LOCK_TIMEOUT}s at most here "
                           "(Slurm's BatchStartTimeout is set above it)")
    env = Path(tb.chroot) / "run/slurm/etc/sunk-hooks.env"
    before = env.read_text()
    env.write_text("".join(line for line in before.splitlines(keepends=True)
                           if not line.startswith("SUNK_LOCK_TIMEOUT="))
                   + f"SUNK_LOCK_TIMEOUT={seconds}\n")
    try:
        yield
    finally:
        env.write_text(before)


@contextlib.contextmanager
def exclusive() -> Iterator[None]:
    """Hold the test bed alone (tests, benchmarks): a second holder waits. Two schedulers on
    one test bed would answer the same Slurm scripts and fight over the same Pods."""
    with open("/tmp/sunk-testbed.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say("another run holds the test bed; waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def state_dir() -> Path:
    return Path(os.environ.get("SUNK_TESTBED_DIR", "/tmp/sunk-testbed"))


@dataclass
class Testbed:
    """What is running, and how to reach it. Tests and the demo read this."""

    __test__ = False  # not a pytest test class, despite its name

    dir: str
    suite: str
    chroot: str
    node_count: int
    kill_wait: int
    ports: dict[str, int] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)
    #: How each restartable part was started (outage tests stop and start them again).
    cmds: dict[str, list[str]] = field(default_factory=dict)
    hook_token: str = ""
    slurm_token: str = ""
    ready: bool = False
    #: Slurm accounting (MariaDB and slurmdbd) runs; False in a state file older than it.
    accounting: bool = False
    #: The Kubernetes release it runs (build.KUBERNETES_RELEASES); a state file older than the
    #: choice was written by a 1.35 bed.
    kubernetes: str = "1.35"

    # -- derived ---------------------------------------------------------------------------
    @property
    def path(self) -> Path:
        return Path(self.dir)

    @property
    def kubeconfig(self) -> Path:
        return self.path / "kubeconfig"

    @property
    def apiserver_url(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    @property
    def slurmrestd_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['slurmrestd']}"

    @property
    def hook_url(self) -> str:
        """Where the Slurm scripts expect the scheduler's hook API (a test starts it there)."""
        return f"http://127.0.0.1:{self.ports['hooks']}"

    @property
    def nodes(self) -> list[TestbedNode]:
        return nodes(self.node_count)

    @property
    def pki(self) -> Path:
        return self.path / "pki"

    @property
    def release(self) -> build.KubernetesRelease:
        return build.kubernetes_release(self.kubernetes)

    def log(self, name: str) -> Path:
        return self.path / "logs" / f"{name}.log"

    # -- persistence -----------------------------------------------------------------------
    def save(self) -> None:
        tmp = self.path / "state.json.tmp"
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.chmod(0o600)
        tmp.rename(self.path / "state.json")

    @classmethod
    def load(cls) -> Testbed | None:
        f = state_dir() / "state.json"
        if not f.exists():
            return None
        try:
            return cls(**json.loads(f.read_text()))
        except (ValueError, TypeError) as exc:
            raise TestbedError(f"{f} is unreadable ({exc}); remove it after checking "
                               "that no test bed process is left") from exc

    # -- talking to the parts --------------------------------------------------------------
    def kube(self) -> httpx.Client:
        """An admin client of the API server (client certificate)."""
        ctx = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        ctx.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        return httpx.Client(base_url=self.apiserver_url, verify=ctx, timeout=10)

    def kubectl(self, *args: str, input: str | None = None, timeout: float = 60) -> str:
        bins = build.build_binaries(self.release)
        return procs.run([str(bins.kubectl), f"--kubeconfig={self.kubeconfig}", *args],
                         what=f"kubectl {' '.join(args[:2])}", input=input, timeout=timeout)

    def chroot_cmd(self, *args: str, user: str | None = None) -> list[str]:
        """A command line that runs ``args`` inside the Slurm chroot (as ``user:group``)."""
        userspec = [f"--userspec={user}"] if user else []
        return ["chroot", *userspec, self.chroot, "/usr/bin/env", "-i", f"PATH={CHROOT_PATH}",
                "SLURM_CONF=/etc/slurm/slurm.conf", *args]

    def slurm(self, *args: str, timeout: float = 30) -> str:
        """Run a Slurm command (sinfo, squeue, scontrol, sbatch, ...) inside the chroot."""
        return procs.run(self.chroot_cmd(*args), what=args[0], timeout=timeout)

    def chroot_ids(self, user: str) -> tuple[int, int]:
        """A user's uid and gid in the chroot (its own /etc/passwd, not the host's)."""
        for line in (Path(self.chroot) / "etc/passwd").read_text().splitlines():
            fields = line.split(":")
            if fields[0] == user:
                return int(fields[2]), int(fields[3])
        raise TestbedError(f"user {user} missing from the chroot {self.chroot}")

    def slurm_headers(self) -> dict[str, str]:
        return {"X-SLURM-USER-NAME": SLURM_USER, "X-SLURM-USER-TOKEN": self.slurm_token}

    def alive(self) -> dict[str, bool]:
        return {name: procs.alive(pid) for name, pid in self.pids.items()}


# ---------------------------------------------------------------------------------------------
# up


def _require_root() -> None:
    if os.geteuid() != 0:
        raise TestbedError("the test bed needs root (it uses chroot and mounts): "
                           "run it as root or with sudo")


def up(*, node_count: int = 8, suite: str = build.DEFAULT_SUITE, kill_wait: int = 30,
       apiserver_port: int | None = None, slurmrestd_port: int | None = None,
       slurmctld_port: int | None = None, accounting: bool = True,
       kubernetes: str | None = None) -> Testbed:
    """Start everything and return the running test bed (an already-running one is reused, if
    it runs accounting and the Kubernetes release as asked). ``kubernetes``: a release of
    build.KUBERNETES_RELEASES (default: build.wanted_kubernetes())."""
    build.check_suite(suite)
    release = build.kubernetes_release(kubernetes or build.wanted_kubernetes())
    if not 1 <= node_count <= MAX_NODES:
        raise TestbedError(f"--nodes must be between 1 and {MAX_NODES}, not {node_count}")
    _require_root()
    existing = Testbed.load()
    if existing is not None:
        if not existing.ready or not all(existing.alive().values()):
            say("a previous test bed did not stop cleanly; cleaning it up first")
        elif existing.accounting != accounting:
            say(f"the test bed up in {existing.dir} runs "
                f"{'with' if existing.accounting else 'without'} accounting; restarting it")
        elif existing.kubernetes != release.name:
            say(f"the test bed up in {existing.dir} runs Kubernetes {existing.kubernetes}, "
                f"not {release.name}; restarting it")
        elif not {"jobset-controller", "dradriver"} <= set(existing.pids):
            say(f"the test bed up in {existing.dir} was started without the JobSet "
                "controller or the DRA driver stand-in; restarting it")
        else:
            say(f"test bed already up in {existing.dir}; reusing it")
            return existing
        down()

    started = time.monotonic()
    picked = iter(procs.free_ports(12))
    ports = {
        "etcd": next(picked),
        "etcd_peer": next(picked),
        "controller_manager": next(picked),
        "lws_webhook": next(picked),
        "lws_health": next(picked),
        "jobset_webhook": next(picked),
        "jobset_health": next(picked),
        "apiserver": procs.require_port(apiserver_port, "kube-apiserver")
        if apiserver_port else next(picked),
        "slurmctld": procs.require_port(slurmctld_port, "slurmctld")
        if slurmctld_port else next(picked),
        "slurmrestd": procs.require_port(slurmrestd_port, "slurmrestd")
        if slurmrestd_port else next(picked),
        "hooks": next(picked),
    }
    if accounting:
        ports["slurmdbd"] = next(picked)
    ports["slurmd_base"] = procs.free_port_range(node_count)
    if len(set(ports.values())) != len(ports):
        raise TestbedError(f"two test bed components were given the same port: {ports}")
    bins = build.build_binaries(release)
    manifests = build.build_manifests()
    chroot = build.build_chroot(suite)

    path = state_dir()
    if path.exists():
        shutil.rmtree(path)
    (path / "logs").mkdir(parents=True)
    path.chmod(0o700)
    tb = Testbed(dir=str(path), suite=suite, chroot=str(chroot), node_count=node_count,
                 kill_wait=kill_wait, ports=ports, hook_token=secrets.token_urlsafe(32),
                 accounting=accounting, kubernetes=release.name)
    tb.save()
    try:
        _start_kubernetes(tb, bins)
        _start_slurm(tb)
        _wait_kubernetes(tb)
        _install_crds(tb, manifests.crds)
        _start_controller_manager(tb, bins)
        _start_lws(tb, bins, manifests.lws_webhooks)
        _start_jobset(tb, bins, manifests.jobset_webhooks)
        _create_kubernetes_objects(tb, bins)
        _wait_slurm(tb)
        tb.ready = True
        tb.save()
    except BaseException:
        if os.environ.get("SUNK_TESTBED_KEEP_ON_FAILURE"):
            say("start-up failed; leaving it as it is for a look (`python -m testbed down`)")
            raise
        say("start-up failed; stopping what was started")
        with contextlib.suppress(Exception):
            down(quiet=True)
        raise
    say(f"test bed up in {time.monotonic() - started:.1f}s")
    return tb


def _start_kubernetes(tb: Testbed, bins: build.Binaries) -> None:
    say("starting etcd and kube-apiserver")
    pki.make_pki(tb.pki)
    tb.kubeconfig.write_text(pki.kubeconfig(tb.apiserver_url, tb.pki))
    tb.kubeconfig.chmod(0o600)
    etcd_url = f"http://127.0.0.1:{tb.ports['etcd']}"
    peer_url = f"http://127.0.0.1:{tb.ports['etcd_peer']}"
    tb.pids["etcd"] = _launch(tb, "etcd", [
        str(bins.etcd), "--name=testbed", f"--data-dir={tb.path / 'etcd'}",
        f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
        f"--listen-peer-urls={peer_url}", f"--initial-advertise-peer-urls={peer_url}",
        f"--initial-cluster=testbed={peer_url}", "--unsafe-no-fsync",
        "--log-level=warn"], tb.log("etcd"))
    tb.save()
    procs.wait_for(lambda: httpx.get(f"{etcd_url}/health", timeout=1).status_code == 200,
                   what="etcd", timeout=30, log=tb.log("etcd"), pid=tb.pids["etcd"])
    tb.pids["kube-apiserver"] = _launch(tb, "kube-apiserver", apiserver_cmd(tb, bins),
                                        tb.log("kube-apiserver"))
    tb.save()


def apiserver_cmd(tb: Testbed, bins: build.Binaries) -> list[str]:
    """kube-apiserver's command line, with the bed's release's flags (its gang API)."""
    p = tb.pki
    etcd_url = f"http://127.0.0.1:{tb.ports['etcd']}"
    return build.with_flags([
        str(bins.kube_apiserver), f"--etcd-servers={etcd_url}",
        f"--cert-dir={p}", f"--tls-cert-file={p / 'apiserver.crt'}",
        f"--tls-private-key-file={p / 'apiserver.key'}", f"--client-ca-file={p / 'ca.crt'}",
        f"--secure-port={tb.ports['apiserver']}", "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1", "--service-cluster-ip-range=10.0.0.0/24",
        "--authorization-mode=RBAC", "--allow-privileged=true",
        f"--service-account-issuer={tb.apiserver_url}",
        f"--service-account-key-file={p / 'sa.pub'}",
        f"--service-account-signing-key-file={p / 'sa.key'}",
        # No controller-manager runs here: nobody would make default ServiceAccounts, nor lift
        # the not-ready taint that TaintNodesByCondition puts on every new Node.
        "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition", "--v=0"],
        tb.release.apiserver_flags)


def _launch(tb: Testbed, name: str, cmd: list[str], log: Path) -> int:
    tb.cmds[name] = cmd
    return procs.start(cmd, log)


#: The parts an outage test may kill and start again, and how to tell one is serving again;
#: each slurmd too (``slurmd:<Slurm node>``).
RESTARTABLE = ("kube-apiserver", "slurmctld", "slurmrestd", "slurmdbd", "etcd", "kwok")


def restartable(name: str) -> bool:
    return name in RESTARTABLE or name.startswith("slurmd:")


def kill_part(tb: Testbed, name: str, sig: int = signal.SIGKILL, *, wait: bool = True) -> None:
    """Stop one part of the bed as a crash would (SIGKILL by default; SIGTERM for a graceful
    stop), for outage tests. With ``wait``, return once it is gone (a graceful stop that takes
    more than 30 s is ended with SIGKILL: kube-apiserver stops serving at once but lingers)."""
    if not restartable(name) or name not in tb.cmds:
        raise TestbedError(f"{name} cannot be restarted; one of {', '.join(RESTARTABLE)} or "
                           "slurmd:<node> (of a bed started since it could)")
    pid = tb.pids[name]
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
    if not wait:
        return
    try:
        procs.wait_for(lambda: not procs.alive(pid), what=f"{name} to stop", timeout=30)
    except TestbedError:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        procs.wait_for(lambda: not procs.alive(pid), what=f"{name} to stop", timeout=30,
                       log=tb.log(name.replace(":", "-")))


def start_part(tb: Testbed, name: str, *, timeout: float = 60) -> None:
    """Start a part stopped by :func:`kill_part` again, with its first command line, and wait
    until it serves."""
    if procs.alive(tb.pids[name]):
        return
    tb.pids[name] = procs.start(tb.cmds[name], tb.log(name.replace(":", "-")))
    tb.save()
    def kube_ready() -> bool:
        with tb.kube() as client:
            return client.get("/readyz").status_code == 200

    if name.startswith("slurmd:"):  # registered again: not "not responding" (state ends in *)
        node = name.partition(":")[2]
        procs.wait_for(lambda: "*" not in tb.slurm("sinfo", "-h", "-N", "-n", node, "-o", "%t",
                                                   timeout=5),
                       what=name, timeout=timeout, log=tb.log(f"slurmd-{node}"),
                       pid=tb.pids[name])
        return
    ready = {
        "etcd": lambda: httpx.get(f"http://127.0.0.1:{tb.ports['etcd']}/health",
                                  timeout=2).status_code == 200,
        "kwok": lambda: procs.alive(tb.pids["kwok"]),
        "kube-apiserver": kube_ready,
        "slurmctld": lambda: "is UP" in tb.slurm("scontrol", "ping", timeout=5),
        "slurmdbd": lambda: accounting.slurmdbd_serves(tb),
        "slurmrestd": lambda: httpx.get(f"{tb.slurmrestd_url}/slurm/v0.0.42/ping",
                                        headers=tb.slurm_headers(), timeout=5
                                        ).status_code == 200,
    }[name]
    procs.wait_for(ready, what=name, timeout=timeout, log=tb.log(name), pid=tb.pids[name])


def _wait_kubernetes(tb: Testbed) -> None:
    def ready() -> bool:
        with tb.kube() as kube:
            return kube.get("/readyz").status_code == 200

    procs.wait_for(ready, what="kube-apiserver", timeout=120, log=tb.log("kube-apiserver"),
                   pid=tb.pids["kube-apiserver"])


def _install_crds(tb: Testbed, crds: list[Path]) -> None:
    """Create the CRDs (generated by controller-gen, cached) and wait until each is served."""
    say(f"installing CRDs: {', '.join(f.name.removesuffix('.yaml') for f in crds)}")
    tb.kubectl("create", *(arg for f in crds for arg in ("-f", str(f))), timeout=60)

    def established() -> bool:
        # (`kubectl wait` gives up on a CRD whose status has no conditions yet.)
        with tb.kube() as kube:
            for f in crds:
                crd = kube.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                               f"{_crd_name(f)}").json()
                conditions = {c["type"]: c["status"]
                              for c in crd.get("status", {}).get("conditions") or []}
                if conditions.get("Established") != "True":
                    return False
        return True

    procs.wait_for(established, what="the CRDs to be established", timeout=60,
                   log=tb.log("kube-apiserver"), pid=tb.pids["kube-apiserver"])


def _crd_name(crd: Path) -> str:
    """``<group>_<plural>.yaml`` (controller-gen's file name) -> ``<plural>.<group>``."""
    group, _, plural = crd.name.removesuffix(".yaml").partition("_")
    return f"{plural}.{group}"


#: kube-controller-manager runs these alone: Jobs make their Pods (the JobSet controller makes
#: a Job per replicated job), StatefulSets theirs (the LeaderWorkerSet controller makes a
#: StatefulSet per group), the garbage collector deletes what an owner being deleted leaves
#: (a Job's Pods, a JobSet's Jobs, a Node's ResourceSlice), and the resource-claim controller
#: makes a Pod's ResourceClaims from their templates (and releases them). No node-lifecycle
#: controller (it would taint kwok's Nodes), no namespace controller (tests finalize their
#: namespaces). A release adds its own (build.KubernetesRelease.controllers).
CONTROLLERS = ("job-controller", "statefulset-controller", "garbage-collector-controller",
               "resourceclaim-controller")


def controllers(release: build.KubernetesRelease) -> tuple[str, ...]:
    return CONTROLLERS + release.controllers


def controller_manager_cmd(tb: Testbed, bins: build.Binaries) -> list[str]:
    """kube-controller-manager's command line. It authenticates with the admin kubeconfig
    (system:masters), so no RBAC a release's controllers need has to be granted."""
    return build.with_flags([
        str(bins.kube_controller_manager), f"--kubeconfig={tb.kubeconfig}",
        f"--controllers={','.join(controllers(tb.release))}", "--leader-elect=false",
        "--bind-address=127.0.0.1", f"--secure-port={tb.ports['controller_manager']}",
        f"--cert-dir={tb.path / 'controller-manager'}", "--kube-api-qps=100",
        "--kube-api-burst=200", "--v=0"], tb.release.controller_manager_flags)


def _start_controller_manager(tb: Testbed, bins: build.Binaries) -> None:
    say(f"starting kube-controller-manager ({', '.join(controllers(tb.release))})")
    port = tb.ports["controller_manager"]
    tb.pids["kube-controller-manager"] = procs.start(controller_manager_cmd(tb, bins),
                                                     tb.log("kube-controller-manager"))
    tb.save()

    def healthy() -> bool:
        # Its serving certificate is one it made for itself; /healthz is open to anyone.
        return httpx.get(f"https://127.0.0.1:{port}/healthz", verify=False,
                         timeout=2).status_code == 200

    procs.wait_for(healthy, what="kube-controller-manager", timeout=60,
                   log=tb.log("kube-controller-manager"), pid=tb.pids["kube-controller-manager"])


#: Which Pods LWS's Pod webhooks see: its kustomize patches (config/webhook/*-patch.yaml) add
#: this selector to what controller-gen writes, so that no other Pod waits on the webhook.
LWS_POD_SELECTOR = {"matchExpressions": [{"key": "leaderworkerset.sigs.k8s.io/name",
                                          "operator": "Exists"}]}


#: Which Pods JobSet's Pod webhooks see: its kustomize patches
#: (config/components/webhook/patches/*-patch.yaml) add this selector to its Pod webhooks.
JOBSET_POD_SELECTOR = {"matchExpressions": [{"key": "jobset.sigs.k8s.io/jobset-name",
                                             "operator": "Exists"}]}


def webhook_configurations(generated: str, *, prefix: str, port: int, ca_bundle: bytes,
                           pod_selector: dict[str, Any]) -> list[dict[str, Any]]:
    """A controller's webhook configurations as controller-gen writes them, pointed at the
    controller on 127.0.0.1 (the test bed has no Service networking): each Service reference
    becomes ``url: https://127.0.0.1:<port><path>`` with the test bed's CA as the bundle, each
    configuration's name gets ``prefix`` (controller-gen gives every project the same two
    names), and each webhook on Pods gets ``pod_selector`` as its objectSelector."""
    configs = [doc for doc in yaml.safe_load_all(generated) if doc]
    bundle = base64.b64encode(ca_bundle).decode()
    for config in configs:
        config["metadata"]["name"] = f"{prefix}-{config['metadata']['name']}"
        for hook in config["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}",
                                    "caBundle": bundle}
            if any("pods" in rule.get("resources", []) for rule in hook["rules"]):
                hook["objectSelector"] = copy.deepcopy(pod_selector)
    return configs


def lws_webhook_configurations(generated: str, *, port: int, ca_bundle: bytes
                               ) -> list[dict[str, Any]]:
    """LWS's webhook configurations (:func:`webhook_configurations`), named ``lws-...``."""
    return webhook_configurations(generated, prefix="lws", port=port, ca_bundle=ca_bundle,
                                  pod_selector=LWS_POD_SELECTOR)


def jobset_webhook_configurations(generated: str, *, port: int, ca_bundle: bytes
                                  ) -> list[dict[str, Any]]:
    """JobSet's webhook configurations (:func:`webhook_configurations`), named ``jobset-...``."""
    return webhook_configurations(generated, prefix="jobset", port=port, ca_bundle=ca_bundle,
                                  pod_selector=JOBSET_POD_SELECTOR)


def _start_lws(tb: Testbed, bins: build.Binaries, webhooks: Path) -> None:
    """The LeaderWorkerSet controller with its webhooks on 127.0.0.1, serving a cert from the
    test bed's CA (its own cert rotation, which writes a Secret for a Service, is off)."""
    say("starting the LeaderWorkerSet controller and registering its webhooks")
    home = tb.path / "lws"
    pki.webhook_cert(tb.pki, home / "certs", "lws-webhook")
    config = {
        "apiVersion": "config.lws.x-k8s.io/v1alpha1", "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"host": "127.0.0.1", "port": tb.ports["lws_webhook"],
                    "certDir": str(home / "certs")},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{tb.ports['lws_health']}"},
    }
    (home / "config.yaml").write_text(json.dumps(config, indent=2))
    tb.pids["lws-controller"] = procs.start([
        str(bins.lws), f"--kubeconfig={tb.kubeconfig}", f"--config={home / 'config.yaml'}",
        "--zap-devel=false", "--zap-log-level=info"], tb.log("lws-controller"))
    tb.save()
    configs = lws_webhook_configurations(webhooks.read_text(), port=tb.ports["lws_webhook"],
                                         ca_bundle=(tb.pki / "ca.crt").read_bytes())
    tb.kubectl("create", "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": configs}))
    # Served once the API server's dry run of a LeaderWorkerSet passes both webhooks (the
    # defaulting one fills in the rollout strategy).
    probe = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
             "metadata": {"name": "probe", "namespace": "default"},
             "spec": {"leaderWorkerTemplate": {"size": 2, "workerTemplate": {"spec": {
                 "containers": [{"name": "c", "image": "busybox"}]}}}}}

    def webhooks_serve() -> bool:
        with tb.kube() as kube:
            r = kube.post("/apis/leaderworkerset.x-k8s.io/v1/namespaces/default/"
                          "leaderworkersets", params={"dryRun": "All"}, json=probe)
        return r.status_code == 201 and "rolloutStrategy" in r.json()["spec"]

    procs.wait_for(webhooks_serve, what="the LeaderWorkerSet controller's webhooks", timeout=60,
                   log=tb.log("lws-controller"), pid=tb.pids["lws-controller"])


def jobset_home(tb: Testbed) -> Path:
    """Where the JobSet controller's configuration and serving cert are kept."""
    return tb.path / "jobset"


def jobset_config(tb: Testbed) -> dict[str, Any]:
    """The JobSet controller's configuration (config.jobset.x-k8s.io/v1alpha1, read strictly):
    no leader election; its internal cert management off (it would write a Secret for a
    Service in its namespace) so that its webhooks serve the cert from the test bed's CA in
    ``certs/``, on 127.0.0.1; no metrics server ("0"); health probes on 127.0.0.1."""
    return {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1", "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"host": "127.0.0.1", "port": tb.ports["jobset_webhook"],
                    "certDir": str(jobset_home(tb) / "certs")},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{tb.ports['jobset_health']}"},
    }


def jobset_cmd(tb: Testbed, bins: build.Binaries) -> list[str]:
    """The JobSet controller's command line: the admin kubeconfig (system:masters, so no RBAC
    to grant) and :func:`jobset_config`'s file; flags would override the file, so none of its
    settings is given again here."""
    return [str(bins.jobset), f"--kubeconfig={tb.kubeconfig}",
            f"--config={jobset_home(tb) / 'config.yaml'}", "--zap-devel=false",
            "--zap-log-level=info"]


#: A JobSet the API server dry-runs to see both JobSet webhooks serve.
_JOBSET_PROBE = {
    "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
    "metadata": {"name": "probe", "namespace": "default"},
    "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {
        "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}}]}}


def _start_jobset(tb: Testbed, bins: build.Binaries, webhooks: Path) -> None:
    """The JobSet controller with its webhooks on 127.0.0.1, as the LeaderWorkerSet controller
    (:func:`_start_lws`): a serving cert from the test bed's CA, its own cert rotation off."""
    say("starting the JobSet controller and registering its webhooks")
    home = jobset_home(tb)
    pki.webhook_cert(tb.pki, home / "certs", "jobset-webhook")
    (home / "config.yaml").write_text(json.dumps(jobset_config(tb), indent=2))
    tb.pids["jobset-controller"] = procs.start(jobset_cmd(tb, bins), tb.log("jobset-controller"))
    tb.save()
    health = f"http://127.0.0.1:{tb.ports['jobset_health']}"
    # Ready once its webhook server listens (its readyz checks that, after the certificates).
    procs.wait_for(lambda: httpx.get(f"{health}/readyz", timeout=2).status_code == 200,
                   what="the JobSet controller", timeout=60, log=tb.log("jobset-controller"),
                   pid=tb.pids["jobset-controller"])
    configs = jobset_webhook_configurations(webhooks.read_text(),
                                            port=tb.ports["jobset_webhook"],
                                            ca_bundle=(tb.pki / "ca.crt").read_bytes())
    tb.kubectl("create", "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": configs}))

    # Served once the API server's dry run of a JobSet passes both webhooks (the defaulting
    # one fills in spec.network, which the CRD leaves out).
    def webhooks_serve() -> bool:
        with tb.kube() as kube:
            r = kube.post("/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets",
                          params={"dryRun": "All"}, json=_JOBSET_PROBE)
        return r.status_code == 201 and "network" in r.json()["spec"]

    procs.wait_for(webhooks_serve, what="the JobSet controller's webhooks", timeout=60,
                   log=tb.log("jobset-controller"), pid=tb.pids["jobset-controller"])


def _node_manifest(node: TestbedNode) -> dict[str, Any]:
    resources = {"cpu": str(NODE_CPUS + SLURMD_CPUS),
                 "memory": f"{NODE_MEMORY_MIB + SLURMD_MEMORY_MIB}Mi",
                 "nvidia.com/gpu": str(NODE_GPUS), "pods": "110"}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": node.k8s_name,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": node.k8s_name, "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64", "type": "kwok",
                "gpu.nvidia.com/model": node.gpu_model,
                "gpu.nvidia.com/count": str(NODE_GPUS),
                BLOCK_LABEL: node.block,
            },
        },
        "spec": {},
        "status": {"allocatable": resources, "capacity": resources},
    }


def _slurmd_pod_manifest(node: TestbedNode, suite: str) -> dict[str, Any]:
    """The slurmd Pod a SUNK NodeSet would run for this Slurm node, bound to its Node."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": node.slurmd_pod, "namespace": SLURM_NAMESPACE,
            "labels": {
                "app.kubernetes.io/name": "slurmd", "app.kubernetes.io/instance": "slurm",
                "app.kubernetes.io/component": "compute",
                "slurm.coreweave.com/nodeset": NODESET,
                "slurm.coreweave.com/node": node.slurm_name,
            },
        },
        "spec": {
            "hostname": node.slurm_name,
            "nodeName": node.k8s_name,
            "containers": [{
                "name": "slurmd", "image": f"sunk-testbed/slurmd:{build.SLURM_SUITES[suite]}",
                "resources": {"requests": {"cpu": str(SLURMD_CPUS),
                                           "memory": f"{SLURMD_MEMORY_MIB}Mi"}},
            }],
            "tolerations": [{"operator": "Exists"}],
            "terminationGracePeriodSeconds": 5,
        },
    }


def _create_kubernetes_objects(tb: Testbed, bins: build.Binaries) -> None:
    say(f"starting kwok and creating {tb.node_count} Nodes with their slurmd Pods")
    tb.pids["kwok"] = _launch(tb, "kwok", [
        str(bins.kwok), f"--kubeconfig={tb.kubeconfig}", "--manage-all-nodes=false",
        "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
        "--node-ip=127.0.0.1", "--cidr=10.244.0.0/16",
        f"--config={Path(__file__).with_name('kwok-stages.yaml')}"], tb.log("kwok"))
    tb.save()
    namespace = {"apiVersion": "v1", "kind": "Namespace",
                 "metadata": {"name": SLURM_NAMESPACE}}
    objects: list[dict[str, Any]] = [namespace]
    objects += [_node_manifest(n) for n in tb.nodes]
    objects += [_slurmd_pod_manifest(n, tb.suite) for n in tb.nodes]
    manifest = json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
    tb.kubectl("create", "-f", "-", input=manifest, timeout=120)

    def all_ready() -> bool:
        with tb.kube() as kube:
            node_list = kube.get("/api/v1/nodes").json()["items"]
            pod_list = kube.get(f"/api/v1/namespaces/{SLURM_NAMESPACE}/pods").json()["items"]
        ready_nodes = sum(
            any(c["type"] == "Ready" and c["status"] == "True"
                for c in n.get("status", {}).get("conditions", []))
            for n in node_list)
        running = sum(p.get("status", {}).get("phase") == "Running" for p in pod_list)
        return ready_nodes == tb.node_count and running == tb.node_count

    procs.wait_for(all_ready, what="kwok Nodes and slurmd Pods", timeout=120,
                   log=tb.log("kwok"), pid=tb.pids["kwok"])
    _start_dra_driver(tb)


def _start_dra_driver(tb: Testbed) -> None:
    """The bed's GPU DRA driver (:mod:`testbed.dradriver`): a ResourceSlice per Node."""
    say("starting the GPU DRA driver stand-in (a ResourceSlice of 8 GPUs per Node)")
    cmd = [sys.executable, "-m", "testbed.dradriver"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "SUNK_TESTBED_DIR": str(state_dir())}
    tb.pids["dradriver"] = procs.start(cmd, tb.log("dradriver"), env=env)
    tb.cmds["dradriver"] = cmd
    tb.save()

    def published() -> bool:
        with tb.kube() as kube:
            r = kube.get("/apis/resource.k8s.io/v1/resourceslices")
            return r.status_code == 200 and len(r.json()["items"]) >= tb.node_count

    procs.wait_for(published, what="a ResourceSlice per Node", timeout=60,
                   log=tb.log("dradriver"), pid=tb.pids["dradriver"])


def _mount_chroot(tb: Testbed) -> None:
    root = Path(tb.chroot)
    (root / "opt/sunk/scripts").mkdir(parents=True, exist_ok=True)
    for args, point in ((["-t", "proc", "proc"], "proc"), (["--bind", "/dev"], "dev"),
                        (["-t", "tmpfs", "-o", "mode=755", "tmpfs"], "run"),
                        (["-t", "tmpfs", "-o", "mode=1777", "tmpfs"], "tmp"),
                        (["--bind", str(SCRIPTS_DIR)], "opt/sunk/scripts")):
        procs.run(["mount", *args, str(root / point)], what=f"mounting {root / point}")
    procs.run(["mount", "-o", "remount,bind,ro", str(root / "opt/sunk/scripts")],
              what="making the scripts mount read-only")
    hostname = socket.gethostname()
    (root / "etc/hosts").write_text(f"127.0.0.1 localhost {hostname}\n::1 localhost\n")
    _ensure_lines(root / "etc/passwd", TEST_USERS)
    _ensure_lines(root / "etc/group", TEST_GROUPS)


#: Users a Pod's user-id/group-id annotations can name (the reference's "dedicated Slurm user").
TEST_USERS = ("k8s-pods:x:1001:1001::/tmp:/bin/sh",)
TEST_GROUPS = ("k8s-pods:x:1001:", "k8s-shared:x:1002:k8s-pods")


def _ensure_lines(path: Path, lines: tuple[str, ...]) -> None:
    text = path.read_text()
    missing = [line for line in lines if line not in text.splitlines()]
    if missing:
        path.write_text(text.rstrip("\n") + "\n" + "\n".join(missing) + "\n")


def _start_slurm(tb: Testbed) -> None:
    daemons = "munge, MariaDB, slurmdbd, slurmctld" if tb.accounting else "munge, slurmctld"
    say(f"starting {daemons} and {tb.node_count} slurmd in the {tb.suite} chroot")
    root = Path(tb.chroot)
    _mount_chroot(tb)
    run = root / "run"
    etc = run / "slurm/etc"
    for d in ("slurm/etc", "slurm/state", "slurm/dev", "munge", "munge-etc"):
        (run / d).mkdir(parents=True, exist_ok=True)
    for node in tb.nodes:
        (run / "slurm/spool" / node.slurm_name).mkdir(parents=True)
    for i in range(8):
        (run / f"slurm/dev/gpu{i}").touch()

    uid, gid = tb.chroot_ids("munge")
    key = run / "munge-etc/munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    key.chmod(0o400)
    for p in (run / "munge", run / "munge-etc", key):
        os.chown(p, uid, gid)
    (run / "munge-etc").chmod(0o700)

    ports = slurmconf.SlurmPorts(slurmctld=tb.ports["slurmctld"],
                                 slurmd_base=tb.ports["slurmd_base"],
                                 slurmrestd=tb.ports["slurmrestd"],
                                 slurmdbd=tb.ports["slurmdbd"] if tb.accounting else None)
    (etc / "slurm.conf").write_text(slurmconf.slurm_conf(
        host=socket.gethostname().split(".")[0], nodes=tb.nodes, ports=ports,
        kill_wait=tb.kill_wait, lock_timeout=PATIENT_LOCK_TIMEOUT))
    (etc / "gres.conf").write_text(slurmconf.gres_conf(tb.nodes))
    (etc / "topology.conf").write_text(slurmconf.topology_conf(tb.nodes))
    (etc / "cgroup.conf").write_text(slurmconf.CGROUP_CONF)
    jwt = etc / "jwt.key"
    jwt.write_bytes(secrets.token_bytes(32))
    jwt.chmod(0o600)
    # Where the prolog and placeholder scripts reach the scheduler's hook API: every job may
    # read it (placeholder jobs run as the Pod's Slurm user, the user-id annotation) ...
    env_file = etc / "sunk-hooks.env"
    env_file.write_text(f"SUNK_HOOK_URL={tb.hook_url}\nSUNK_LOCK_TIMEOUT={LOCK_TIMEOUT}\n")
    env_file.chmod(0o644)
    # ... and the node secret, for the prolog (root) alone.
    token_file = etc / "sunk-hooks.token"
    token_file.write_text(tb.hook_token + "\n")
    token_file.chmod(0o600)

    tb.pids["munged"] = procs.start(
        tb.chroot_cmd("munged", "--foreground", "--force", user="munge:munge"), tb.log("munged"))
    tb.save()
    procs.wait_for(lambda: (run / "munge/munge.socket.2").exists(), what="munged", timeout=20,
                   log=tb.log("munged"), pid=tb.pids["munged"])
    if tb.accounting:
        accounting.start(tb)
    tb.pids["slurmctld"] = _launch(tb, "slurmctld", tb.chroot_cmd("slurmctld", "-D", "-i"),
                                   tb.log("slurmctld"))
    tb.save()
    procs.wait_for(lambda: "is UP" in tb.slurm("scontrol", "ping", timeout=5),
                   what="slurmctld", timeout=60, log=tb.log("slurmctld"),
                   pid=tb.pids["slurmctld"])
    if tb.accounting:
        accounting.wait_registered(tb)
    for node in tb.nodes:
        tb.pids[f"slurmd:{node.slurm_name}"] = _launch(
            tb, f"slurmd:{node.slurm_name}", tb.chroot_cmd("slurmd", "-D", "-N", node.slurm_name),
            tb.log(f"slurmd-{node.slurm_name}"))
    tb.save()


def _wait_slurm(tb: Testbed) -> None:
    def all_idle() -> bool:
        out = tb.slurm("sinfo", "--noheader", "--Node", "--partition=batch", "-o", "%N %t")
        states = [line.split()[1] for line in out.splitlines() if line.strip()]
        return len(states) == tb.node_count and all(s == "idle" for s in states)

    procs.wait_for(all_idle, what=f"{tb.node_count} idle Slurm nodes", timeout=120,
                   log=tb.log("slurmctld"), pid=tb.pids["slurmctld"])
    say("starting slurmrestd (JWT) and minting a token")
    # With accounting, also the /slurmdb/ endpoints (sacct's records, accounts, QOS).
    plugins = "openapi/slurmctld,openapi/slurmdbd" if tb.accounting else "openapi/slurmctld"
    tb.pids["slurmrestd"] = _launch(tb, "slurmrestd",
        tb.chroot_cmd("SLURM_JWT=daemon", "slurmrestd", "-a", "rest_auth/jwt",
                      "-s", plugins, f"127.0.0.1:{tb.ports['slurmrestd']}",
                      user="nobody:nogroup"),
        tb.log("slurmrestd"))
    tb.save()
    out = tb.slurm("scontrol", "token", f"username={SLURM_USER}", "lifespan=31536000")
    tb.slurm_token = out.strip().removeprefix("SLURM_JWT=")
    (tb.path / "slurm-token").write_text(tb.slurm_token + "\n")
    (tb.path / "slurm-token").chmod(0o600)
    tb.save()

    def pinged() -> bool:
        r = httpx.get(f"{tb.slurmrestd_url}/slurm/v0.0.42/ping", headers=tb.slurm_headers(),
                      timeout=5)
        return r.status_code == 200

    procs.wait_for(pinged, what="slurmrestd", timeout=30, log=tb.log("slurmrestd"),
                   pid=tb.pids["slurmrestd"])


# ---------------------------------------------------------------------------------------------
# down and status


def down(*, quiet: bool = False) -> None:
    """Stop every process the test bed started (and any left in its chroot) and unmount."""
    _require_root()
    tb = Testbed.load()
    if tb is None:
        if not quiet:
            say("no test bed state found; nothing to stop")
        return
    chroot = Path(tb.chroot)
    # Slurm daemons first (they are in the chroot), then the Kubernetes side.
    order = sorted(tb.pids.items(), key=lambda kv: kv[0] in ("etcd", "kube-apiserver"))
    procs.stop([pid for name, pid in order if name not in ("etcd", "kube-apiserver")])
    procs.stop([tb.pids[n] for n in ("kube-apiserver", "etcd") if n in tb.pids])
    # Job scripts and slurmstepd are not ours by pid, but they are rooted in the chroot.
    for _ in range(3):
        leftover = procs.pids_rooted_in(chroot) if chroot.exists() else []
        if not leftover:
            break
        procs.stop(leftover, timeout=5)
    for point in procs.mounts_under(chroot) if chroot.exists() else []:
        result = subprocess.run(["umount", point], capture_output=True, text=True)
        if result.returncode != 0:
            subprocess.run(["umount", "-l", point], capture_output=True, text=True)
    left = [p for p in procs.mounts_under(chroot)] if chroot.exists() else []
    if left:
        raise TestbedError(f"could not unmount: {', '.join(left)}")
    shutil.rmtree(tb.path, ignore_errors=True)
    if not quiet:
        say("test bed stopped; no process or mount left")


def status() -> str:
    """A human summary of what runs where."""
    tb = Testbed.load()
    if tb is None:
        return "test bed: down"
    alive = tb.alive()
    slurmds = [n for n in alive if n.startswith("slurmd:")]
    lines = [f"test bed: {'up' if tb.ready and all(alive.values()) else 'DEGRADED'} "
             f"({tb.node_count} nodes, Kubernetes {tb.release.version}, Debian {tb.suite}, "
             f"Slurm {build.SLURM_SUITES[tb.suite]}, "
             f"accounting {'on' if tb.accounting else 'off'})",
             f"  state dir     {tb.dir}"]

    def row(name: str, where: str) -> str:
        pid = tb.pids.get(name)
        state = "running" if pid and alive.get(name) else "STOPPED"
        return f"  {name:<23} {state:<8} pid {pid or '-':<8} {where}"

    lines.append(row("etcd", f"http://127.0.0.1:{tb.ports.get('etcd')}"))
    lines.append(row("kube-apiserver", tb.apiserver_url))
    if "kube-controller-manager" in tb.pids:
        lines.append(row("kube-controller-manager", ", ".join(controllers(tb.release))))
    if "lws-controller" in tb.pids:
        lines.append(row("lws-controller",
                         f"webhooks https://127.0.0.1:{tb.ports.get('lws_webhook')}"))
    if "jobset-controller" in tb.pids:
        lines.append(row("jobset-controller",
                         f"webhooks https://127.0.0.1:{tb.ports.get('jobset_webhook')}, "
                         f"health http://127.0.0.1:{tb.ports.get('jobset_health')}"))
    lines.append(row("kwok", f"{tb.node_count} Nodes"))
    lines.append(row("munged", "in chroot"))
    if tb.accounting:
        lines.append(row("mariadb", f"in chroot, socket {slurmconf.MARIADB_SOCKET}"))
        lines.append(row("slurmdbd", f"127.0.0.1:{tb.ports.get('slurmdbd')}"))
    lines.append(row("slurmctld", f"127.0.0.1:{tb.ports.get('slurmctld')}"))
    up_slurmds = sum(alive[n] for n in slurmds)
    base = tb.ports.get("slurmd_base", 0)
    lines.append(f"  {'slurmd':<23} {up_slurmds}/{len(slurmds)} running, ports "
                 f"{base}..{base + tb.node_count - 1}")
    lines.append(row("slurmrestd", tb.slurmrestd_url))
    if "sunk-scheduler" in tb.pids:
        lines.append(row("sunk-scheduler", f"dashboard http://127.0.0.1:"
                                           f"{tb.ports.get('demo_dashboard')}/ (the demo's)"))
    lines += [
        f"  kubeconfig    {tb.kubeconfig}",
        f"  slurm token   {tb.path / 'slurm-token'} (user {SLURM_USER})",
        f"  hook API      {tb.hook_url} (where Slurm's scripts call the scheduler)",
        f"  chroot        {tb.chroot}",
    ]
    return "\n".join(lines)
