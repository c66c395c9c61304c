"""Write Slurm's ``topology.conf`` (topology/block) from the live cluster's Node labels.

    python -m sunk.writetopology --block-label nvidia.com/gpu.clique \\
        --slurmd-namespace slurm [--output /etc/slurm/topology.conf]

Each Slurm node's block is the value of ``--block-label`` on the Kubernetes Node that hosts it
(through its slurmd Pod, as the scheduler maps them). Run it where slurmctld reads its
configuration (an init container, a CronJob writing a ConfigMap), then ``scontrol reconfigure``.
Slurm runs no job on a node outside every block: a node without the label is reported on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from sunk import kube, objects
from sunk.model.nodeindex import NodeIndex
from sunk.plans import topology


async def pairs(api: kube.Client, *, label: str, slurmd_namespace: str | None,
                slurmd_selector: str) -> list[tuple[str, str | None]]:
    """(Slurm node, its Node's block label value or None), in Slurm node name order."""
    nodes = await api.request("GET", "nodes")
    slurmd = await api.request("GET", "pods", namespace=slurmd_namespace,
                               params={"labelSelector": slurmd_selector})
    labels = {meta.name: meta.labels
              for meta in (objects.node(n).metadata for n in nodes.get("items") or [])}
    index = NodeIndex.build(slurmd.get("items") or [])
    return [(slurm_node, labels.get(k8s_node, {}).get(label))
            for slurm_node, k8s_node in sorted(index.to_k8s.items())]


async def _run(args: argparse.Namespace) -> int:
    api = await kube.connect(args.kubeconfig)
    try:
        found = await pairs(api, label=args.block_label, slurmd_namespace=args.slurmd_namespace,
                            slurmd_selector=args.slurmd_label_selector)
    finally:
        await kube.close(api)
    if missing := [node for node, block in found if block is None]:
        print(f"writetopology: {len(missing)} Slurm node(s) whose Node has no "
              f"{args.block_label} label are in no block (Slurm runs no job there): "
              + ", ".join(missing[:10]), file=sys.stderr)
    text = topology.topology_conf(found)
    if not text:
        print(f"writetopology: no Node has the label {args.block_label}", file=sys.stderr)
        return 1
    if args.output is None:
        sys.stdout.write(text)
    else:  # whole or not at all: slurmctld may read it at any moment
        partial = args.output.with_name(args.output.name + ".tmp")
        partial.write_text(text)
        os.replace(partial, args.output)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sunk.writetopology", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kubeconfig", type=Path, default=None,
                   help="default: in-cluster, then $KUBECONFIG, then ~/.kube/config")
    p.add_argument("--block-label", default=topology.BLOCK_LABEL,
                   help=f"the Node label naming each node's block (default {topology.BLOCK_LABEL})")
    p.add_argument("--slurmd-namespace", default=None)
    p.add_argument("--slurmd-label-selector", default="app.kubernetes.io/name=slurmd")
    p.add_argument("--output", type=Path, default=None, help="default: standard output")
    try:
        return asyncio.run(_run(p.parse_args(argv)))
    except (kube.KubeError, OSError, ValueError) as exc:  # no credentials, API, output file
        print(f"writetopology: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
