"""Scale: one scheduler with thousands of jobs in Slurm.

Steps (``--steps``, default 100 and 1,000 running Pods, then ``--pending`` more that wait):

1. running Pods (3 CPUs each: Slurm packs them, ten to a 32-CPU node, so at 1,000 every node
   runs ten and has two CPUs left) are created and bound, up to each step's count;
2. then ``pending`` Pods whose jobs want a node to themselves (``exclusive: "true"``, 1 CPU in
   Kubernetes' view): every node already runs Pods, so their jobs stay pending in Slurm
   (reason Resources) and their Pods wait.

At each step, with nothing else changing:

- idle: the scheduler's CPU over ``quiet`` seconds (its polls of Slurm and nothing else) as a
  share of one core, and per poll of job states;
- memory: the scheduler's resident set;
- a probe: ``probe`` Pods (1 CPU: they fit beside the running ones; a high Slurm priority so
  they go before the pending ones) created at once;
  the scheduler's CPU per Pod, creation to bound, and the job's start to the binding (its log)
  - then deleted again.

At the top: the scheduler is restarted (time until it answers ready, and until it has adopted
every job), and the dashboard's Pods page (its first page, ``limit`` rows) is timed.

The scheduler polls Slurm's job states at its default interval (1 s), as an operator's does:
the bed's own 0.5 s (which speeds up the tests) would double the idle polls. The cost of one
poll is reported as well, for any other interval.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks import results
from benchmarks.bed import bounded, drain, kube_client
from benchmarks.plots import growth_plot
from benchmarks.pods import (
    NAME,
    NAMESPACE,
    BoundWatch,
    bind_timings,
    cpu_seconds,
    cpu_wait_seconds,
    create,
    log_offset,
    open_sockets,
    pauses,
    pauses_between,
    pod,
    rss_mib,
    rss_peak_mib,
    scheduler_gauge,
    scheduler_requests,
    summary,
)
from testbed import cluster
from testbed.scheduler import RunningScheduler, start_scheduler

POLL = "slurmrestd GET /jobs/state/"
#: CPUs of each running Pod: ten fill 30 of a node's 32, so every node is busy at 1,000 (no
#: exclusive job can start) and still has room for the probes.
RUNNING_CPUS = 3
#: The scheduler's flags here: its default poll interval, not the bed's.
POLL_INTERVAL = 1.0
SCHEDULER_FLAGS = [f"--slurm-poll-interval={POLL_INTERVAL}s"]
PLOTS = results.REPO / "docs" / "benchmarks"


async def _idle(running: RunningScheduler, quiet: float,
                profile: Path | None = None) -> dict[str, float | None]:
    pid = running.process.pid
    await asyncio.sleep(5)  # let the last changes settle
    before, polls0 = cpu_seconds(pid), await scheduler_requests(running.url("metrics"))
    if profile is not None:
        running.process.send_signal(signal.SIGUSR1)
    await asyncio.sleep(quiet)
    used, polls1 = cpu_seconds(pid) - before, await scheduler_requests(running.url("metrics"))
    if profile is not None:  # sunk.runtime.profiling: written to /tmp/sunk-scheduler-<pid>.prof
        running.process.send_signal(signal.SIGUSR2)
        await asyncio.sleep(2)
        shutil.copy(f"/tmp/sunk-scheduler-{pid}.prof", profile)
    polls = polls1.get(POLL, 0.0) - polls0.get(POLL, 0.0)
    return {"cpu_share": round(used / quiet, 4), "polls": polls,
            "cpu_ms_per_poll": round(1000 * used / max(1.0, polls), 2),
            "rss_mib": round(rss_mib(pid), 1), "rss_peak_mib": round(rss_peak_mib(pid), 1),
            "sockets": open_sockets(pid),
            # writes the watch has not shown back: with nothing changing, a leak if not 0
            "assumed_writes": await scheduler_gauge(running.url("metrics"),
                                                    "sunk_assumed_writes")}


async def _probe(kube: httpx.AsyncClient, watch: BoundWatch, running: RunningScheduler,
                 step: int, count: int) -> dict[str, Any]:
    names = [f"probe-{step}-{i:03d}" for i in range(count)]
    offset, pid = log_offset(running.log), running.process.pid
    before, created, t0 = cpu_seconds(pid), {}, time.monotonic()
    waited = cpu_wait_seconds(pid)
    for name in names:
        created[name] = time.monotonic()
    await bounded([lambda n=n: create(kube, pod(n, annotations={
        "sunk.coreweave.com/priority": "1000000"})) for n in names])
    await watch.wait(names, 600)
    used, seconds = cpu_seconds(pid) - before, time.monotonic() - t0
    waited = cpu_wait_seconds(pid) - waited
    await asyncio.sleep(0.5)
    logged = await asyncio.to_thread(bind_timings, running.log, offset)
    await bounded([lambda n=n: kube.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/{n}",
                                           params={"gracePeriodSeconds": "0"})
                   for n in names])
    await watch.wait(names, 300, what="gone")
    return {"cpu_ms_per_pod": round(1000 * used / count, 2), "pods": count,
            "seconds": round(seconds, 2),
            "cpu_wait_share": round(waited / seconds, 3),
            "created_to_bound": summary([watch.bound[n] - created[n] for n in names]),
            "started_to_bound": summary([logged[n][0] for n in names if n in logged])}


def net_of_idle(probe: dict[str, Any], idle: dict[str, Any]) -> float | None:
    """The probe's CPU per Pod less what the scheduler spends with nothing changing (the
    job-state poll, mostly) over the probe's time: the per-Pod cost alone, which is what must
    not grow with the number of jobs. None for a record made before probes were timed."""
    if "seconds" not in probe:
        return None
    idle_ms = 1000 * float(idle["cpu_share"]) * float(probe["seconds"])
    return round(float(probe["cpu_ms_per_pod"]) - idle_ms / int(probe["pods"]), 2)


async def _fill(kube: httpx.AsyncClient, watch: BoundWatch, prefix: str, start: int, end: int,
                *, whole_node: bool, running: RunningScheduler) -> dict[str, float]:
    """Pods ``start``..``end``: running ones wait until bound, pending ones until their job is
    submitted (the scheduler's counter)."""
    names = [f"{prefix}-{i:05d}" for i in range(start, end)]
    pid = running.process.pid
    before = cpu_seconds(pid)
    t0 = time.monotonic()
    submitted0 = await scheduler_requests(running.url("metrics"))
    def manifest(name: str) -> dict[str, Any]:
        if whole_node:
            return pod(name, annotations={"sunk.coreweave.com/exclusive": "true"})
        return pod(name, cpu=str(RUNNING_CPUS))

    await bounded([lambda n=n: create(kube, manifest(n)) for n in names])
    if not whole_node:
        await watch.wait(names, 1800)
    else:
        key = "slurmrestd POST /job/submit"
        while True:
            now = await scheduler_requests(running.url("metrics"))
            if now.get(key, 0) - submitted0.get(key, 0) >= len(names):
                break
            await asyncio.sleep(2)
    return {"pods": len(names), "seconds": round(time.monotonic() - t0, 1),
            "cpu_ms_per_pod": round(1000 * (cpu_seconds(pid) - before) / len(names), 2)}


async def _dashboard(running: RunningScheduler, runs: int = 20) -> dict[str, Any]:
    """The Pods page timed ``runs`` times, with the scheduler's garbage collections and event
    loop lag meanwhile (what a slow answer waited for)."""
    times, waits, pid = [], [], running.process.pid
    before = await pauses(running.url("metrics"))
    async with httpx.AsyncClient(base_url=running.url("dashboard"), timeout=60) as client:
        for _ in range(runs):
            t0, waited = time.monotonic(), cpu_wait_seconds(pid)
            r = await client.get("/pods", params={"limit": "100"})
            times.append(time.monotonic() - t0)
            waits.append(cpu_wait_seconds(pid) - waited)
            r.raise_for_status()
        size = len(r.content)
    after = await pauses(running.url("metrics"))
    return {"runs": runs, "seconds": summary(times), "bytes": size,
            # of each answer's time, how long the scheduler's loop waited for a CPU
            "cpu_wait": summary(waits),
            "less_cpu_wait": summary([t - w for t, w in zip(times, waits, strict=True)]),
            "pauses_meanwhile": pauses_between(before, after),
            "pauses_since_start": pauses_between({}, after)}


async def run(tb: cluster.Testbed, running: RunningScheduler, steps: list[int], pending: int,
              probe: int, quiet: float, profile: bool = False) -> dict[str, Any]:
    figures: dict[str, Any] = {"steps": [], "poll_interval_s": POLL_INTERVAL}
    restarted: RunningScheduler | None = None
    async with httpx.AsyncClient(base_url=tb.slurmrestd_url, headers=tb.slurm_headers(),
                                 timeout=120) as slurm, kube_client(tb) as kube:
        await kube.post("/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace",
                                                     "metadata": {"name": NAMESPACE}})
        await drain(tb, slurm, kube)
        try:
            async with BoundWatch(kube) as watch:
                have = 0
                plan = [(n, False) for n in steps] + ([(steps[-1] + pending, True)]
                                                      if pending else [])
                for total, waiting in plan:
                    print(f"scale: {total} jobs ({'pending' if waiting else 'running'} Pods "
                          f"up to that) ...", file=sys.stderr)
                    fill = await _fill(kube, watch, "wait" if waiting else "run",
                                       have - (steps[-1] if waiting else 0),
                                       total - (steps[-1] if waiting else 0),
                                       whole_node=waiting, running=running)
                    have = total
                    idle = await _idle(running, quiet, Path(
                        f"/tmp/sunk-scheduler-idle-{total}.prof") if profile else None)
                    print(f"scale: {total} jobs: idle {idle}; probing ...", file=sys.stderr)
                    if total == plan[-1][0]:  # the top, nothing changing: the dashboard
                        figures["dashboard"] = await _dashboard(running)
                    figures["steps"].append({"jobs": total, "fill": fill, "idle": idle,
                                             "probe": await _probe(kube, watch, running,
                                                                   total, probe)})
                # again right after the probe: its Pods gone, Slurm starts pending jobs on
                # the nodes they leave, and the scheduler binds them while it answers
                figures["dashboard_busy"] = await _dashboard(running)
                print("scale: restarting the scheduler ...", file=sys.stderr)
                offset = log_offset(running.log)
                running.stop()
                t0 = time.monotonic()
                restarted = start_scheduler(tb, name=NAME, hooks_port=tb.ports["hooks"],
                                            extra=SCHEDULER_FLAGS)
                ready = time.monotonic() - t0
                adopted = None
                for line in restarted.log.read_text()[offset:].splitlines():
                    if "adopted" in line and "jobs of ours" in line:
                        adopted = int(line.split("adopted ")[1].split()[0])
                figures["restart"] = {"ready_seconds": round(ready, 2), "adopted": adopted,
                                      "rss_mib": round(rss_mib(restarted.process.pid), 1)}
                figures["restart"]["probe"] = await _probe(kube, watch, restarted, 0, probe)
        finally:
            try:
                print("scale: cleaning up ...", file=sys.stderr)
                await _clean_up(tb, slurm, kube)
            finally:  # stopped by hand (SIGTERM cancels the clean-up): never leave it running
                if restarted is not None:
                    restarted.stop()
    return figures


