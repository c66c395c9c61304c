"""Pods and policy documents as plain data, for the policy tests."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

REPOSITORY = Path(__file__).resolve().parents[3]
POLICIES = REPOSITORY / "policies"
EXAMPLES = POLICIES / "examples"
PREFIX = "sunk.coreweave.com/"


def policy(name: str = "test", /, **spec: Any) -> str:
    """A policy document as YAML (JSON is YAML), from spec fields in camelCase."""
    document = {
        "apiVersion": "sunk.coreweave.com/v1alpha1",
        "kind": "SchedulingPolicy",
        "metadata": {"name": name},
        "spec": spec,
    }
    return json.dumps(document)


def container(
    name: str = "main",
    *,
    cpu: str | None = "1",
    memory: str | None = "1Gi",
    limits: dict[str, str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A container requesting ``cpu`` and ``memory`` (None leaves a request out)."""
    requests = {key: value for key, value in (("cpu", cpu), ("memory", memory)) if value}
    resources: dict[str, Any] = {"requests": requests}
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "image": "ubuntu", "resources": resources, **extra}


def pod(
    *,
    annotations: dict[str, str] | None = None,
    containers: list[dict[str, Any]] | None = None,
    grace: int | None = 5,
    namespace: str = "default",
    **spec: Any,
) -> dict[str, Any]:
    """A Pod that passes the default policies unless told otherwise.

    ``annotations`` keys without a "/" get the default prefix: {"priority": "1"}.
    """
    full = {
        (key if "/" in key else PREFIX + key): value for key, value in (annotations or {}).items()
    }
    body: dict[str, Any] = {
        "containers": containers if containers is not None else [container()],
        **spec,
    }
    if grace is not None:
        body["terminationGracePeriodSeconds"] = grace
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "test", "namespace": namespace, "annotations": full},
        "spec": body,
    }


def with_status(base: dict[str, Any], **status: Any) -> dict[str, Any]:
    result = copy.deepcopy(base)
    result["status"] = status
    return result


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
