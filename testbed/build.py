"""Build the test bed's binaries and Slurm chroot once, and cache them outside the repository.

Everything comes from package registries through their ordinary clients: the Go module proxy
(``go``) for etcd, kube-apiserver, kube-controller-manager, kubectl, kwok, helm, the
LeaderWorkerSet and JobSet controllers and controller-gen (which writes CRDs from Go API types),
and Debian's archive (``debootstrap``) for Slurm. Each artefact is cached under its version, so
a second ``up`` builds nothing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from testbed import procs
from testbed.errors import TestbedError

ETCD_VERSION = "v3.6.16"
KWOK_VERSION = "v0.7.0"
HELM_VERSION = "v3.19.5"
#: controller-gen, which writes CRDs from Go API types (scheduler-plugins v0.33.5 uses v0.17.3).
CONTROLLER_TOOLS_VERSION = "v0.17.3"
SCHEDULER_PLUGINS_VERSION = "v0.33.5"
LWS_VERSION = "v0.8.0"
JOBSET_VERSION = "v0.11.1"
#: The commit JobSet's tag names (the Go proxy's ``v0.11.1.info``, Origin.Hash): its Makefile
#: stamps it beside the version.
JOBSET_COMMIT = "ecaf56ab2dffb6edce074beda10ea092e71f62e5"

#: Debian suite -> the Slurm release it ships (what ``up --slurm-suite`` accepts).
SLURM_SUITES = {"trixie": "24.11", "sid": "26.05"}
DEFAULT_SUITE = "trixie"
CHROOT_PACKAGES = (
    "slurmctld",
    "slurmd",
    "slurmrestd",
    "munge",
    "slurm-client",
    "slurm-wlm-jwt-plugin",
    "curl",
    "ca-certificates",
    "procps",
    # Accounting: slurmdbd and the MariaDB it keeps its records in (`up --no-accounting` runs
    # neither).
    "mariadb-server",
    "slurmdbd",
)


@dataclass(frozen=True)
class KubernetesRelease:
    """A Kubernetes release the bed can run, and the flags that switch its own gang API
    (scheduling.k8s.io Workload and PodGroup) on where it has one."""

    #: What ``up --kubernetes`` and ``$SUNK_TESTBED_KUBERNETES`` accept: "1.37".
    name: str
    #: The k8s.io/kubernetes module version built: "v1.37.2".
    version: str
    apiserver_flags: tuple[str, ...] = ()
    controller_manager_flags: tuple[str, ...] = ()
    #: Controllers run on top of the bed's own (cluster.CONTROLLERS).
    controllers: tuple[str, ...] = ()


#: Lifts the finalizer the API server puts on every new PodGroup once GenericWorkload is on;
#: without it, a PodGroup (and its namespace) is never deleted.
PODGROUP_PROTECTION_CONTROLLER = "podgroup-protection-controller"
_GATES_1_36 = "--feature-gates=GenericWorkload=true,GangScheduling=true,WorkloadWithJob=true"
#: 1.37 has no GangScheduling gate any more (its gang scheduling has no gate of its own), and
#: a binary given an unknown gate refuses to start.
_GATES_1_37 = "--feature-gates=GenericWorkload=true,WorkloadWithJob=true"
KUBERNETES_RELEASES = {release.name: release for release in (
    KubernetesRelease("1.35", "v1.35.4"),
    KubernetesRelease("1.36", "v1.36.3",
                      apiserver_flags=("--runtime-config=scheduling.k8s.io/v1alpha2=true",
                                       _GATES_1_36),
                      controller_manager_flags=(_GATES_1_36,),
                      controllers=(PODGROUP_PROTECTION_CONTROLLER,)),
    KubernetesRelease("1.37", "v1.37.2",
                      # 1.37 refuses a loopback --advertise-address unless nothing writes the
                      # `kubernetes` Service's endpoints (the bed has no Service network)
                      apiserver_flags=("--runtime-config=scheduling.k8s.io/v1beta1=true",
                                       _GATES_1_37, "--endpoint-reconciler-type=none"),
                      controller_manager_flags=(_GATES_1_37,),
                      controllers=(PODGROUP_PROTECTION_CONTROLLER,)),
)}
DEFAULT_KUBERNETES = "1.37"
#: Chooses the release wherever none is named: the e2e suite, ``make test``, the CLI's default.
KUBERNETES_ENV = "SUNK_TESTBED_KUBERNETES"


def kubernetes_release(name: str) -> KubernetesRelease:
    if name not in KUBERNETES_RELEASES:
        raise TestbedError(f"unknown Kubernetes release {name!r}: choose one of "
                           + ", ".join(f"{n} ({r.version})"
                                       for n, r in KUBERNETES_RELEASES.items()))
    return KUBERNETES_RELEASES[name]


def wanted_kubernetes() -> str:
    """The release asked for: ``$SUNK_TESTBED_KUBERNETES``, else the default."""
    return os.environ.get(KUBERNETES_ENV) or DEFAULT_KUBERNETES


#: Flags whose value is a comma-separated list of key=value pairs: given twice, the last one
#: would replace the first, so extra ones are merged into one.
LIST_FLAGS = ("--feature-gates", "--runtime-config")


def with_flags(cmd: Sequence[str], extra: Sequence[str]) -> list[str]:
    """``cmd`` with ``extra`` appended, each of :data:`LIST_FLAGS` merged into the one
    already there (an extra key's value wins)."""
    out = list(cmd)
    for flag in extra:
        name, _, value = flag.partition("=")
        at = next((i for i, arg in enumerate(out) if arg.partition("=")[0] == name), None)
        if name not in LIST_FLAGS or at is None:
            out.append(flag)
            continue
        pairs = dict(item.partition("=")[::2]
                     for item in [*out[at].partition("=")[2].split(","), *value.split(",")]
                     if item)
        out[at] = f"{name}=" + ",".join(f"{k}={v}" if v else k for k, v in pairs.items())
    return out


def cache_root() -> Path:
    """Where builds are kept: ``$SUNK_TESTBED_CACHE`` or ``~/.cache/sunk-testbed``."""
    env = os.environ.get("SUNK_TESTBED_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "sunk-testbed"


def say(message: str) -> None:
    print(f"[testbed] {message}", file=sys.stderr, flush=True)


def _run(cmd: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None,
         what: str, log: Path) -> None:
    """Run a slow build step, printing a heartbeat, and keep its output in ``log``."""
    start = time.monotonic()
    done = threading.Event()

    def heartbeat() -> None:
        while not done.wait(30):
            say(f"  ... still {what} ({time.monotonic() - start:.0f}s)")

    ticker = threading.Thread(target=heartbeat, daemon=True)
    ticker.start()
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        with log.open("ab") as out:
            out.write(f"\n$ {' '.join(cmd)}\n".encode())
            out.flush()
            proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    finally:
        done.set()
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-15:]
        raise TestbedError(f"{what} failed (exit {proc.returncode}); last lines of {log}:\n"
                           + "\n".join(tail))


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kubectl: Path
    kwok: Path
    helm: Path
    #: The LeaderWorkerSet controller (its webhooks included): sigs.k8s.io/lws/cmd.
    lws: Path
    #: The JobSet controller (its webhooks included): sigs.k8s.io/jobset (main.go at its root).
    jobset: Path


def _go_env(work: Path) -> dict[str, str]:
    if shutil.which("go") is None:
        raise TestbedError("the Go toolchain is needed to build the test bed (`go` not on PATH)")
    env = dict(os.environ)
    env.update(CGO_ENABLED="0", GOFLAGS="-mod=mod", GOWORK="off")
    env.setdefault("GOPATH", str(Path.home() / "go"))
    return env


def _kubernetes_gomod(version: str, env: dict[str, str], log: Path) -> str:
    """k8s.io/kubernetes's own go.mod at ``version``."""
    out = subprocess.run(["go", "mod", "download", "-json", f"k8s.io/kubernetes@{version}"],
                         env=env, capture_output=True, text=True)
    if out.returncode != 0:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(out.stdout + out.stderr)
        raise TestbedError(f"could not download k8s.io/kubernetes@{version}: {out.stderr.strip()}")
    return Path(json.loads(out.stdout)["GoMod"]).read_text()


def staging_replaces(gomod: str, version: str) -> list[str]:
    """The staging modules k8s.io/kubernetes replaces with ./staging/..., each replaced here by
    its published version (v1.37.2 -> v0.37.2)."""
    staging = version.replace("v1.", "v0.", 1)
    mods = sorted(set(re.findall(r"^\s*(k8s\.io/[\w./-]+)\s+=>\s+\./staging/", gomod, re.M)))
    if not mods:
        raise TestbedError(f"k8s.io/kubernetes@{version} go.mod lists no staging replaces")
    return [f"replace {m} => {m} {staging}" for m in mods]


def go_directive(gomod: str) -> str:
    """A go.mod's ``go`` line: the module requiring k8s.io/kubernetes needs at least its
    (1.25.0 for 1.35, 1.26.0 from 1.36)."""
    found = re.search(r"^go\s+(\S+)\s*$", gomod, re.M)
    if not found:
        raise TestbedError("k8s.io/kubernetes's go.mod has no go line")
    return found.group(1)


#: The commands built from k8s.io/kubernetes (cmd/<name>), each cached as <name>-<version>.
KUBERNETES_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kubectl")


def _build_kubernetes(bins: Path, logs: Path, release: KubernetesRelease) -> dict[str, Path]:
    version = release.version
    outs = {name: bins / f"{name}-{version}" for name in KUBERNETES_COMMANDS}
    if all(out.exists() for out in outs.values()):
        return outs
    work = cache_root() / "build" / f"kubernetes-{version}"
    work.mkdir(parents=True, exist_ok=True)
    env = _go_env(work)
    log = logs / f"kubernetes-{version}.log"
    missing = [name for name, out in outs.items() if not out.exists()]
    say(f"building {', '.join(missing)} {version} from Go modules "
        "(first run of each release only: 10 to 20 minutes on 2 cores for all three)")
    gomod = _kubernetes_gomod(version, env, log)
    (work / "go.mod").write_text(
        f"module sunk.local/testbed/kubernetes\n\ngo {go_directive(gomod)}\n\n"
        f"require k8s.io/kubernetes {version}\n\n"
        + "\n".join(staging_replaces(gomod, version)) + "\n")
    (work / "tools.go").write_text(
        "//go:build tools\n\npackage tools\n\nimport (\n"
        + "".join(f'\t_ "k8s.io/kubernetes/cmd/{name}"\n' for name in KUBERNETES_COMMANDS)
        + ")\n")
    _run(["go", "mod", "tidy"], cwd=work, env=env, what="resolving Kubernetes modules", log=log)
    major, minor = version.lstrip("v").split(".")[:2]
    stamps = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        stamps += [f"-X {pkg}.gitVersion={version}", f"-X {pkg}.gitMajor={major}",
                   f"-X {pkg}.gitMinor={minor}", f"-X {pkg}.gitTreeState=clean"]
    ldflags = " ".join(["-s", "-w", *stamps])
    for name in missing:
        out = outs[name]
        tmp = out.with_name(out.name + ".tmp")
        _run(["go", "build", "-trimpath", "-tags=selinux,notest,grpcnotrace",
              f"-ldflags={ldflags}", "-o", str(tmp), f"k8s.io/kubernetes/cmd/{name}"],
             cwd=work, env=env, what=f"building {name}", log=log)
        tmp.rename(out)
    return outs


def _go_install(bins: Path, logs: Path, name: str, module: str, version: str,
                ldflags: str = "-s -w") -> Path:
    out = bins / f"{name}-{version}"
    if out.exists():
        return out
    gobin = cache_root() / "build" / f"{name}-{version}"
    gobin.mkdir(parents=True, exist_ok=True)
    env = _go_env(gobin)
    env["GOBIN"] = str(gobin)
    env["GOFLAGS"] = ""
    say(f"building {name} {version} (first run only: a few minutes)")
    _run(["go", "install", "-trimpath", f"-ldflags={ldflags}", f"{module}@{version}"],
         env=env, what=f"building {name}", log=logs / f"{name}-{version}.log")
    (gobin / name).rename(out)
    return out


def _build_main(bins: Path, logs: Path, name: str, module: str, version: str, package: str,
                ldflags: str) -> Path:
    """A main package built inside a module of our own that requires ``module@version``: for
    modules `go install pkg@version` refuses here (it asks the proxy for the module's version
    list, to look for a deprecation, and this proxy answers 403), and for etcd's server, whose
    module `go install` will not build from its version alone."""
    out = bins / f"{name}-{version}"
    if out.exists():
        return out
    work = cache_root() / "build" / f"{name}-{version}"
    work.mkdir(parents=True, exist_ok=True)
    env = _go_env(work)
    log = logs / f"{name}-{version}.log"
    say(f"building {name} {version} (first run only: a few minutes)")
    (work / "go.mod").write_text(f"module sunk.local/testbed/{name}\n\ngo 1.25.0\n\n"
                                 f"require {module} {version}\n")
    (work / "tools.go").write_text(
        f'//go:build tools\n\npackage tools\n\nimport _ "{package}"\n')
    _run(["go", "mod", "tidy"], cwd=work, env=env, what=f"resolving {name} modules", log=log)
    tmp = out.with_name(out.name + ".tmp")
    _run(["go", "build", "-trimpath", f"-ldflags={ldflags}", "-o", str(tmp), package],
         cwd=work, env=env, what=f"building {name}", log=log)
    tmp.rename(out)
    return out


def _module_replaces(module: str, version: str, env: dict[str, str], log: Path) -> list[str]:
    """A module's own ``replace`` lines that name another module version (not a local path), so
    a module requiring it resolves the same versions its authors build with."""
    out = subprocess.run(["go", "mod", "download", "-json", f"{module}@{version}"],
                         env=env, capture_output=True, text=True)
    if out.returncode != 0:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(out.stdout + out.stderr)
        raise TestbedError(f"could not download {module}@{version}: {out.stderr.strip()}")
    edit = subprocess.run(["go", "mod", "edit", "-json", json.loads(out.stdout)["GoMod"]],
                          env=env, capture_output=True, text=True, check=True)
    lines = []
    for rep in json.loads(edit.stdout).get("Replace") or []:
        old, new = rep["Old"], rep["New"]
        if not new.get("Version"):
            continue
        old_at = f"{old['Path']} {old['Version']}" if old.get("Version") else old["Path"]
        lines.append(f"replace {old_at} => {new['Path']} {new['Version']}")
    return lines


@dataclass(frozen=True)
class GeneratedSource:
    """Manifests controller-gen writes from a module's Go types and markers, as its project
    does: CRDs from the API types, webhook configurations from the webhook markers."""

    name: str
    module: str
    version: str
    #: The packages controller-gen reads (its ``paths``).
    packages: tuple[str, ...]
    #: controller-gen generators with the project's options (``crd:...``, ``webhook``).
    generators: tuple[str, ...]
    #: The files the test bed uses (CRDs are ``<group>_<plural>.yaml``); the rest stay cached.
    files: tuple[str, ...]


PODGROUP_SOURCE = GeneratedSource(
    name="scheduler-plugins", module="sigs.k8s.io/scheduler-plugins",
    version=SCHEDULER_PLUGINS_VERSION,
    packages=("sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1",),
    generators=("crd:crdVersions=v1",), files=("scheduling.x-k8s.io_podgroups.yaml",))
#: LWS's Makefile passes generateEmbeddedObjectMeta, without which the API server would prune
#: the labels and annotations of its Pod templates.
LWS_SOURCE = GeneratedSource(
    name="lws", module="sigs.k8s.io/lws", version=LWS_VERSION,
    packages=("sigs.k8s.io/lws/api/leaderworkerset/v1", "sigs.k8s.io/lws/pkg/webhooks"),
    generators=("crd:generateEmbeddedObjectMeta=true", "webhook"),
    files=("leaderworkerset.x-k8s.io_leaderworkersets.yaml", "manifests.yaml"))
#: As JobSet's Makefile (`manifests`) runs controller-gen: ``crd:generateEmbeddedObjectMeta=true``
#: on its API types (without it the API server prunes the metadata of the Jobs' Pod templates)
#: and ``webhook`` on its webhook markers (all in pkg/webhooks). Its ``rbac`` output is not
#: needed: the controller runs with the admin kubeconfig.
JOBSET_SOURCE = GeneratedSource(
    name="jobset", module="sigs.k8s.io/jobset", version=JOBSET_VERSION,
    packages=("sigs.k8s.io/jobset/api/jobset/v1alpha2", "sigs.k8s.io/jobset/pkg/webhooks"),
    generators=("crd:generateEmbeddedObjectMeta=true", "webhook"),
    files=("jobset.x-k8s.io_jobsets.yaml", "manifests.yaml"))


@dataclass(frozen=True)
class Manifests:
    #: CRDs to install.
    crds: list[Path]
    #: LWS's webhook configurations as controller-gen writes them (with a Service reference).
    lws_webhooks: Path
    #: JobSet's, the same way.
    jobset_webhooks: Path


def _controller_gen(bins: Path, logs: Path) -> Path:
    return _go_install(bins, logs, "controller-gen",
                       "sigs.k8s.io/controller-tools/cmd/controller-gen",
                       CONTROLLER_TOOLS_VERSION)


def _generate(src: GeneratedSource, bins: Path, logs: Path) -> dict[str, Path]:
    out = (cache_root() / "generated"
           / f"{src.name}-{src.version}-controller-gen-{CONTROLLER_TOOLS_VERSION}")
    wanted = {f: out / f for f in src.files}
    if all(f.exists() for f in wanted.values()):
        return wanted
    work = cache_root() / "build" / f"generate-{src.name}-{src.version}"
    work.mkdir(parents=True, exist_ok=True)
    env = _go_env(work)
    log = logs / f"generate-{src.name}-{src.version}.log"
    say(f"generating manifests of {src.module} {src.version} with controller-gen "
        f"{CONTROLLER_TOOLS_VERSION} (first run only)")
    replaces = _module_replaces(src.module, src.version, env, log)
    (work / "go.mod").write_text(
        f"module sunk.local/testbed/generate-{src.name}\n\ngo 1.25.0\n\n"
        f"require {src.module} {src.version}\n\n" + "\n".join(replaces) + "\n")
    (work / "tools.go").write_text(
        "//go:build tools\n\npackage tools\n\nimport (\n"
        + "".join(f'\t_ "{pkg}"\n' for pkg in src.packages) + ")\n")
    _run(["go", "mod", "tidy"], cwd=work, env=env, what=f"resolving {src.name} modules", log=log)
    tmp = out.with_name(out.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    controller_gen = _controller_gen(bins, logs)
    _run([str(controller_gen), *src.generators, f"paths={{{','.join(src.packages)}}}",
          f"output:dir={tmp}"], cwd=work, env=env, what=f"running controller-gen on {src.name}",
         log=log)
    missing = [f for f in src.files if not (tmp / f).exists()]
    if missing:
        raise TestbedError(f"controller-gen wrote no {', '.join(missing)} for {src.module}; "
                           f"it wrote: {', '.join(sorted(p.name for p in tmp.iterdir()))}")
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return wanted


def build_manifests() -> Manifests:
    """Generate (or find cached) what the test bed installs: scheduler-plugins' PodGroup CRD,
    LWS's and JobSet's CRDs and their webhook configurations."""
    bins = cache_root() / "bin"
    logs = cache_root() / "logs"
    bins.mkdir(parents=True, exist_ok=True)
    podgroup = _generate(PODGROUP_SOURCE, bins, logs)
    lws = _generate(LWS_SOURCE, bins, logs)
    jobset = _generate(JOBSET_SOURCE, bins, logs)
    return Manifests(crds=[*podgroup.values(), lws[LWS_SOURCE.files[0]],
                           jobset[JOBSET_SOURCE.files[0]]],
                     lws_webhooks=lws["manifests.yaml"], jobset_webhooks=jobset["manifests.yaml"])


def build_helm() -> Path:
    """Build (or find cached) helm alone: what the chart's tests and packaging need."""
    bins = cache_root() / "bin"
    logs = cache_root() / "logs"
    bins.mkdir(parents=True, exist_ok=True)
    return _go_install(bins, logs, "helm", "helm.sh/helm/v3/cmd/helm", HELM_VERSION,
                       f"-s -w -X helm.sh/helm/v3/internal/version.version={HELM_VERSION}")


def build_binaries(release: KubernetesRelease | None = None) -> Binaries:
    """Build (or find cached) every Go binary the test bed runs, Kubernetes at ``release``
    (default: :func:`wanted_kubernetes`'s, so helm's users build no other release)."""
    if release is None:
        release = kubernetes_release(wanted_kubernetes())
    bins = cache_root() / "bin"
    logs = cache_root() / "logs"
    bins.mkdir(parents=True, exist_ok=True)
    etcd = _build_main(bins, logs, "etcd", "go.etcd.io/etcd/server/v3", ETCD_VERSION,
                       "go.etcd.io/etcd/server/v3", "-s -w")
    kubernetes = _build_kubernetes(bins, logs, release)
    kwok = _go_install(bins, logs, "kwok", "sigs.k8s.io/kwok/cmd/kwok", KWOK_VERSION)
    helm = build_helm()
    lws = _build_main(bins, logs, "lws-controller", "sigs.k8s.io/lws", LWS_VERSION,
                      "sigs.k8s.io/lws/cmd",
                      f"-s -w -X sigs.k8s.io/lws/pkg/version.GitVersion={LWS_VERSION}")
    jobset = _build_main(bins, logs, "jobset-controller", "sigs.k8s.io/jobset", JOBSET_VERSION,
                         "sigs.k8s.io/jobset", jobset_ldflags())
    return Binaries(etcd=etcd, kube_apiserver=kubernetes["kube-apiserver"],
                    kube_controller_manager=kubernetes["kube-controller-manager"],
                    kubectl=kubernetes["kubectl"], kwok=kwok, helm=helm, lws=lws, jobset=jobset)


def jobset_ldflags() -> str:
    """What JobSet's Makefile stamps (its ``LD_FLAGS``): the version and the commit."""
    pkg = "sigs.k8s.io/jobset/pkg/version"
    return f"-s -w -X {pkg}.GitVersion={JOBSET_VERSION} -X {pkg}.GitCommit={JOBSET_COMMIT}"


def debian_mirror() -> str:
    """The Debian archive this machine's apt uses (or ``$SUNK_DEBIAN_MIRROR``)."""
    if env := os.environ.get("SUNK_DEBIAN_MIRROR"):
        return env
    sources = [*Path("/etc/apt/sources.list.d").glob("*.sources"), Path("/etc/apt/sources.list"),
               *Path("/etc/apt/sources.list.d").glob("*.list")]
    for src in sources:
        if not src.is_file():
            continue
        for uri in re.findall(r"(?:URIs:|^deb)\s+(?:\[[^]]*\]\s+)?(\S+)", src.read_text(), re.M):
            if uri.rstrip("/").endswith("/debian"):
                return str(uri)
    raise TestbedError("no Debian archive found in /etc/apt sources; set SUNK_DEBIAN_MIRROR")


def check_suite(suite: str) -> None:
    if suite not in SLURM_SUITES:
        raise TestbedError(f"unknown Slurm suite {suite!r}: choose one of "
                           + ", ".join(f"{s} (Slurm {v})" for s, v in SLURM_SUITES.items()))


def ensure_host_packages(*commands: tuple[str, str]) -> None:
    """Install, with apt, the Debian package of each (command, package) whose command is missing."""
    missing = [pkg for cmd, pkg in commands if shutil.which(cmd) is None]
    if not missing:
        return
    say(f"installing host packages: {' '.join(missing)}")
    log = cache_root() / "logs" / "apt.log"
    _run(["apt-get", "update"], what="apt-get update", log=log)
    _run(["apt-get", "install", "-y", "--no-install-recommends", *missing],
         env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"}, what="apt-get install", log=log)


def chroot_stamp(suite: str) -> str:
    """What a ready chroot was built with: its suite and packages. A cached chroot whose stamp
    differs (built before a package was added) is rebuilt, never used as it is."""
    return "\n".join([suite, *CHROOT_PACKAGES]) + "\n"


def _refuse_if_mounted(root: Path) -> None:
    """A chroot a test bed has mounted holds the host's /dev and /proc: never delete it."""
    if mounted := procs.mounts_under(root):
        raise TestbedError(f"the cached chroot {root} must be rebuilt but a test bed uses it "
                           f"(mounted: {', '.join(mounted)}); stop it first "
                           "(`python -m testbed down`)")


def build_chroot(suite: str) -> Path:
    """A Debian ``suite`` chroot with Slurm, munge, the JWT plugin, slurmdbd and MariaDB, built
    once per suite and package list."""
    check_suite(suite)
    root = cache_root() / f"chroot-{suite}"
    ready = root / ".sunk-ready"
    if ready.exists() and ready.read_text() == chroot_stamp(suite):
        return root
    if root.exists():
        _refuse_if_mounted(root)
        if ready.exists():
            say(f"the cached {suite} chroot was built with other packages than "
                f"{' '.join(CHROOT_PACKAGES)}: rebuilding it")
    ensure_host_packages(("debootstrap", "debootstrap"))
    tmp = root.with_name(root.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    say(f"building the Debian {suite} chroot with Slurm {SLURM_SUITES[suite]} and MariaDB "
        "(first run only: about two minutes)")
    _run(["debootstrap", "--variant=minbase", f"--include={','.join(CHROOT_PACKAGES)}",
          suite, str(tmp), debian_mirror()],
         what=f"debootstrap {suite}", log=cache_root() / "logs" / f"chroot-{suite}.log")
    # Daemons read their configuration from /run/slurm (a tmpfs per `up`); point the usual
    # places there so `sinfo`, `scontrol` and friends inside the chroot find it.
    for link, target in (("etc/slurm", "/run/slurm/etc"), ("etc/munge", "/run/munge-etc")):
        path = tmp / link
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        path.unlink(missing_ok=True)
        path.symlink_to(target)
    if root.exists():
        _refuse_if_mounted(root)
        shutil.rmtree(root)
    tmp.rename(root)
    (root / ".sunk-ready").write_text(chroot_stamp(suite))
    return root
