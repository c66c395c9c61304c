"""Every scheduling benchmark, one command; each run writes a record under
``benchmarks/results/`` (``--json FILE`` elsewhere), and ``python -m benchmarks.report``
makes docs/benchmarks.md's figures from them.

    python -m benchmarks.scheduling --scenario saturate [--pods 400] [--profile]
    python -m benchmarks.scheduling --scenario open-loop [--rates 2,5,10 --seconds 60]
    python -m benchmarks.scheduling --scenario scale [--steps 100,1000 --pending 10000]
    python -m benchmarks.scheduling --scenario gang [--sizes 2,4,8,16 --gangs 16]

open-loop: :mod:`benchmarks.openloop`; scale: :mod:`benchmarks.scale`; gang:
:mod:`benchmarks.gangs`. saturate, below: Pods bound per second through sunk, against raw
Slurm in the same run.

1. Baseline: the same number of placeholder jobs submitted straight to slurmrestd (8 at a
   time), timed until every job's script has started: it appends ": started" to ``extra``,
   then reports it through its ``started`` hook, here answered by the benchmark itself.
2. sunk: that many Pods created through the API server (8 at a time), timed until every Pod is
   bound. A Pod is bound only after its own placeholder job has started, so the baseline is
   the ceiling: sunk adds the API server's work, kwok's, and its own.

Both phases run the project's prolog (node locks through the scheduler's hook API) exactly as
the test bed's Slurm is configured. Needs root and the test bed (started if none is up).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from benchmarks import cpu, gangs, openloop, results, scale
from benchmarks import pods as pods_module
from benchmarks import report as report_module
from benchmarks.bed import StartedReports, bounded, drain, kube_client, on_bed
from benchmarks.pods import difference, scheduler_requests
from testbed import cluster
from testbed.errors import TestbedError
from testbed.scheduler import RunningScheduler

NAME = "sunk-bench"
NAMESPACE = "bench"


@dataclass
class Phase:
    name: str
    count: int
    wall: float
    latencies: list[float]
    #: CPU seconds per part of the test bed during the phase (:mod:`benchmarks.cpu`).
    cpu: dict[str, float] = field(default_factory=dict)
    #: API server requests during the phase, by verb and resource.
    api_requests: dict[str, float] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.count / self.wall

    def pct(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def line(self) -> str:
        return (f"| {self.name} | {self.count} | {self.wall:.1f} | {self.rate:.1f} | "
                f"{self.pct(0.5):.2f} | {self.pct(0.99):.2f} |")


TIMEOUT = 300.0


async def _within(task: asyncio.Task[None], done: dict[Any, float], count: int,
                  what: str) -> None:
    try:
        await asyncio.wait_for(task, TIMEOUT)
    except TimeoutError as exc:
        raise TestbedError(f"only {len(done)} of {count} {what} after {TIMEOUT:.0f}s") from exc


async def baseline(slurm: httpx.AsyncClient, count: int, reports: StartedReports) -> Phase:
    submitted: dict[int, float] = {}
    started = reports.started
    t0, cpu0 = time.monotonic(), cpu.sample()
    run_id = int(time.time())

    def submit(i: int) -> Any:
        async def call() -> None:
            job_id, at = await reports.submit(slurm, f"bench-{i}",
                                              f"bench-baseline-{run_id}-{i}")
            submitted[job_id] = at

        return call

    await bounded([submit(i) for i in range(count)])
    await _within(asyncio.create_task(reports.wait_for(count)), started, count,
                  "placeholder jobs started")
    latencies = [started[j] - submitted[j] for j in submitted]
    return Phase("raw Slurm (submit to started)", count, max(started.values()) - t0, latencies,
                 cpu.used(cpu0, cpu.sample()))


async def _api_requests(kube: httpx.AsyncClient) -> dict[str, float]:
    """The API server's request counters (``apiserver_request_total``) by verb and resource."""
    counts: dict[str, float] = {}
    for line in (await kube.get("/metrics")).text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(part.split("=", 1) for part in
                      line[line.index("{") + 1:line.rindex("}")].replace('"', "").split(","))
        what = f"{labels.get('verb')} {labels.get('resource')}" + (
            f"/{labels['subresource']}" if labels.get("subresource") else "")
        counts[what] = counts.get(what, 0.0) + float(line.rsplit(" ", 1)[1])
    return counts