async def _clean_up(tb: cluster.Testbed, slurm: httpx.AsyncClient,
                    kube: httpx.AsyncClient) -> None:
    """Every job cancelled (the scheduler deletes their Pods), then what is left of the Pods
    deleted; a failure here is reported, and does not lose the figures."""
    try:
        await drain(tb, slurm, kube)
        for _ in range(5):
            try:
                await kube.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods",
                                   params={"gracePeriodSeconds": "0"}, timeout=300)
                break
            except httpx.HTTPError as exc:  # 11,000 Pods: the API server may time out
                print(f"scale: deleting the Pods: {exc!r}; again", file=sys.stderr)
                await asyncio.sleep(5)
        await drain(tb, slurm, kube)
    except Exception as exc:  # the run's figures matter more than a tidy bed
        print(f"scale: cleaning up failed ({exc!r}): `python -m testbed down` clears the bed",
              file=sys.stderr)


def plots(figures: dict[str, Any]) -> list[results.Plot]:
    """The growth curves, as PNGs under docs/benchmarks/."""
    steps = figures["steps"]
    jobs = [s["jobs"] for s in steps]
    out = []
    for name, title, label, series in (
            ("growth-cpu-per-pod", "Scheduler CPU per Pod", "ms of CPU per Pod",
             {"probe Pods (bound)": [s["probe"]["cpu_ms_per_pod"] for s in steps],
              **({"probe Pods, less the idle cost": [net_of_idle(s["probe"], s["idle"])
                                                      for s in steps]}
                 if all(net_of_idle(s["probe"], s["idle"]) is not None for s in steps)
                 else {}),
              "Pods added at the step": [s["fill"]["cpu_ms_per_pod"] for s in steps]}),
            ("growth-poll", "Scheduler CPU with nothing changing", "ms of CPU per job-state poll",
             {"per poll": [s["idle"]["cpu_ms_per_poll"] for s in steps]}),
            ("growth-memory", "Scheduler memory", "resident MiB",
             {"RSS": [s["idle"]["rss_mib"] for s in steps]})):
        path = PLOTS / f"{name}.png"
        growth_plot(jobs, path, title=title, x_label="jobs in Slurm (log scale)",
                    y_label=label, series=series)
        out.append(results.plot_entry(title, path))
    return out


