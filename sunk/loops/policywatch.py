"""Policies from a ConfigMap, read and watched through the API (``--policies-configmap``).

An edit applies within a second, the same in and out of a cluster; a ConfigMap mounted as files
would lag by the kubelet's sync period (a minute or more). The scheduler needs only ``get``,
``list`` and ``watch`` on that one ConfigMap (RBAC ``resourceNames``: a list or watch with a
``metadata.name`` field selector is authorized as a request for that name).

A broken edit leaves the policy set in force (see :class:`sunk.policy.PolicyStore`); so does
deleting the ConfigMap.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from sunk import kube
from sunk.policy import PolicyIssue, PolicyLoadError, PolicyStore

log = logging.getLogger("sunk.loops.policywatch")


def configmap_ref(ref: str, default_namespace: str) -> tuple[str, str]:
    """``namespace/name`` or ``name`` (in ``default_namespace``)."""
    namespace, sep, name = ref.strip().rpartition("/")
    if not sep:
        namespace = default_namespace
    if not name or not namespace or "/" in namespace:
        raise ValueError(f"not a ConfigMap reference: {ref!r} (use namespace/name or name)")
    return namespace, name


async def load(api: kube.Client, namespace: str, name: str,
               settings: Mapping[str, Any] | None = None, *, attempts: int | None = None,
               delay: float = 0.5) -> PolicyStore:
    """The policy set of the ConfigMap, at start-up. Raises PolicyLoadError if it does not
    exist or may not be read; waits out an unreachable API server (``attempts`` times, or for
    as long as it takes). A set that does not load puts none in force: the watch puts one in
    force once an edit loads (see :class:`sunk.policy.PolicyStore`)."""
    where = f"ConfigMap {namespace}/{name}"
    problem = ""
    attempt = 0
    while attempts is None or attempt < attempts:
        attempt += 1
        try:
            body = await kube.request(api, "GET", f"configmaps/{name}", namespace=namespace)
        except kube.KubeError as exc:
            if exc.status == 404:
                raise PolicyLoadError([PolicyIssue(f"{where} does not exist")]) from exc
            if exc.status in (401, 403):
                raise PolicyLoadError([PolicyIssue(f"{where} may not be read: {exc}")]) from exc
            problem = str(exc)
            log.warning("reading %s failed (try %d): %s", where, attempt, exc)
            await asyncio.sleep(min(30.0, delay * 2 ** (attempt - 1)))
            continue
        try:
            return PolicyStore.from_configmap(body.get("data"), settings)
        except PolicyLoadError as error:
            log.error("the policies of %s do not load", where)
            return PolicyStore.without_a_set(error, settings)
    raise PolicyLoadError([PolicyIssue(f"{where} could not be read: {problem}")])


class ConfigMapPolicies:
    """Keeps ``store`` in step with one ConfigMap: every change is a reload."""

    def __init__(self, api: kube.Client, namespace: str, name: str,
                 store: PolicyStore) -> None:
        self.namespace, self.name, self.store = namespace, name, store
        self.informer = kube.Informer(api, "configmaps", namespace=namespace,
                                      field_selector=f"metadata.name={name}",
                                      handler=self.on_event)

    def on_event(self, kind: str, configmap: kube.Obj) -> None:
        if kind == "DELETED":
            log.warning("policy ConfigMap %s/%s was deleted; the policy set in force stays",
                        self.namespace, self.name)
            return
        self.store.reload_configmap(configmap.get("data"))

    async def run(self) -> None:
        await self.informer.run()