async def through_sunk(kube: httpx.AsyncClient, count: int,
                      profiled: RunningScheduler | None = None,
                      unique_share: float = 0.5) -> Phase:
    created: dict[str, float] = {}
    bound: dict[str, float] = {}
    t0, cpu0 = time.monotonic(), cpu.sample()

    def create(i: int) -> Any:
        async def call() -> None:
            name = f"p-{i:04d}"
            pod = pods_module.mixed(name, i, unique_share)
            created[name] = time.monotonic()
            r = await kube.post(f"/api/v1/namespaces/{NAMESPACE}/pods", json=pod)
            r.raise_for_status()

        return call

    requests0 = await _api_requests(kube)
    if profiled is not None:
        profiled.process.send_signal(signal.SIGUSR1)
    watcher = asyncio.create_task(_watch_bound(kube, bound, count))
    await bounded([create(i) for i in range(count)])
    await _within(watcher, bound, count, "Pods bound")
    if profiled is not None:
        profiled.process.send_signal(signal.SIGUSR2)
    latencies = [bound[n] - created[n] for n in created]
    phase = Phase("sunk (Pod created to bound)", count, max(bound.values()) - t0, latencies,
                  cpu.used(cpu0, cpu.sample()))
    requests1 = await _api_requests(kube)
    phase.api_requests = {k: v - requests0.get(k, 0.0) for k, v in requests1.items()
                          if v - requests0.get(k, 0.0) >= 1}
    return phase


async def _watch_bound(kube: httpx.AsyncClient, bound: dict[str, float], count: int) -> None:
    """A watch, not a polled list: the measurement must not load the API server."""
    while len(bound) < count:
        params = {"watch": "true", "timeoutSeconds": "600"}
        async with kube.stream("GET", f"/api/v1/namespaces/{NAMESPACE}/pods",
                               params=params, timeout=None) as r:
            async for line in r.aiter_lines():
                pod = json.loads(line)["object"]
                if pod["spec"].get("nodeName"):
                    bound.setdefault(pod["metadata"]["name"], time.monotonic())
                if len(bound) >= count:
                    return


async def run(tb: cluster.Testbed, pods: int, running: RunningScheduler,
              profile: bool = False, unique_share: float = 0.5
              ) -> tuple[Phase, Phase, dict[str, float]]:
    async with httpx.AsyncClient(base_url=tb.slurmrestd_url, headers=tb.slurm_headers(),
                                 timeout=60) as slurm, kube_client(tb) as kube:
        await kube.post("/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace",
                                                     "metadata": {"name": NAMESPACE}})
        await drain(tb, slurm, kube)
        print(f"baseline: {pods} placeholder jobs straight to slurmrestd ...", file=sys.stderr)
        async with StartedReports(tb) as reports:
            raw = await baseline(slurm, pods, reports)
            await drain(tb, slurm, kube)
        print(f"sunk: {pods} Pods through the API server ({unique_share:.0%} one of a kind) "
              "...", file=sys.stderr)
        before = await scheduler_requests(running.url("metrics"))
        ours = await through_sunk(kube, pods, running if profile else None, unique_share)
        requests = difference(before, await scheduler_requests(running.url("metrics")), pods)
        print(f"sunk: {pods} Pods bound; cleaning up ...", file=sys.stderr)
        await kube.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods",
                           params={"gracePeriodSeconds": "0"})
        await drain(tb, slurm, kube)
        return raw, ours, requests


KUBE_PARTS = ("kube-apiserver", "etcd", "kwok")


def _share(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"a share from 0 to 1, not {text}")
    return value


