"""``kubectl sunk``: what sunk says of Pods and Nodes, read from the Kubernetes API alone.

    kubectl sunk why POD [-n NAMESPACE]     the Pod's job, why it waits, its Events, its Node
    kubectl sunk jobs [-n NAMESPACE | -A]   Pods with their jobs, like squeue for Pods
    kubectl sunk nodes                      Nodes: sunk's lock, Slurm's drain and its reason

It reads with the user's kubeconfig, so the user's RBAC applies: a namespace they may not read
shows nothing. What it says of Slurm is what sunk wrote on the Pods and Nodes (the job-id
annotation, the PodScheduled condition, Events, the lock taint, the drain annotations): it
needs no Slurm credential. Installed with the package as ``kubectl-sunk``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sunk import kube, objects
from sunk.plans import waiting
from sunk.plans.placement import LOCK_TAINT
from sunk.settings import Settings

Obj = dict[str, Any]
#: The scheduler's annotation prefix, as it defaults (the chart's ``annotationPrefix``).
PREFIX: str = Settings.model_fields["annotation_prefix"].default


def scheduled(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    """The Pod's PodScheduled condition ({} if it has none)."""
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == "PodScheduled":
            return condition
    return {}


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Columns as kubectl prints them: upper-case headers, left-aligned, three spaces apart."""
    rows = [list(header), *[list(r) for r in rows]]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join("   ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True))
                     .rstrip() for r in rows) + "\n"


def job_row(pod: Mapping[str, Any], prefix: str = PREFIX) -> list[str]:
    """One Pod as ``jobs`` lists it: namespace, name, job, state, Slurm's reason, expected
    start, Node (bound, or nominated in parentheses)."""
    typed = objects.pod(pod)
    meta, condition = typed.metadata, scheduled(pod)
    said = waiting.read_message(str(condition.get("message") or ""))
    if typed.spec.node_name:
        state = "Bound"
    elif meta.annotations.get(prefix + "rejected"):
        state = "Rejected"
    else:
        state = str(condition.get("reason") or "Pending")
    nominated = str((pod.get("status") or {}).get("nominatedNodeName") or "")
    node = typed.spec.node_name or (f"({nominated})" if nominated else "")
    return [meta.namespace, meta.name, meta.annotations.get(prefix + "job-id", ""), state,
            said.reason if not typed.spec.node_name else "", said.start, node]


def jobs_table(pods: Iterable[Mapping[str, Any]], prefix: str = PREFIX) -> str:
    """The Pods sunk handles (its job id, its rejection or its condition on them), oldest
    first."""
    marks = {prefix + "job-id", prefix + "rejected"}
    ours = sorted(((meta.creation_timestamp, meta.key), p) for p in pods
                  if marks.intersection((meta := objects.pod(p).metadata).annotations)
                  or waiting.is_ours(str(scheduled(p).get("message") or "")))
    return table(("NAMESPACE", "NAME", "JOB", "STATE", "REASON", "EXPECTED START", "NODE"),
                 (job_row(p, prefix) for _, p in ours))


def node_row(node: Mapping[str, Any], prefix: str = PREFIX) -> list[str]:
    typed = objects.node(node)
    lock = next((f"locked ({t.get('effect')})" for t in typed.spec.taints
                 if t.get("key") == LOCK_TAINT), "")
    annotations = typed.metadata.annotations
    return [typed.metadata.name, lock or "-", annotations.get(prefix + "slurm-state", "") or "-",
            annotations.get(prefix + "slurm-reason", ""),
            "yes" if typed.spec.unschedulable else ""]


def nodes_table(nodes: Iterable[Mapping[str, Any]], prefix: str = PREFIX) -> str:
    return table(("NODE", "LOCK", "SLURM", "REASON", "CORDONED"),
                 (node_row(n, prefix) for n in sorted(
                     nodes, key=lambda n: objects.node(n).metadata.name)))


def why_text(pod: Mapping[str, Any], events: Sequence[Mapping[str, Any]],
             node: Mapping[str, Any] | None, node_error: str = "", prefix: str = PREFIX) -> str:
    """``why``: the Pod's job, its condition, its Node and its lock, its newest Events."""
    typed = objects.pod(pod)
    condition = scheduled(pod)
    annotations = typed.metadata.annotations
    lines = [f"Pod:        {typed.metadata.key}",
             f"Job:        {annotations.get(prefix + 'job-id') or 'none yet'}"]
    if annotations.get(prefix + "rejected"):
        lines.append(f"Rejected:   {annotations[prefix + 'rejected']}")
    if condition:
        lines.append(f"Scheduled:  {condition.get('status')} ({condition.get('reason')}, since "
                     f"{condition.get('lastTransitionTime')})")
        if condition.get("message"):
            lines.append(f"Why:        {condition['message']}")
    nominated = (pod.get("status") or {}).get("nominatedNodeName")
    node_name = typed.spec.node_name or nominated or ""
    if node_name:
        lines.append(f"Node:       {node_name}" + ("" if typed.spec.node_name else
                                                    " (nominated: where Slurm plans it)"))
        if node is not None:
            _, lock, slurm, reason, cordoned = node_row(node, prefix)
            lines.append(f"Node lock:  {lock}; Slurm: {slurm}{f' ({reason})' if reason else ''}"
                         + ("; cordoned" if cordoned else ""))
        elif node_error:
            lines.append(f"Node lock:  not readable ({node_error})")
    lines.append("Events:" if events else "Events:     none")
    for event in sorted(events, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime")
                                                   or ""))[-10:]:
        lines.append(f"  {event.get('lastTimestamp') or event.get('eventTime') or ''}  "
                     f"{event.get('type')}  {event.get('reason')}: {event.get('message')}")
    return "\n".join(lines) + "\n"


