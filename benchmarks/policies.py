"""How fast the default policy set evaluates a realistic Pod: ``python -m benchmarks.policies``.

Prints evaluations per second and microseconds per Pod for the whole set, the share of each
policy and of checking that the Pod is plain JSON, and with ``--profile`` where the time goes.
The first Pod of a template is evaluated (the engine's memo misses); another Pod of the same
template, differing in name and uid, gets the memoised decision (a hit): both are measured.
The results in docs/benchmarks.md come from this command.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import platform
import pstats
import statistics
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import celpy
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError

from sunk.policy.compiled import CompiledPolicy
from sunk.policy.decision import Decision, Outcome
from sunk.policy.engine import PolicyEngine, without_managed_fields
from sunk.policy.functions import FUNCTIONS
from sunk.policy.loader import load_directory
from sunk.policy.memo import KeyMaker
from tests.unit.policy.pods import realistic_pod


def every_annotation_pod() -> dict[str, Any]:
    """The realistic Pod with all fifteen annotations of the reference product's table."""
    pod = realistic_pod()
    pod["metadata"]["annotations"].update(
        {
            f"sunk.coreweave.com/{name}": value
            for name, value in {
                "constraints": "h100&ib",
                "excluded-nodes": "a100-092-01,a100-092-02",
                "required-nodes": "a100-092-04",
                "prefer": "fast",
                "priority": "100",
                "qos": "normal",
                "reservation": "inference",
                "group-id": "1002",
                "current-working-dir": "/work",
            }.items()
        }
    )
    return pod


def _per_call(function: Callable[[], object], seconds: float) -> tuple[float, int]:
    """Median seconds per call over batches filling ``seconds``, and the number of calls."""
    batch = 50
    samples: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(samples) < 5:
        start = time.perf_counter()
        for _ in range(batch):
            function()
        samples.append((time.perf_counter() - start) / batch)
    return statistics.median(samples), batch * len(samples)


def _evaluating(policy: CompiledPolicy, values: Mapping[str, Any]) -> Callable[[], None]:
    return lambda: policy.evaluate(values, Outcome())


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def run(policies: Path, seconds: float, profile: bool) -> str:
    """Run the benchmark and return its report as Markdown."""
    loaded = load_directory(policies, settings={"killWaitSeconds": 30})
    engine = PolicyEngine(loaded.policies, loaded.settings, memo_size=0)  # every call a miss
    memo = PolicyEngine(loaded.policies, loaded.settings)
    pod = realistic_pod()
    decision = engine.evaluate(pod)
    _check(decision)
    total, calls = _per_call(lambda: engine.evaluate(pod), seconds)
    _check(memo.evaluate(pod))
    sibling = _sibling(pod)
    if memo.evaluate(sibling) != decision:
        raise SystemExit("the memo gave another decision")
    hit, _ = _per_call(lambda: memo.evaluate(sibling), seconds / 2)
    # With the memo on, a Pod that reads differently: alternating two, each pushing out the other.
    one = PolicyEngine(loaded.policies, loaded.settings, memo_size=1)
    pods = [pod, _other_template(pod)]

    def alternate() -> None:
        pods.reverse()
        one.evaluate(pods[0])

    miss, _ = _per_call(alternate, seconds / 2)
    keys = KeyMaker(memo.reads)
    key, _ = _per_call(lambda: keys.key(without_managed_fields(sibling), None), seconds / 4)
    everything = every_annotation_pod()
    _check(engine.evaluate(everything))
    worst, _ = _per_call(lambda: engine.evaluate(everything), seconds / 2)
    stock, _ = _per_call(stock_baseline(engine, pod), seconds / 2)
    plain = without_managed_fields(pod)
    check, _ = _per_call(lambda: keys.is_plain(without_managed_fields(pod), None), seconds / 4)
    values = {"object": plain, "namespaceObject": None, "settings": dict(engine.settings)}
    shares = []
    for policy in engine.policies:
        cost, _ = _per_call(_evaluating(policy, values), seconds / 4)
        shares.append(f"| {policy.name} | {cost * 1e6:.0f} |")
    lines = [
        f"- Command: `python -m benchmarks.policies --seconds {seconds:g}`",
        f"- Machine: {os.cpu_count()} CPUs (nproc), {_cpu_model()}, "
        f"Python {platform.python_version()}",
        f"- Policy set: {len(engine.policies)} policies from `{policies}`; Pod: two containers, "
        f"4 GPUs, six sunk annotations; {calls} evaluations",
        f"- **{1 / total:,.0f} evaluations per second, {total * 1e6:.0f} µs per Pod** "
        f"(the memo off)",
        f"- The first Pod of a template (the memo misses, keys it and keeps the decision): "
        f"{miss * 1e6:.0f} µs per Pod",
        f"- **Another Pod of the same template (the memo's decision): {1 / hit:,.0f} per "
        f"second, {hit * 1e6:.1f} µs per Pod**, of which {key * 1e6:.1f} µs compute its key",
        f"- The same Pod with all 15 annotations of the table: {worst * 1e6:.0f} µs per Pod",
        f"- Baseline, the same expressions through cel-python's documented API, one evaluation "
        f"per expression: {stock * 1e6:,.0f} µs per Pod",
        "",
        "| part | µs per Pod |",
        "|---|---|",
        f"| checking the Pod is plain JSON (policies read it as it is) | {check * 1e6:.0f} |",
        *shares,
    ]
    if profile:
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(500):
            engine.evaluate(pod)
        profiler.disable()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(15)
        lines += ["", "```", text.getvalue().strip(), "```"]
    return "\n".join(lines)