def _per_item(phase: Phase, part: str) -> float:
    return 1000 * phase.cpu.get(part, 0.0) / phase.count


def saturate_figures(raw: Phase, ours: Phase, requests: dict[str, float]) -> dict[str, Any]:
    ratio = ours.rate / raw.rate
    scheduler_extra = _per_item(ours, "sunk-scheduler") - _per_item(raw, "sunk-scheduler")
    ceiling = _per_item(raw, "machine total") / max(
        1e-9, _per_item(ours, "machine total") - scheduler_extra)

    def phase(p: Phase) -> dict[str, Any]:
        return {"count": p.count, "wall": round(p.wall, 2), "per_s": round(p.rate, 2),
                "p50": round(p.pct(0.5), 3), "p99": round(p.pct(0.99), 3),
                "cpu_ms": {k: round(1000 * v / p.count, 2) for k, v in p.cpu.items()}}

    return {"raw": phase(raw), "sunk": phase(ours), "ratio": round(ratio, 3),
            "ceiling": round(ceiling, 3), "ratio_to_ceiling": round(ratio / ceiling, 3),
            "scheduler_cpu_ms_per_pod": round(_per_item(ours, "sunk-scheduler"), 2),
            "apiserver_requests_per_pod": {k: round(v / ours.count, 3) for k, v in
                                           ours.api_requests.items() if v / ours.count >= 0.01},
            "scheduler_requests_per_pod": requests}


def render_saturate(rec: results.Record) -> str:
    f = rec["figures"]
    raw, ours = f["raw"], f["sunk"]
    lines = [
        "| phase | count | wall s | per s | p50 s | p99 s |", "|---|---|---|---|---|---|",
        *(f"| {name} | {p['count']} | {p['wall']:.1f} | {p['per_s']:.1f} | {p['p50']:.2f} | "
          f"{p['p99']:.2f} |" for name, p in (("raw Slurm (submit to started)", raw),
                                               ("sunk (Pod created to bound)", ours))),
        "",
        f"- **sunk-scheduler CPU per Pod: {f['scheduler_cpu_ms_per_pod']:.1f} ms** "
        "(target 5 ms or less)",
        f"- Pods bound per second / raw jobs started per second: {f['ratio']:.2f}; with a "
        f"scheduler that cost nothing it could reach {f['ceiling']:.2f}; "
        f"**ratio to that ceiling: {f['ratio_to_ceiling']:.3f}** (target 0.97 or more)",
        "", "| CPU per job or Pod (ms) | raw Slurm | sunk |", "|---|---|---|",
        *(f"| {part} | {raw['cpu_ms'].get(part, 0):.1f} | {ours['cpu_ms'].get(part, 0):.1f} |"
          for part in sorted(set(raw["cpu_ms"]) | set(ours["cpu_ms"]),
                             key=lambda x: -ours["cpu_ms"].get(x, 0))),
        "", "| the scheduler's requests in the sunk phase (its own counters; a hook's: the calls "
        "Slurm's scripts made to it) | per Pod |", "|---|---|",
        *(f"| {k} | {v:.2f} |" for k, v in sorted(
            f["scheduler_requests_per_pod"].items(), key=lambda kv: -kv[1]) if v >= 0.01),
    ]
    return "\n".join(lines)