async def _items(api: kube.Client, url: str, namespace: str | None = None,
                 **params: str) -> list[Obj]:
    found = await api.request("GET", url, namespace=namespace, params=params or None)
    return [i for i in found.get("items") or [] if isinstance(i, dict)]


async def _why(api: kube.Client, namespace: str, name: str, prefix: str) -> str:
    pod = await api.request("GET", f"pods/{name}", namespace=namespace)
    uid = objects.pod(pod).metadata.uid
    events = await _items(api, "events", namespace, fieldSelector=f"involvedObject.uid={uid}")
    typed = objects.pod(pod)
    node_name = typed.spec.node_name or str((pod.get("status") or {}).get("nominatedNodeName")
                                            or "")
    node, node_error = None, ""
    if node_name:
        try:
            node = await api.request("GET", f"nodes/{node_name}")
        except kube.KubeError as exc:  # a user who may not read Nodes still gets the rest
            node_error = f"HTTP {exc.status}" if exc.status else str(exc)
    return why_text(pod, events, node, node_error, prefix)


async def _run(args: argparse.Namespace) -> str:
    credentials = await kube.load_credentials(args.kubeconfig)
    api = kube.Client(credentials)
    namespace = args.namespace or getattr(credentials, "namespace", None) or "default"
    try:
        prefix = args.annotation_prefix
        if args.command == "why":
            return await _why(api, namespace, args.pod, prefix)
        if args.command == "jobs":
            return jobs_table(await _items(api, "pods", None if args.all_namespaces
                                           else namespace), prefix)
        return nodes_table(await _items(api, "nodes"), prefix)
    finally:
        await kube.close(api)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kubectl sunk", description=__doc__.split("\n\n")[0])
    p.add_argument("--kubeconfig", type=Path, default=None,
                   help="the kubeconfig (default: $KUBECONFIG, then ~/.kube/config)")
    p.add_argument("-n", "--namespace", default=None,
                   help="the namespace (default: the kubeconfig context's)")
    p.add_argument("--annotation-prefix", default=PREFIX,
                   help=f"the scheduler's annotation prefix (default: {PREFIX})")
    sub = p.add_subparsers(dest="command", required=True)
    why = sub.add_parser("why", help="why a Pod waits: its job, condition, Node and Events")
    why.add_argument("pod")
    why.add_argument("-n", "--namespace", default=argparse.SUPPRESS)
    jobs = sub.add_parser("jobs", help="the Pods sunk handles, with their jobs (squeue-like)")
    jobs.add_argument("-n", "--namespace", default=argparse.SUPPRESS)
    jobs.add_argument("-A", "--all-namespaces", action="store_true")
    sub.add_parser("nodes", help="Nodes: sunk's lock, Slurm's drain state and reason")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    args.all_namespaces = getattr(args, "all_namespaces", False)
    try:
        sys.stdout.write(asyncio.run(_run(args)))
    except kube.KubeError as exc:
        what = {403: "forbidden (your RBAC does not allow it)", 404: "not found"}.get(
            exc.status, str(exc))
        print(f"kubectl sunk {args.command}: {what}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
