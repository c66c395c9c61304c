"""The chart's ValidatingAdmissionPolicy on the real API server: only the scheduler's own
ServiceAccount may set, change or remove the scheduler-owned annotations and the leader label.

The chart's two admission objects are rendered with ``helm template`` for a release in a
namespace of this test's own, watching another, with the slurmd Pods in a third; a fourth is
outside the binding. An ordinary user acts through the admin's credentials with an
``Impersonate-User`` header (RBAC then checks that user); the scheduler acts with a token of a
ServiceAccount of the chart's name. The binding names only this test's namespaces, so other
tests' Pods are never judged by it even while it exists; it is deleted at the end all the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from sunk.kube import Client, connect
from testbed import build, cluster, pki
from testbed.scheduler import REPO
from tests.e2e.conftest import scratch_namespace
from tests.e2e.helpers import call_api, close_api

CHART = REPO / "charts" / "sunk"
RELEASE = "guard"
ACCOUNT = "guard-sunk"  # the chart's ServiceAccount name for this release: <release>-sunk
PREFIX = "sunk.coreweave.com/"
JOB_ID, POD_UID, REJECTED = f"{PREFIX}job-id", f"{PREFIX}pod-uid", f"{PREFIX}rejected"
LOCK, LEADER = f"{PREFIX}lock", f"{PREFIX}leader"
USER = "alice"  # an ordinary user: RBAC lets her create and edit Pods, nothing more
ADMISSION = "admissionregistration.k8s.io/v1"
MERGE = {"Content-Type": "application/merge-patch+json"}
Obj = dict[str, Any]


@dataclass
class Guarded:
    release: str  # the release namespace: the scheduler's ServiceAccount, the leader label
    watched: str  # scope.namespaces
    slurmd: str  # scheduler.slurmd.namespace
    outside: str  # in no list: the policy does not apply there
    scheduler: Client  # acting with the chart-named ServiceAccount's token

    @property
    def account(self) -> str:
        return f"system:serviceaccount:{self.release}:{ACCOUNT}"

    def said(self, key: str, why: str) -> str:
        return f"{key} is written only by the scheduler ({self.account}); {why}"


@dataclass
class Answer:
    code: int
    body: Obj

    @property
    def message(self) -> str:
        return str(self.body.get("message", ""))


async def request(api: Client, method: str, url: str, *, namespace: str | None = None,
                  as_user: str | None = USER, version: str = "v1", json_body: Obj | None = None,
                  headers: dict[str, str] | None = None) -> Answer:
    """A request as ``as_user`` (impersonated through ``api``'s admin credentials) or, with
    ``as_user=None``, as ``api``'s own user."""
    sent = dict(headers or {})
    if as_user is not None:
        sent["Impersonate-User"] = as_user
    async with call_api(api, method, version=version, namespace=namespace, url=url,
                        json=json_body, headers=sent, raise_for_status=False) as r:
        return Answer(r.status_code, r.json() if r.content else {})


def pod(name: str, namespace: str, annotations: dict[str, str] | None = None,
        labels: dict[str, str] | None = None) -> Obj:
    metadata: Obj = {"name": name, "namespace": namespace}
    if annotations is not None:
        metadata["annotations"] = annotations
    if labels is not None:
        metadata["labels"] = labels
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": {"schedulerName": "nobody",  # left alone: no scheduler runs in this test
                     "containers": [{"name": "main", "image": "busybox"}]}}


async def create_pod(api: Client, manifest: Obj, *,
                     as_user: str | None = USER) -> Answer:
    return await request(api, "POST", "pods", namespace=manifest["metadata"]["namespace"],
                         as_user=as_user, json_body=manifest)


async def patch_pod(api: Client, namespace: str, name: str, metadata: Obj, *,
                    as_user: str | None = USER, subresource: str = "") -> Answer:
    url = f"pods/{name}" + (f"/{subresource}" if subresource else "")
    return await request(api, "PATCH", url, namespace=namespace, as_user=as_user,
                         json_body={"metadata": metadata}, headers=MERGE)


def assert_refused(answer: Answer, message: str) -> None:
    assert answer.code == 403, (answer.code, answer.body)
    assert answer.body.get("reason") == "Forbidden", answer.body
    assert "ValidatingAdmissionPolicy" in answer.message, answer.message
    assert answer.message.endswith(f"denied request: {message}"), answer.message


