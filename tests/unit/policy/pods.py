"""Pods as plain data, for the policy tests."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

REPOSITORY = Path(__file__).resolve().parents[3]
POLICIES = REPOSITORY / "policies"
EXAMPLES = POLICIES / "examples"
PREFIX = "sunk.coreweave.com/"


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
