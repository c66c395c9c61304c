"""What the scheduling scenarios share: Pods to create, a watch that notes when each is bound,
the scheduler's own counters and the timings it logs at each binding."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

NAME = "sunk-bench"
NAMESPACE = "bench"


def pod(name: str, *, cpu: str = "1", memory: str = "100Mi",
        annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE,
                         "annotations": annotations or {}},
            "spec": {"schedulerName": NAME, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "c", "image": "busybox", "resources": {
                         "requests": {"cpu": cpu, "memory": memory}}}]}}


PREFIX = "sunk.coreweave.com/"


def unique(index: int, share: float) -> bool:
    """Whether Pod ``index`` of a mix is one of a kind: spread evenly, ``share`` of them."""
    return int((index + 1) * share) > int(index * share)


def mixed(name: str, index: int, share: float) -> dict[str, Any]:
    """Pod ``index`` of a mix where ``share`` of the Pods are each one of a kind, as from many
    users: annotations of their own (comment, priority, time limit, a preferred feature) and
    requests of their own, so the policy engine's memo has seen none of them; the others are
    all alike (a memo hit after the first). Every one fits any node of the bed, and none waits
    on another: the rate measured is the scheduler's."""
    if not unique(index, share):
        return pod(name)
    return pod(name, cpu=f"{500 + index % 500}m", memory=f"{64 + index % 64}Mi", annotations={
        PREFIX + "comment": f"run {index} of user-{index % 97}",
        PREFIX + "priority": str(1000 + index),
        PREFIX + "timeout": str(30 + index % 30),
        PREFIX + "prefer": ("h100", "a100")[index % 2],
        PREFIX + "exclusive": ("none", "ok")[index % 2]})


async def create(kube: httpx.AsyncClient, manifest: dict[str, Any]) -> None:
    r = await kube.post(f"/api/v1/namespaces/{NAMESPACE}/pods", json=manifest)
    r.raise_for_status()


def pct(values: Iterable[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(values: list[float]) -> dict[str, float]:
    """p50, p99 and max of a list of seconds (NaN when empty)."""
    return {"count": len(values), "p50": pct(values, 0.5), "p99": pct(values, 0.99),
            "max": max(values, default=float("nan"))}


class BoundWatch:
    """When each Pod of the namespace was first seen bound (a watch: the measurement must not
    load the API server with lists)."""

    def __init__(self, kube: httpx.AsyncClient) -> None:
        self.kube = kube
        self.bound: dict[str, float] = {}
        self.gone: set[str] = set()
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> BoundWatch:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
                await self._task

    async def _run(self) -> None:
        version = ""
        while True:
            params = {"watch": "true", "timeoutSeconds": "600", "allowWatchBookmarks": "true"}
            if version:
                params["resourceVersion"] = version
            async with self.kube.stream("GET", f"/api/v1/namespaces/{NAMESPACE}/pods",
                                        params=params, timeout=None) as r:
                async for line in r.aiter_lines():
                    event = json.loads(line)
                    obj = event["object"]
                    version = obj["metadata"].get("resourceVersion", version)
                    if event["type"] == "BOOKMARK":
                        continue
                    name = obj["metadata"]["name"]
                    if event["type"] == "DELETED":
                        self.gone.add(name)
                    elif obj["spec"].get("nodeName"):
                        self.bound.setdefault(name, time.monotonic())
                    self._changed.set()

    async def wait(self, names: Iterable[str], within: float, *, what: str = "bound") -> None:
        """Until every Pod of ``names`` is bound (or gone, with ``what="gone"``)."""
        wanted = set(names)
        seen: set[str] | dict[str, float] = self.bound if what == "bound" else self.gone
        deadline = time.monotonic() + within
        while missing := len(wanted.difference(seen)):
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{missing} of {len(wanted)} Pods not {what} "
                                   f"after {within:.0f}s")
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(left, 1.0))


_SAMPLE = re.compile(r'^(sunk_(?:slurm|kube)_requests_total|sunk_hook_calls_total)'
                     r'\{(.*)\} ([0-9.e+-]+)$')


async def scheduler_requests(metrics_url: str) -> dict[str, float]:
    """The scheduler's own request counters: slurmrestd calls, API server calls, hook calls."""
    async with httpx.AsyncClient() as client:
        text = (await client.get(metrics_url + "/metrics")).text
    counts: dict[str, float] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m is None:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m[2]))
        if m[1] == "sunk_slurm_requests_total":
            what = f"slurmrestd {labels['call']}"
        elif m[1] == "sunk_kube_requests_total":
            what = f"API server {labels['verb']} {labels['resource']}"
        else:
            what = f"hook {labels['hook']} ({labels['status']})"
        counts[what] = counts.get(what, 0.0) + float(m[3])
    return counts