def assert_admitted(answer: Answer) -> None:
    assert answer.code in (200, 201), (answer.code, answer.body)


def render(release_ns: str, watched: str, slurmd: str) -> list[Obj]:
    """The chart's admission objects, as ``helm install`` would create them."""
    values = {"scheduler": {"scope": {"type": "namespace", "namespaces": watched},
                            "slurmd": {"namespace": slurmd}},
              "slurm": {"auth": {"token": "unused"}}}
    release = build.kubernetes_release(build.wanted_kubernetes())
    done = subprocess.run(
        [str(build.build_helm()), "template", RELEASE, str(CHART),
         "--namespace", release_ns, "--kube-version", release.version,
         "--show-only", "templates/admissionpolicy.yaml", "--set-json",
         f"scheduler={json.dumps(values['scheduler'])}",
         "--set-json", f"slurm={json.dumps(values['slurm'])}"],
        capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    objects = [o for o in yaml.safe_load_all(done.stdout) if o]
    assert [o["kind"] for o in objects] == ["ValidatingAdmissionPolicy",
                                            "ValidatingAdmissionPolicyBinding"]
    return objects


async def grant(kube: Client, namespace: str, name: str, rules: list[Obj],
                subject: Obj) -> None:
    for kind, body in (("roles", {"rules": rules}),
                       ("rolebindings", {"roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                                     "kind": "Role", "name": name},
                                         "subjects": [subject]})):
        await request(kube, "POST", kind, namespace=namespace, as_user=None,
                      version="rbac.authorization.k8s.io/v1",
                      json_body={"metadata": {"name": name, "namespace": namespace}, **body})


async def wait_in_force(kube: Client, namespace: str, within: float = 30) -> float:
    """The API server loads new policies and bindings a moment after they are created: create
    a Pod the policy refuses until it is refused (deleting any that got through)."""
    started = time.monotonic()
    probe = pod("probe", namespace, {JOB_ID: "1"})
    while True:
        answer = await create_pod(kube, probe)
        if answer.code == 403 and "ValidatingAdmissionPolicy" in answer.message:
            return time.monotonic() - started
        assert answer.code == 201, answer.body  # admitted: not in force yet
        await request(kube, "DELETE", "pods/probe", namespace=namespace, as_user=None)
        assert time.monotonic() - started < within, f"policy not in force after {within}s"
        await asyncio.sleep(0.5)


@pytest.fixture(scope="module")
async def guarded(testbed: cluster.Testbed, kube: Client,
                  tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Guarded]:
    async with contextlib.AsyncExitStack() as stack:
        release, watched, slurmd, outside = [
            await stack.enter_async_context(scratch_namespace(kube)) for _ in range(4)]
        # The ordinary user: Pods and their subresources in every namespace here.
        for ns in (release, watched, slurmd, outside):
            await grant(kube, ns, "pod-author", [
                {"apiGroups": [""], "resources": ["pods"],
                 "verbs": ["get", "create", "update", "patch", "delete"]},
                {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["update", "patch"]},
                {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]}],
                {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": USER})
        # The scheduler's ServiceAccount, with what the chart grants it on Pods (patch).
        await request(kube, "POST", "serviceaccounts", namespace=release, as_user=None,
                      json_body={"metadata": {"name": ACCOUNT, "namespace": release}})
        for ns in (release, watched, slurmd):
            await grant(kube, ns, "scheduler", [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]}],
                {"kind": "ServiceAccount", "name": ACCOUNT, "namespace": release})
        minted = await request(kube, "POST", f"serviceaccounts/{ACCOUNT}/token",
                               namespace=release, as_user=None,
                               json_body={"apiVersion": "authentication.k8s.io/v1",
                                          "kind": "TokenRequest",
                                          "spec": {"expirationSeconds": 3600}})
        assert minted.code == 201, minted.body
        kubeconfig = tmp_path_factory.mktemp("admission") / "scheduler.kubeconfig"
        kubeconfig.write_text(pki.kubeconfig(
            testbed.apiserver_url, testbed.pki, user=f"system:serviceaccount:{release}:{ACCOUNT}",
            token=minted.body["status"]["token"]))
        scheduler = await connect(kubeconfig)
        stack.push_async_callback(close_api, scheduler)

        policy, binding = render(release, watched, slurmd)
        names = [(plural, o["metadata"]["name"]) for plural, o in
                 (("validatingadmissionpolicies", policy),
                  ("validatingadmissionpolicybindings", binding))]

        async def remove() -> None:  # cluster-scoped: it must not outlive the test
            for plural, name in reversed(names):
                await request(kube, "DELETE", f"{plural}/{name}", as_user=None,
                              version=ADMISSION)
            for plural, name in names:
                gone = await request(kube, "GET", f"{plural}/{name}", as_user=None,
                                     version=ADMISSION)
                assert gone.code == 404, gone.body

        stack.push_async_callback(remove)
        for (plural, _), manifest in zip(names, (policy, binding), strict=True):
            # Strict: a field the API server does not know is an error, not dropped silently.
            async with call_api(kube, "POST", version=ADMISSION, url=plural, json=manifest,
                                params={"fieldValidation": "Strict"}) as r:
                assert r.status_code == 201, r.text
        await wait_in_force(kube, watched)
        yield Guarded(release, watched, slurmd, outside, scheduler)


