"""``python -m testbed up | down | status | build | env | kubectl ... | slurm ...``."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from testbed import build, cluster, demo
from testbed.errors import TestbedError


def _add_kubernetes(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kubernetes", choices=tuple(build.KUBERNETES_RELEASES),
                   default=build.wanted_kubernetes(),
                   help="Kubernetes release: " + ", ".join(
                       f"{n} ({r.version})" for n, r in build.KUBERNETES_RELEASES.items())
                   + f" (default: ${build.KUBERNETES_ENV} or {build.DEFAULT_KUBERNETES})")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m testbed",
                                description="sunk's local cluster: real kube-apiserver + etcd + "
                                            "kwok, and a real Slurm in a Debian chroot.")
    sub = p.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="build what is missing (cached), then start everything")
    up.add_argument("--nodes", type=int, default=8,
                    help="Kubernetes Nodes / Slurm nodes (8: two blocks of 4)")
    up.add_argument("--slurm-suite", default=build.DEFAULT_SUITE,
                    help="Debian suite of the Slurm chroot: "
                         + ", ".join(f"{s} (Slurm {v})" for s, v in build.SLURM_SUITES.items()))
    _add_kubernetes(up)
    up.add_argument("--kill-wait", type=int, default=30, help="Slurm KillWait in seconds (30)")
    up.add_argument("--apiserver-port", type=int, help="default: a free port")
    up.add_argument("--slurmrestd-port", type=int, help="default: a free port")
    up.add_argument("--slurmctld-port", type=int, help="default: a free port")
    up.add_argument("--no-accounting", dest="accounting", action="store_false",
                    help="no MariaDB and slurmdbd: no accounts or QOS enforced, and "
                         "preemption by partition priority instead of QOS")
    d = sub.add_parser("demo", help="up, then run sunk-scheduler with its dashboard and create "
                                    "the example Pods (examples/pods.yaml)")
    d.add_argument("--nodes", type=int, default=4)
    d.add_argument("--slurm-suite", default=build.DEFAULT_SUITE)
    _add_kubernetes(d)
    sub.add_parser("down", help="stop every process and remove every mount")
    sub.add_parser("status", help="what runs where")
    b = sub.add_parser("build", help="only build (or find cached) binaries and the chroot")
    b.add_argument("--slurm-suite", default=build.DEFAULT_SUITE)
    _add_kubernetes(b)
    sub.add_parser("env", help="shell exports for the running test bed (eval them)")
    k = sub.add_parser("kubectl", help="kubectl with the test bed's kubeconfig")
    k.add_argument("args", nargs=argparse.REMAINDER)
    s = sub.add_parser("slurm", help="run a Slurm command inside the chroot (sinfo, squeue, ...)")
    s.add_argument("args", nargs=argparse.REMAINDER)
    return p


def _running() -> cluster.Testbed:
    tb = cluster.Testbed.load()
    if tb is None or not tb.ready:
        raise TestbedError("the test bed is not up: run `python -m testbed up` first")
    return tb


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "up":
            cluster.up(node_count=args.nodes, suite=args.slurm_suite, kill_wait=args.kill_wait,
                       apiserver_port=args.apiserver_port, slurmrestd_port=args.slurmrestd_port,
                       slurmctld_port=args.slurmctld_port, accounting=args.accounting,
                       kubernetes=args.kubernetes)
            print(cluster.status())
        elif args.command == "demo":
            demo.run(node_count=args.nodes, suite=args.slurm_suite, kubernetes=args.kubernetes)
        elif args.command == "down":
            cluster.down()
        elif args.command == "status":
            print(cluster.status())
        elif args.command == "build":
            build.check_suite(args.slurm_suite)
            build.build_binaries(build.kubernetes_release(args.kubernetes))
            build.build_manifests()
            if os.geteuid() == 0:
                build.build_chroot(args.slurm_suite)
            build.say("binaries, manifests (and the chroot, as root) are built and cached in "
                      f"{build.cache_root()}")
        elif args.command == "env":
            tb = _running()
            print(f"export KUBECONFIG={tb.kubeconfig}")
            print(f"export SUNK_SLURM_API_BASE={tb.slurmrestd_url}")
            print(f"export SUNK_SLURM_AUTH_TOKEN_FILE={tb.path / 'slurm-token'}")
        elif args.command == "kubectl":
            tb = _running()
            kubectl = build.build_binaries(tb.release).kubectl
            return subprocess.call([str(kubectl), f"--kubeconfig={tb.kubeconfig}", *args.args])
        elif args.command == "slurm":
            tb = _running()
            if not args.args:
                raise TestbedError("name a Slurm command, e.g. `python -m testbed slurm sinfo`")
            return subprocess.call(tb.chroot_cmd(*args.args))
    except TestbedError as exc:
        print(f"testbed: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("testbed: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