def _bed_versions(tb: cluster.Testbed) -> dict[str, str]:
    return {"slurm": "24.11", "kubernetes": tb.release.version.lstrip("v"), "debian": tb.suite}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.scheduling", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenario", choices=("saturate", "open-loop", "scale", "gang"),
                   default="saturate")
    p.add_argument("--nodes", type=int, help="test bed nodes (default: 100; 32 for gang)")
    results.add_json_argument(p)
    p.add_argument("--pods", type=int, default=400, help="saturate: Pods (and raw jobs)")
    p.add_argument("--unique-share", type=_share, default=0.5,
                   help="saturate, open-loop: the share of Pods each one of a kind (their own "
                        "annotations and requests, as from many users; the rest alike)")
    p.add_argument("--profile", action="store_true",
                   help="saturate: profile the scheduler's CPU in the sunk phase "
                        "(sunk.runtime.profiling; written to /tmp/sunk-scheduler-<pid>.prof); "
                        "scale: "
                        "in each idle window (/tmp/sunk-scheduler-idle-<jobs>.prof)")
    p.add_argument("--rates", default="2,5,10", help="open-loop: per second")
    p.add_argument("--seconds", type=float, default=60, help="open-loop: per rate and phase")
    p.add_argument("--lifetime", type=float, default=5,
                   help="open-loop: seconds a job or Pod lives once started or bound")
    p.add_argument("--steps", default="100,1000", help="scale: running Pods at each step")
    p.add_argument("--pending", type=int, default=10_000, help="scale: pending Pods on top")
    p.add_argument("--probe", type=int, default=50, help="scale: Pods bound at each step")
    p.add_argument("--quiet", type=float, default=30, help="scale: idle seconds measured")
    p.add_argument("--gangs", type=int, default=16, help="gang: gangs per size")
    p.add_argument("--sizes", default="2,4,8,16", help="gang: gang sizes")
    args = p.parse_args(argv)
    args.nodes = args.nodes or (32 if args.scenario == "gang" else 100)
    with cluster.exclusive():
        return _main(args, argv)


async def _scenario(args: argparse.Namespace, tb: cluster.Testbed,
                    running: RunningScheduler) -> tuple[dict[str, Any], list[results.Plot]]:
    if args.scenario == "saturate":
        raw, ours, requests = await run(tb, args.pods, running, args.profile, args.unique_share)
        return {**saturate_figures(raw, ours, requests), "unique_share": args.unique_share}, []
    if args.scenario == "open-loop":
        rates = [float(r) for r in args.rates.split(",")]
        return await openloop.run(tb, running, rates, args.seconds, args.lifetime,
                                  args.unique_share), []
    if args.scenario == "scale":
        steps = [int(n) for n in args.steps.split(",")]
        figures = await scale.run(tb, running, steps, args.pending, args.probe, args.quiet,
                                  args.profile)
        return figures, scale.plots(figures)
    sizes = [int(n) for n in args.sizes.split(",")]
    done = await gangs.run(tb, sizes, args.gangs, running.log, running.url("metrics"))
    return gangs.figures(done), []


def _main(args: argparse.Namespace, argv: list[str] | None) -> int:
    measured = results.commit()  # the code measured: a commit made during the run is not it
    try:
        figures, plots = on_bed(args.nodes, NAME,
                                lambda tb, running: _with_versions(args, tb, running),
                                extra=scale.SCHEDULER_FLAGS if args.scenario == "scale" else None)
    except TestbedError as exc:
        print(f"benchmark: error: {exc}", file=sys.stderr)
        return 1
    versions = figures.pop("_versions")
    rec = results.record(args.scenario, figures=figures, bed={"nodes": args.nodes},
                         extra_versions=versions, argv=argv, module="benchmarks.scheduling",
                         plots=plots)
    rec["versions"]["commit"] = measured
    path = results.save(rec, args.json)
    print(report_module.render(rec))
    print(f"written to {path}; `python -m benchmarks.report` puts it in docs/benchmarks.md",
          file=sys.stderr)
    return 0


async def _with_versions(args: argparse.Namespace, tb: cluster.Testbed,
                         running: RunningScheduler) -> tuple[dict[str, Any], list[results.Plot]]:
    figures, plots = await _scenario(args, tb, running)
    return {**figures, "_versions": _bed_versions(tb)}, plots


report_module.register("saturate", render_saturate)
report_module.register("open-loop", lambda rec: openloop.render(rec["figures"]))
report_module.register("scale", lambda rec: scale.render(rec["figures"]))
report_module.register("gang", lambda rec: gangs.render(rec["figures"]))


if __name__ == "__main__":
    sys.exit(main())