def _sibling(pod: Mapping[str, Any]) -> dict[str, Any]:
    """Another Pod of the same ReplicaSet: only fields no policy reads differ."""
    metadata = {
        **pod["metadata"],
        "name": "inference-7d9f8c6b5-q8w2z",
        "uid": "9c0a7f52-1d2e-4f3a-8b4c-5d6e7f8a9b0c",
        "resourceVersion": "123456790",
        "creationTimestamp": "2026-05-27T10:00:01Z",
    }
    return {**pod, "metadata": metadata}


def _other_template(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The Pod with one more annotation (no policy uses it, but the annotations are read)."""
    annotations = {**pod["metadata"]["annotations"], "example.com/team": "a"}
    return {**pod, "metadata": {**pod["metadata"], "annotations": annotations}}


def stock_baseline(engine: PolicyEngine, pod: Mapping[str, Any]) -> Callable[[], None]:
    """The same expressions run the plain way: cel-python's documented API
    (``Environment().program(ast).evaluate(activation)``), one evaluation per expression,
    every variable computed, the Pod converted with ``json_to_cel``."""
    environment = celpy.Environment()

    def program(text: str) -> Any:
        return environment.program(environment.compile(text), functions=FUNCTIONS)

    policies = [
        (
            json_to_cel(policy.params),
            [(v.name, program(v.expression)) for v in policy.document.spec.variables],
            [program(v.expression) for v in policy.document.spec.validations]
            + [program(m.expression) for m in policy.document.spec.mappings.values()],
        )
        for policy in engine.policies
    ]
    settings = json_to_cel(dict(engine.settings))

    def evaluate() -> None:
        values = {"object": json_to_cel(without_managed_fields(pod)), "settings": settings}
        for params, variables, checks in policies:
            computed: dict[str, Any] = {}
            activation = {**values, "params": params, "variables": computed}
            for name, variable in variables:
                computed[name] = _stock_value(variable, activation)
            activation["variables"] = _cel_map(computed)
            for check in checks:
                _stock_value(check, activation)

    return evaluate


def _stock_value(program: Any, activation: Mapping[str, Any]) -> Any:
    try:
        return program.evaluate(activation)
    except CELEvalError as error:
        return error


def _cel_map(values: Mapping[str, Any]) -> Any:
    result = celtypes.MapType()
    for name, value in values.items():
        result[celtypes.StringType(name)] = value
    return result


def _check(decision: Decision) -> None:
    """The benchmark Pod must be a valid one, with every mapping, or the figure means little."""
    expected: Mapping[str, Any] = {"account": "inference", "shared": "user", "time_limit": 720}
    if not decision.allowed or decision.errors or decision.warnings:
        raise SystemExit(f"the benchmark Pod should pass cleanly: {decision}")
    for key, value in expected.items():
        if decision.mappings.get(key) != value:
            raise SystemExit(f"mapping {key} is {decision.mappings.get(key)!r}, not {value!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--policies", type=Path, default=Path("policies"))
    parser.add_argument("--seconds", type=float, default=5.0, help="time spent measuring")
    parser.add_argument("--profile", action="store_true", help="also print a profile")
    arguments = parser.parse_args()
    print(run(arguments.policies, arguments.seconds, arguments.profile))


if __name__ == "__main__":
    main()