# -- the tests -------------------------------------------------------------------------------------


async def test_an_ordinary_user_cannot_create_a_pod_carrying_owned_metadata(
        guarded: Guarded, kube: Client) -> None:
    g = guarded
    copied = "remove it from the Pod (copied from another Pod?)"
    for i, (notes, labels, key) in enumerate([
            ({JOB_ID: "42"}, None, JOB_ID),
            ({POD_UID: "0c7a44b1-0000-0000-0000-000000000000"}, None, POD_UID),
            ({REJECTED: "PlacementConflict"}, None, REJECTED),
            ({"team": "x"}, {LEADER: "true"}, LEADER)]):
        answer = await create_pod(kube, pod(f"copy-{i}", g.watched, notes, labels))
        assert_refused(answer, g.said(key, copied))
    # Even the admin (system:masters) is refused: only the scheduler writes them.
    assert_refused(await create_pod(kube, pod("admin", g.watched, {JOB_ID: "1"}), as_user=None),
                   g.said(JOB_ID, copied))
    # The slurmd namespace (the syncer's lock state) and the release namespace (the leader label
    # the hook Service selects) are guarded too.
    assert_refused(await create_pod(kube, pod("slurmd", g.slurmd, {LOCK: "locked_strict"})),
                   g.said(LOCK, copied))
    assert_refused(await create_pod(kube, pod("leader", g.release, None, {LEADER: "true"})),
                   g.said(LEADER, copied))
    # The Pod's own annotations under the prefix, and owned keys in the other map, are fine.
    assert_admitted(await create_pod(kube, pod("asks", g.watched,
                                               {f"{PREFIX}partition": "batch", LEADER: "x"},
                                               {JOB_ID: "7"})))