def _rss(idle: dict[str, Any]) -> str:
    peak = idle.get("rss_peak_mib")  # not in records made before it was measured
    return f"{idle['rss_mib']:.0f}" + ("" if peak is None else f" ({peak:.0f})")


def render(figures: dict[str, Any]) -> str:
    lines = ["| jobs in Slurm | Pods added: CPU ms per Pod | idle: share of a core | "
             "ms per poll | RSS MiB (peak so far) | open sockets | probe: CPU ms per Pod | "
             "probe: less the idle cost | "
             "probe: created-to-bound p50 / p99 s | probe: started-to-bound p50 / p99 s | "
             "probe: loop waiting for a CPU |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in figures["steps"]:
        probe = s["probe"]
        net = net_of_idle(probe, s["idle"])
        lines.append(
            f"| {s['jobs']:,} | {s['fill']['cpu_ms_per_pod']:.1f} | "
            f"{s['idle']['cpu_share']:.1%} | {s['idle']['cpu_ms_per_poll']:.1f} | "
            f"{_rss(s['idle'])} | {s['idle'].get('sockets', '')} | "
            f"{probe['cpu_ms_per_pod']:.1f} | "
            f"{'' if net is None else f'{net:.1f}'} | "
            f"{probe['created_to_bound']['p50']:.2f} / {probe['created_to_bound']['p99']:.2f} | "
            f"{probe['started_to_bound']['p50']:.3f} / "
            f"{probe['started_to_bound']['p99']:.3f} | "
            f"{_share(probe.get('cpu_wait_share'))} |")
    lines.append("")
    if all(s["idle"].get("assumed_writes") is not None for s in figures["steps"]):
        lines += ["- Writes the watch had not shown back, with nothing changing (a leak if "
                  "not 0): " + " / ".join(f"{s['idle']['assumed_writes']:.0f}"
                                          for s in figures["steps"]) + " at " +
                  " / ".join(f"{s['jobs']:,}" for s in figures["steps"]) + " jobs."]
    if "restart" in figures:
        r = figures["restart"]
        lines += [f"- Restart at the top: ready in **{r['ready_seconds']:.1f} s** (target "
                  f"30 s), {r['adopted']} jobs adopted, RSS {r['rss_mib']:.0f} MiB after; "
                  f"a probe right after: started-to-bound p99 "
                  f"{r['probe']['started_to_bound']['p99']:.3f} s."]
    last = figures.get("dashboard_busy") or figures.get("dashboard") or {}
    lines += _pauses(last.get("pauses_since_start") or {},
                     "- The scheduler's pauses over the whole run")
    boards = [(when, figures[key]) for key, when in (
        ("dashboard", "at the top, nothing changing (after the idle window)"),
        ("dashboard_busy", "right after the probe at the top, while Slurm starts pending jobs "
                           "on the nodes its Pods left")) if key in figures]
    if boards:
        lines += ["", "| dashboard Pods page, first 100 rows of all Pods (target 200 ms) | "
                  "requests | bytes | p50 / p99 ms | of it, the event loop waiting for a CPU "
                  "p50 / p99 ms | less that wait p50 / p99 ms | meanwhile: full garbage "
                  "collections | meanwhile: event loop late by more than 100 / 250 ms |",
                  "|---|---|---|---|---|---|---|---|"]
        lines += [f"| {when} | {d['runs']} | {d['bytes']:,} | {_ms(d['seconds'])} | "
                  f"{_ms(d.get('cpu_wait'))} | {_ms(d.get('less_cpu_wait'))} | "
                  f"{_gc(d.get('pauses_meanwhile'))} | {_lag(d.get('pauses_meanwhile'))} |"
                  for when, d in boards]
    return "\n".join(lines)


def _share(value: float | None) -> str:
    return "" if value is None else f"{value:.0%}"


def _ms(seconds: dict[str, float] | None) -> str:
    """p50 / p99 in ms; empty for a record made before the figure was measured."""
    return "" if seconds is None else (f"{1000 * seconds['p50']:.0f} / "
                                       f"{1000 * seconds['p99']:.0f}")


def _gc(p: dict[str, Any] | None) -> str:
    gc_full = (p or {}).get("gc_full")
    return "" if not gc_full else (f"{gc_full['count']:.0f} ({gc_full['seconds']:.2f} s, "
                                   f"{gc_full['over_0.1s']:.0f} over 100 ms)")


def _lag(p: dict[str, Any] | None) -> str:
    lag = (p or {}).get("loop_lag")
    return "" if not lag else f"{lag['over_0.1s']:.0f} / {lag['over_0.25s']:.0f} times"


def _pauses(p: dict[str, Any], title: str) -> list[str]:
    gc_full, lag = p.get("gc_full"), p.get("loop_lag")
    if not (gc_full and lag):
        return []
    return [f"{title}: {gc_full['count']:.0f} full garbage collections "
            f"({gc_full['seconds']:.2f} s, {gc_full['over_0.1s']:.0f} over 100 ms); the event "
            f"loop late by more than 100 ms {lag['over_0.1s']:.0f} times, by more than 250 ms "
            f"{lag['over_0.25s']:.0f} times."]
