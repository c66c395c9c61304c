"""How fast the default policy set evaluates a realistic Pod: ``python -m sunk.policy.bench``.

Prints evaluations per second and microseconds per Pod for the whole set, the share of each
policy and of converting the Pod to CEL values, and with ``--profile`` where the time goes.
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

from sunk.policy.cel import to_cel
from sunk.policy.engine import (
    CompiledPolicy,
    Decision,
    PolicyEngine,
    _Outcome,
    _without_managed_fields,
)
from sunk.policy.functions import FUNCTIONS
from sunk.policy.loader import load_directory


def realistic_pod() -> dict[str, Any]:
    """A GPU Pod as the API server returns it while it waits for the scheduler."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "inference-7d9f8c6b5-x2x7k",
            "generateName": "inference-7d9f8c6b5-",
            "namespace": "tenant-slurm-staging",
            "uid": "4b1e4d4e-7c47-4a57-9a3e-1f1ad1a2b3c4",
            "resourceVersion": "123456789",
            "creationTimestamp": "2026-05-27T10:00:00Z",
            "labels": {"app": "inference", "pod-template-hash": "7d9f8c6b5"},
            "annotations": {
                "sunk.coreweave.com/account": "inference",
                "sunk.coreweave.com/comment": "A Kubernetes job",
                "sunk.coreweave.com/exclusive": "user",
                "sunk.coreweave.com/user-id": "1001",
                "sunk.coreweave.com/partition": "h100",
                "sunk.coreweave.com/timeout": "720",
                "kubectl.kubernetes.io/restartedAt": "2026-05-27T09:59:00Z",
            },
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "inference-7d9f8c6b5",
                    "uid": "0c7c1c6e-5b9f-4a1e-9d0c-2d3e4f5a6b7c",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": [
                {
                    "manager": "kube-controller-manager",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}},
                }
            ],
        },
        "spec": {
            "schedulerName": "tenant-slurm-staging-slurm-scheduler",
            "terminationGracePeriodSeconds": 5,
            "restartPolicy": "Always",
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
            "securityContext": {},
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "gpu.nvidia.com/model",
                                        "operator": "In",
                                        "values": ["H100_NVLINK_80GB"],
                                    }
                                ]
                            }
                        ]
                    }
                }
            },
            "containers": [
                {
                    "name": "server",
                    "image": "registry.example.com/inference/server:1.4.2",
                    "args": ["--model", "/models/llm", "--port", "8000"],
                    "ports": [{"containerPort": 8000, "name": "http", "protocol": "TCP"}],
                    "env": [
                        {"name": "CUDA_VISIBLE_DEVICES", "value": "all"},
                        {"name": "LOG_LEVEL", "value": "info"},
                    ],
                    "resources": {
                        "limits": {"memory": "256Gi", "nvidia.com/gpu": "4"},
                        "requests": {"cpu": "32", "memory": "128Gi", "nvidia.com/gpu": "4"},
                    },
                    "volumeMounts": [
                        {"name": "models", "mountPath": "/models", "readOnly": True},
                        {"name": "kube-api-access", "mountPath": "/var/run/secrets/kube"},
                    ],
                    "readinessProbe": {
                        "httpGet": {"path": "/healthz", "port": 8000, "scheme": "HTTP"},
                        "periodSeconds": 10,
                    },
                    "imagePullPolicy": "IfNotPresent",
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                },
                {
                    "name": "metrics",
                    "image": "registry.example.com/inference/exporter:0.9.0",
                    "ports": [{"containerPort": 9400, "name": "metrics", "protocol": "TCP"}],
                    "resources": {
                        "limits": {"memory": "512Mi"},
                        "requests": {"cpu": "250m", "memory": "256Mi"},
                    },
                    "imagePullPolicy": "IfNotPresent",
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                },
            ],
            "volumes": [
                {"name": "models", "persistentVolumeClaim": {"claimName": "models"}},
                {"name": "kube-api-access", "projected": {"sources": [], "defaultMode": 420}},
            ],
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
                {
                    "key": "node.kubernetes.io/unreachable",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
            ],
        },
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }


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
    return lambda: policy.evaluate(values, _Outcome())


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
    engine = load_directory(policies, settings={"killWaitSeconds": 30})
    pod = realistic_pod()
    decision = engine.evaluate(pod)
    _check(decision)
    total, calls = _per_call(lambda: engine.evaluate(pod), seconds)
    everything = every_annotation_pod()
    _check(engine.evaluate(everything))
    worst, _ = _per_call(lambda: engine.evaluate(everything), seconds / 2)
    stock, _ = _per_call(stock_baseline(engine, pod), seconds / 2)
    conversion, _ = _per_call(lambda: to_cel(_without_managed_fields(pod)), seconds / 4)
    values = {
        "object": to_cel(_without_managed_fields(pod)),
        "namespaceObject": None,
        "settings": to_cel(dict(engine.settings)),
    }
    shares = []
    for policy in engine.policies:
        cost, _ = _per_call(_evaluating(policy, values), seconds / 4)
        shares.append(f"| {policy.name} | {cost * 1e6:.0f} |")
    lines = [
        f"- Command: `python -m sunk.policy.bench --seconds {seconds:g}`",
        f"- Machine: {os.cpu_count()} CPUs (nproc), {_cpu_model()}, "
        f"Python {platform.python_version()}",
        f"- Policy set: {len(engine.policies)} policies from `{policies}`; Pod: two containers, "
        f"4 GPUs, six sunk annotations; {calls} evaluations",
        f"- **{1 / total:,.0f} evaluations per second, {total * 1e6:.0f} µs per Pod**",
        f"- The same Pod with all 15 annotations of the table: {worst * 1e6:.0f} µs per Pod",
        f"- Baseline, the same expressions through cel-python's documented API, one evaluation "
        f"per expression: {stock * 1e6:,.0f} µs per Pod",
        "",
        "| part | µs per Pod |",
        "|---|---|",
        f"| converting the Pod to CEL values | {conversion * 1e6:.0f} |",
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


def stock_baseline(engine: PolicyEngine, pod: Mapping[str, Any]) -> Callable[[], None]:
    """The same expressions run the plain way: cel-python's documented API
    (``Environment().program(ast).evaluate(activation)``), one evaluation per expression,
    every variable computed, the Pod converted with ``json_to_cel``."""
    environment = celpy.Environment()

    def program(text: str) -> Any:
        return environment.program(environment.compile(text), functions=FUNCTIONS)

    policies = [
        (
            policy.params,
            [(v.name, program(v.expression)) for v in policy.document.spec.variables],
            [program(v.expression) for v in policy.document.spec.validations]
            + [program(m.expression) for m in policy.document.spec.mappings.values()],
        )
        for policy in engine.policies
    ]
    settings = json_to_cel(dict(engine.settings))

    def evaluate() -> None:
        values = {"object": json_to_cel(_without_managed_fields(pod)), "settings": settings}
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