async def test_an_ordinary_user_edits_a_pod_but_never_its_owned_metadata(
        guarded: Guarded, kube: Client) -> None:
    g = guarded
    ns, name = g.watched, "mine"
    assert_admitted(await create_pod(kube, pod(name, ns, None, {"app": "a"})))
    assert_admitted(await patch_pod(kube, ns, name, {"labels": {"app": "b"},
                                                     "annotations": {"note": "1"}}))
    added = "it may not be added to an existing Pod"
    metadata: Obj
    for metadata, key in (({"annotations": {JOB_ID: "5"}}, JOB_ID),
                          ({"annotations": {POD_UID: "u"}}, POD_UID),
                          ({"annotations": {REJECTED: "x"}}, REJECTED),
                          ({"labels": {LEADER: "true"}}, LEADER)):
        assert_refused(await patch_pod(kube, ns, name, metadata), g.said(key, added))

    # The scheduler writes them (a ServiceAccount token, RBAC: patch Pods).
    owned: Obj = {"annotations": {JOB_ID: "5", POD_UID: "u", REJECTED: "x"},
             "labels": {LEADER: "true"}}
    assert_admitted(await patch_pod(g.scheduler, ns, name, owned, as_user=None))

    # With them on the Pod, its author still edits everything else, by patch or by update.
    assert_admitted(await patch_pod(kube, ns, name, {"labels": {"app": "c"}}))
    current = (await request(kube, "GET", f"pods/{name}", namespace=ns)).body
    current["metadata"]["labels"]["tier"] = "gold"
    assert_admitted(await request(kube, "PUT", f"pods/{name}", namespace=ns, json_body=current))
    # ... but neither changes nor removes what the scheduler wrote,
    changed, removed = "it may not be changed", (
        "it may not be removed (to start over, recreate the Pod)")
    for metadata, key, why in (
            ({"annotations": {JOB_ID: "6"}}, JOB_ID, changed),
            ({"annotations": {JOB_ID: None}}, JOB_ID, removed),
            ({"annotations": {POD_UID: "v"}}, POD_UID, changed),
            ({"annotations": {POD_UID: None}}, POD_UID, removed),
            ({"annotations": {REJECTED: None}}, REJECTED, removed),
            ({"labels": {LEADER: "false"}}, LEADER, changed),
            ({"labels": {LEADER: None}}, LEADER, removed)):
        assert_refused(await patch_pod(kube, ns, name, metadata), g.said(key, why))
    # not with an update that drops every annotation,
    current = (await request(kube, "GET", f"pods/{name}", namespace=ns)).body
    del current["metadata"]["annotations"]
    answer = await request(kube, "PUT", f"pods/{name}", namespace=ns, json_body=current)
    assert answer.code == 403 and "may not be removed" in answer.message, answer.body
    # not through the status subresource (which can change labels and annotations),
    assert_admitted(await patch_pod(kube, ns, name, {"labels": {"via": "status"}},
                                    subresource="status"))
    assert_refused(await patch_pod(kube, ns, name, {"annotations": {JOB_ID: "9"}},
                                   subresource="status"), g.said(JOB_ID, changed))
    # and not through a Binding (its annotations are copied onto the Pod).
    assert_admitted(await create_pod(kube, pod("unbound", ns)))
    binding = {"apiVersion": "v1", "kind": "Binding",
               "metadata": {"name": "unbound", "annotations": {JOB_ID: "5"}},
               "target": {"apiVersion": "v1", "kind": "Node", "name": "kwok-node-000"}}
    assert_refused(await request(kube, "POST", "pods/unbound/binding", namespace=ns,
                                 json_body=binding),
                   g.said(JOB_ID, "remove it from the Binding (copied from another Pod?)"))

    final = (await request(kube, "GET", f"pods/{name}", namespace=ns)).body["metadata"]
    assert {k: final["annotations"][k] for k in owned["annotations"]} == owned["annotations"]
    assert final["labels"] == {"app": "c", "tier": "gold", "via": "status", LEADER: "true"}
    unbound = (await request(kube, "GET", "pods/unbound", namespace=ns)).body
    assert not unbound["spec"].get("nodeName")


async def test_the_scheduler_adds_changes_and_removes_its_metadata(
        guarded: Guarded, kube: Client) -> None:
    g = guarded
    for ns, name, key, values in ((g.watched, "job", JOB_ID, ("1", "2")),
                                  (g.watched, "job", REJECTED, ("SlurmRefused", "x")),
                                  (g.slurmd, "slurmd-0", LOCK, ("pending", "locked")),
                                  (g.release, "sunk-0", LEADER, ("true", "false"))):
        if (await request(kube, "GET", f"pods/{name}", namespace=ns)).code == 404:
            assert_admitted(await create_pod(kube, pod(name, ns)))
        field = "labels" if key == LEADER else "annotations"
        for value in (*values, None):
            assert_admitted(await patch_pod(g.scheduler, ns, name, {field: {key: value}},
                                            as_user=None))
            got = (await request(kube, "GET", f"pods/{name}", namespace=ns)).body["metadata"]
            assert (got.get(field) or {}).get(key) == value
        # ... which nobody else may do there.
        assert_refused(await patch_pod(kube, ns, name, {field: {key: "forged"}}),
                       g.said(key, "it may not be added to an existing Pod"))


async def test_namespaces_outside_the_binding_are_not_affected(
        guarded: Guarded, kube: Client) -> None:
    ns = guarded.outside
    assert_admitted(await create_pod(kube, pod("copy", ns, {JOB_ID: "42", LOCK: "locked"},
                                               {LEADER: "true"})))
    assert_admitted(await patch_pod(kube, ns, "copy", {"annotations": {JOB_ID: "43",
                                                                       LOCK: None},
                                                       "labels": {LEADER: None}}))
    # The scheduler's ServiceAccount has no rights there: RBAC, not the policy, stops it.
    answer = await patch_pod(guarded.scheduler, ns, "copy", {"annotations": {JOB_ID: "1"}},
                             as_user=None)
    assert answer.code == 403 and "ValidatingAdmissionPolicy" not in answer.message
