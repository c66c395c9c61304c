"""``python -m benchmarks.dashboard``: how long the Pods page takes with a big cluster in memory.

A page is rendered on the scheduler's event loop, so its cost is time the scheduler does not
schedule: this measures a whole request through the app (routing, view models, template), in
process, for the full page and for the htmx refresh that an open page repeats every 2 s.

The slow tail (p99) is the interpreter's full garbage collection, which walks every object in
the process; ``--gc-freeze`` shows the same run with the start-up objects frozen out of it.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import platform
import statistics
import time
from collections.abc import Callable

from litestar.testing import AsyncTestClient

from tests.unit.web.sample import sample
from web import create_app, pods
from web.viewmodels import DEFAULT_LIMIT

TARGET_MS = 200.0


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _stats(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return statistics.median(ordered), p99


async def _measure(pod_count: int, nodes: int, runs: int,
                   freeze: bool) -> dict[str, tuple[float, float, int]]:
    scheduler = sample(pod_count, nodes)
    if freeze:
        gc.collect()
        gc.freeze()
    results: dict[str, tuple[float, float, int]] = {}

    def timed(fn: Callable[[], object]) -> list[float]:
        out = []
        for _ in range(runs):
            start = time.perf_counter()
            fn()
            out.append((time.perf_counter() - start) * 1000)
        return out

    now = time.time()
    view_ms = timed(lambda: pods.pods(scheduler, now))
    results["view model only"] = (*_stats(view_ms), 0)
    async with AsyncTestClient(create_app(scheduler)) as client:
        for label, headers in (
                ("GET /pods (whole page)", {"Accept-Encoding": "identity"}),
                ("GET /pods (htmx refresh)", {"HX-Request": "true",
                                              "Accept-Encoding": "identity"}),
                ("GET /pods (refresh, gzip)", {"HX-Request": "true",
                                               "Accept-Encoding": "gzip"})):
            await client.get("/pods", headers=headers)  # warm the template cache
            samples = []
            size = 0
            for _ in range(runs):
                start = time.perf_counter()
                r = await client.get("/pods", headers=headers)
                samples.append((time.perf_counter() - start) * 1000)
                size = int(r.headers.get("content-length") or len(r.content))
                assert r.status_code == 200, r.text[:500]
                assert r.text.count("<tr data-pod=") == min(pod_count, DEFAULT_LIMIT)
            results[label] = (*_stats(samples), size)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.dashboard", description=__doc__)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--gc-freeze", action="store_true",
                        help="gc.freeze() once the state is built, as a long-running process "
                             "can: full collections then skip the objects built at start")
    args = parser.parse_args(argv)
    results = asyncio.run(_measure(args.pods, args.nodes, args.runs, args.gc_freeze))
    frozen = ", gc.freeze()" if args.gc_freeze else ""
    print(f"Dashboard Pods page, {args.pods} Pods and {args.nodes} nodes in state, "
          f"{args.runs} runs{frozen}; Python {platform.python_version()}, "
          f"{os.cpu_count()} CPUs ({_cpu_model()})")
    print(f"{'':28} {'median ms':>10} {'p99 ms':>10} {'bytes':>10}")
    worst = 0.0
    for label, (median, p99, size) in results.items():
        print(f"{label:28} {median:10.1f} {p99:10.1f} {size or '':>10}")
        if label.startswith("GET"):
            worst = max(worst, median)
    verdict = "within" if worst < TARGET_MS else "OVER"
    print(f"median {worst:.1f} ms: {verdict} the {TARGET_MS:.0f} ms target")
    return 0 if worst < TARGET_MS else 1


if __name__ == "__main__":
    raise SystemExit(main())