async def scheduler_gauge(metrics_url: str, name: str) -> float | None:
    """One of the scheduler's unlabelled gauges now (None: it has no such metric)."""
    async with httpx.AsyncClient() as client:
        text = (await client.get(metrics_url + "/metrics")).text
    for family in text_string_to_metric_families(text):
        if family.name == name and family.samples:
            return float(family.samples[0].value)
    return None


def difference(before: dict[str, float], after: dict[str, float], per: int
               ) -> dict[str, float]:
    return {k: round((v - before.get(k, 0.0)) / per, 3) for k, v in sorted(after.items())
            if v - before.get(k, 0.0) > 0}


_BOUND = re.compile(r"pod \S+/(\S+): bound to \S+ \(Slurm node \S+\) ([0-9.]+)s after job \d+ "
                    r"started \(([0-9.]+)s after its submission\)")


def log_offset(log: Path) -> int:
    return log.stat().st_size


def bind_timings(log: Path, offset: int) -> dict[str, tuple[float, float]]:
    """Pod name -> (its job's start to its binding, its job's submission to its start), as
    the scheduler logged them since ``offset``."""
    found: dict[str, tuple[float, float]] = {}
    with log.open() as f:
        f.seek(offset)
        for line in f:
            if (m := _BOUND.search(line)) is not None:
                found[m[1]] = (float(m[2]), float(m[3]))
    return found


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def rss_peak_mib(pid: int) -> float:
    """The most the process has held resident since it started (the kernel's high-water
    mark): whether the RSS now is a burst's remains or what the process keeps."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def open_sockets(pid: int) -> int:
    """The process's open sockets: its listeners, watches and pooled connections (each
    pooled TLS connection keeps buffers)."""
    fds = Path(f"/proc/{pid}/fd")
    count = 0
    for fd in fds.iterdir():
        with contextlib.suppress(OSError):  # closed while counted
            count += os.readlink(fd).startswith("socket:")
    return count


def cpu_seconds(pid: int) -> float:
    """The process's user and system CPU seconds so far."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_wait_seconds(pid: int) -> float:
    """How long the process's main thread (the scheduler's event loop) has been ready to run
    but waiting for a CPU, so far (the kernel's schedstat): on the 2-core bed, the share of a
    slow answer that is the machine's load rather than the scheduler's own work."""
    fields = Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()
    return int(fields[1]) / 1e9


_PAUSES = {"sunk_gc_pause_seconds": "gc_full", "sunk_event_loop_lag_seconds": "loop_lag",
           "sunk_workqueue_wait_seconds": "queue_wait"}


async def pauses(metrics_url: str) -> dict[str, dict[str, float]]:
    """The scheduler's pause histograms so far: full garbage collections, event-loop lag and
    how long Pods waited in the work queue for a worker, each as its count, total seconds and
    count above each bucket's bound."""
    async with httpx.AsyncClient() as client:
        text = (await client.get(metrics_url + "/metrics")).text
    found: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        name = _PAUSES.get(family.name)
        if name is None:
            continue
        for sample in family.samples:
            if family.name == "sunk_gc_pause_seconds" and sample.labels.get("generation") != "2":
                continue
            if family.name == "sunk_workqueue_wait_seconds" and sample.labels.get(
                    "queue") != "pods":
                continue
            into = found.setdefault(name, {})
            if sample.name.endswith("_count"):
                into["count"] = sample.value
            elif sample.name.endswith("_sum"):
                into["seconds"] = sample.value
            elif sample.name.endswith("_bucket") and sample.labels["le"] != "+Inf":
                into[f"le_{sample.labels['le']}"] = sample.value
    return found


def pauses_between(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]
                   ) -> dict[str, dict[str, float]]:
    """What happened between two :func:`pauses`: count, seconds, and how many were longer
    than 0.1 and 0.25 s."""
    out = {}
    for name, now in after.items():
        was = before.get(name, {})

        def delta(key: str, now: dict[str, float] = now, was: dict[str, float] = was) -> float:
            return now.get(key, 0.0) - was.get(key, 0.0)
        count = delta("count")
        out[name] = {"count": count, "seconds": round(delta("seconds"), 3),
                     "over_0.1s": count - delta("le_0.1"), "over_0.25s": count - delta("le_0.25")}
    return out
