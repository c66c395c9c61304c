"""docs/install.md followed on the test bed, and the image ``make image`` builds run as the
chart's Pod: the packaged chart installed by the guide's own commands, then the scheduler
started from the image with exactly the rendered command, arguments, environment, volumes, user
and read-only root file system (testbed.container: umoci and runc, the kubelet's part).

It sorts right after test_chart.py, before the session's scheduler takes the hook port.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import subprocess
import urllib.parse
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from release import chart as release_chart
from release import image as release_image
from release.oci import Image
from release.project import REPO, version
from sunk.kube import Client
from testbed import build, cluster, container, procs
from testbed.topology import SLURM_NAMESPACE
from tests.e2e.helpers import (
    call_api,
    call_json,
    create,
    eventually,
    get_pod,
    helm,
    helm_env,
    kube_list,
    remove_namespace,
    wait_bound,
)

GUIDE = REPO / "docs" / "install.md"
NAMESPACE = "sunk"  # the guide's example values use it (its test Pod names sunk-sunk)
INSTALL_BLOCK = re.compile(r"^```bash install\n(.*?)^```", re.M | re.S)
JOB_ID = "sunk.coreweave.com/job-id"
LEADER = "sunk.coreweave.com/leader"


def install_blocks() -> list[str]:
    return INSTALL_BLOCK.findall(GUIDE.read_text())


def guide_pod() -> dict[str, Any]:
    """The guide's first Pod, as an operator would apply it."""
    for block in re.findall(r"^```yaml\n(.*?)^```", GUIDE.read_text(), re.M | re.S):
        doc = yaml.safe_load(block)
        if isinstance(doc, dict) and doc.get("kind") == "Pod":
            return doc
    raise AssertionError("docs/install.md has no Pod manifest")


@dataclass
class Installed:
    pod: container.PodIdentity
    spec: dict[str, Any]  # the rendered Deployment's container
    running: container.Container
    scheduler: str
    ports: dict[str, int]
    dashboard_token: str
    image: Image
    workdir: Path


async def _objects(kube: Client, pod_spec: dict[str, Any], namespace: str) -> dict[str, dict[
        str, str]]:
    """The Secrets and ConfigMaps the Pod spec names, decoded, keyed ``secret/<name>``."""
    wanted: set[tuple[str, str]] = set()
    for volume in pod_spec.get("volumes") or []:
        if "secret" in volume:
            wanted.add(("secret", volume["secret"]["secretName"]))
        if "configMap" in volume:
            wanted.add(("configmap", volume["configMap"]["name"]))
    for c in pod_spec["containers"]:
        for entry in c.get("env") or []:
            if ref := (entry.get("valueFrom") or {}).get("secretKeyRef"):
                wanted.add(("secret", ref["name"]))
    out: dict[str, dict[str, str]] = {}
    for kind, name in sorted(wanted):
        async with call_api(kube, "GET", namespace=namespace, url=f"{kind}s/{name}",
                            raise_for_status=False) as r:
            if r.status_code == 404:
                continue
            body = r.json()
        out[f"{kind}/{name}"] = (container.decode_secret(body) if kind == "secret"
                                 else dict(body.get("data") or {}))
    return out


def _run_guide(testbed: cluster.Testbed, workdir: Path, chart: Path) -> None:
    bins = build.build_binaries()
    path = workdir / "bin"
    path.mkdir()
    for name, tool in (("kubectl", bins.kubectl), ("helm", bins.helm)):
        (path / name).symlink_to(tool)
    (workdir / "dist").mkdir()
    (workdir / "dist" / chart.name).symlink_to(chart)
    env = {"PATH": f"{path}:{os.environ['PATH']}", "HOME": str(workdir),
           "KUBECONFIG": str(testbed.kubeconfig),
           **helm_env(workdir / "helm"),
           "REGISTRY": "localhost/sunk-test", "VERSION": version(), "NAMESPACE": NAMESPACE,
           "SLURMRESTD_URL": testbed.slurmrestd_url, "SLURM_JWT": testbed.slurm_token,
           "HOOK_TOKEN": testbed.hook_token, "HOOK_PORT": str(testbed.ports["hooks"]),
           "KILL_WAIT": str(testbed.kill_wait), "SLURMD_NAMESPACE": SLURM_NAMESPACE}
    blocks = install_blocks()
    assert len(blocks) >= 3, "docs/install.md lost its `bash install` blocks"
    for i, block in enumerate(blocks):
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=workdir, env=env,
                              capture_output=True, text=True, timeout=180, check=False)
        assert done.returncode == 0, f"install block {i + 1} failed:\n{block}\n" \
                                     f"{done.stdout}{done.stderr}"


@pytest.fixture(scope="module")
async def installed(testbed: cluster.Testbed, kube: Client, slurm: httpx.AsyncClient,
                    tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Installed]:
    if not procs.port_free(testbed.ports["hooks"]):
        pytest.fail("another scheduler serves the test bed's hook port; this module runs "
                    "before the session's scheduler starts (conftest runs it early) or on its own")
    container.ensure_root()
    container.ensure_tools()
    workdir = tmp_path_factory.mktemp("install")
    image = release_image.build(workdir / f"sunk-{version()}.oci.tar")
    chart = release_chart.package(workdir / "chart")
    running: container.Container | None = None
    guide_ran = False
    try:
        _run_guide(testbed, workdir, chart)
        guide_ran = True
        deployment = await call_json(kube, "GET", "deployments/sunk", namespace=NAMESPACE,
                                 version="apps/v1")
        pod_spec = deployment["spec"]["template"]["spec"]
        (spec,) = pod_spec["containers"]
        ports = {p["name"]: int(p["containerPort"]) for p in spec["ports"]}
        busy = [f"{n} {p}" for n, p in ports.items() if not procs.port_free(p)]
        assert not busy, f"the chart's ports are in use on this machine: {busy}"
        # The Pod object the kubelet would run this for (the leader label goes on it).
        name = f"sunk-{secrets.token_hex(3)}"
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        await create(kube, {"apiVersion": "v1", "kind": "Pod",
                            "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
                            "spec": {"schedulerName": "nobody",
                                     "containers": [{"name": "c", "image": "sunk"}]}})
        stand_in = await get_pod(kube, NAMESPACE, name)
        assert stand_in is not None
        pod = container.PodIdentity(name, NAMESPACE, stand_in["metadata"]["uid"],
                                    pod_spec["serviceAccountName"])
        objects = await _objects(kube, pod_spec, NAMESPACE)
        minted = await call_json(kube, "POST", f"serviceaccounts/{pod.service_account}/token",
                             namespace=NAMESPACE,
                             json={"apiVersion": "authentication.k8s.io/v1",
                                   "kind": "TokenRequest",
                                   "spec": {"expirationSeconds": 3600}})
        account = {"token": minted["status"]["token"],
                   "ca.crt": (testbed.pki / "ca.crt").read_text(), "namespace": NAMESPACE}
        volumes = workdir / "volumes"
        by_name = {v["name"]: container.write_volume(v, volumes, objects)
                   for v in pod_spec.get("volumes") or []}
        mounts: list[tuple[str, Path, bool]] = []
        for mount in spec.get("volumeMounts") or []:
            source = by_name[mount["name"]]
            assert source is not None, f"volume {mount['name']}: kind not supported"
            mounts.append((mount["mountPath"], source / mount.get("subPath", ""),
                           bool(mount.get("readOnly"))))
        if pod_spec.get("automountServiceAccountToken", True):
            sa = container.write_volume({"name": "kube-api-access", "projected": {}}, volumes,
                                        objects, service_account=account)
            assert sa is not None
            mounts.append((container.SERVICE_ACCOUNT_DIR, sa, True))
        api = urllib.parse.urlsplit(testbed.apiserver_url)
        env = [f"KUBERNETES_SERVICE_HOST={api.hostname}", f"KUBERNETES_SERVICE_PORT={api.port}",
               *container.resolve_env(spec, pod, {k.removeprefix("secret/"): v
                                                  for k, v in objects.items()
                                                  if k.startswith("secret/")})]
        bundle = container.unpack(image.archive, version(), workdir)
        config = container.runtime_config(
            json.loads((bundle / "config.json").read_text()),
            container.image_config(image.archive), pod_spec, spec, env, mounts, hostname=name)
        running = container.Container(f"sunk-install-{name}", bundle,
                                      workdir / "container.log")
        running.start(config)
        dashboard = objects.get("secret/sunk-dashboard", {}).get("token", "")
        yield Installed(pod, spec, running, f"{NAMESPACE}-sunk", ports, dashboard, image,
                        workdir)
    finally:
        if running is not None:
            await _clean_up(kube, slurm, running)
            log = running.log.read_text(errors="replace") if running.log.exists() else ""
            print(f"--- the container's log (last 3000 characters) ---\n{log[-3000:]}")
        if guide_ran:
            helm(testbed, workdir / "helm", "uninstall", "sunk", "--namespace", NAMESPACE)
        await remove_namespace(kube, NAMESPACE)


async def _clean_up(kube: Client, slurm: httpx.AsyncClient,
                    running: container.Container) -> None:
    """Delete the test's Pods while the scheduler runs (it cancels their jobs and answers
    the placeholder jobs' calls), wait until Slurm and the Nodes are clear, then stop it."""
    try:
        if running.alive():
            for pod in await kube_list(kube, "pods", namespace=NAMESPACE):
                if pod["spec"].get("schedulerName") == f"{NAMESPACE}-sunk":
                    async with call_api(kube, "DELETE", namespace=NAMESPACE,
                                        url=f"pods/{pod['metadata']['name']}",
                                        params={"gracePeriodSeconds": "0"},
                                        raise_for_status=False):
                        pass

            async def settled() -> bool:
                jobs = (await slurm.get("/slurm/v0.0.42/jobs/")).json()["jobs"]
                if any(j["name"].startswith(f"pod:{NAMESPACE}/")
                       and set(j["job_state"]) & {"PENDING", "RUNNING", "COMPLETING"}
                       for j in jobs):
                    return False
                return not any(t["key"] == "sunk.coreweave.com/lock"
                               for n in await kube_list(kube, "nodes")
                               for t in n["spec"].get("taints") or [])

            await eventually(settled, within=60)
    finally:
        running.stop()


async def _readyz(installed: Installed) -> str | None:
    try:
        async with httpx.AsyncClient() as client:
            r = await client.get(f"http://127.0.0.1:{installed.ports['health']}/readyz",
                                 timeout=2)
    except httpx.HTTPError:
        return None
    return r.text if r.status_code == 200 else None


# -- the tests, in order: they share one installed release ----------------------------------


def test_the_image_is_small_and_a_second_build_gives_the_same_digest(
        installed: Installed) -> None:
    """Reproducible: the same commit and Debian packages give the same bytes (the first
    build is the one running; this one starts from the same cached Debian base)."""
    again = release_image.build(installed.workdir / "again.oci.tar")
    assert again.digest == installed.image.digest
    assert again.archive.read_bytes() == installed.image.archive.read_bytes()
    assert installed.image.uncompressed_size <= 150 * 1024 * 1024


async def test_the_image_runs_with_the_rendered_arguments_user_and_read_only_root(
        installed: Installed) -> None:
    async def started() -> int | None:
        assert installed.running.alive(), installed.running.log.read_text()[-3000:]
        try:
            return installed.running.pid()
        except Exception:
            return None

    pid = await eventually(started, within=30)
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
    # The image's entry point (a script: its interpreter comes first), then exactly the
    # chart's arguments.
    assert cmdline[-len(installed.spec["args"]) - 1:] == [
        "/usr/local/bin/sunk-scheduler", *installed.spec["args"]]
    status = container.process_status(pid)
    assert status["Uid"].split() == ["65532"] * 4
    assert status["Gid"].split() == ["65532"] * 4
    assert status["NoNewPrivs"] == "1"
    assert int(status["CapEff"], 16) == 0
    assert container.root_is_read_only(pid)


async def test_it_passes_readiness_and_wins_the_leader_election(
        installed: Installed, kube: Client) -> None:
    assert await eventually(lambda: _readyz(installed), within=90) == "ok"
    lease = await call_json(kube, "GET", "leases/sunk", namespace=NAMESPACE,
                        version="coordination.k8s.io/v1")
    assert lease["spec"]["holderIdentity"].rpartition("_")[0] == installed.pod.name

    async def labelled() -> bool:
        pod = await get_pod(kube, NAMESPACE, installed.pod.name)
        return ((pod or {}).get("metadata", {}).get("labels") or {}).get(LEADER) == "true"

    await eventually(labelled, within=10)


async def test_the_guides_pod_is_scheduled_through_slurm(
        installed: Installed, kube: Client, slurm: httpx.AsyncClient) -> None:
    manifest = guide_pod()
    assert manifest["spec"]["schedulerName"] == installed.scheduler
    await create(kube, manifest)
    name = manifest["metadata"]["name"]
    bound = await wait_bound(kube, NAMESPACE, name, within=90)
    job_id = bound["metadata"]["annotations"][JOB_ID]
    job = (await slurm.get(f"/slurm/v0.0.42/job/{job_id}")).json()["jobs"][0]
    assert job["name"] == f"pod:{NAMESPACE}/{name}"
    assert job["job_state"][0] == "RUNNING"  # a flag (CONFIGURING) may still follow


async def test_the_dashboard_serves_the_pod(installed: Installed) -> None:
    assert installed.dashboard_token, "the chart generates a dashboard token when none is given"
    url = f"http://127.0.0.1:{installed.ports['dashboard']}"
    async with httpx.AsyncClient(base_url=url, timeout=10, follow_redirects=True) as client:
        assert (await client.get("/api/v1/summary")).status_code == 401
        headers = {"Authorization": f"Bearer {installed.dashboard_token}"}
        page = await client.get("/", headers=headers)
        assert page.status_code == 200
        pods = await client.get("/pods", headers=headers)
        assert pods.status_code == 200
        assert guide_pod()["metadata"]["name"] in pods.text


async def test_no_api_call_was_refused_for_lack_of_permission(installed: Installed) -> None:
    await asyncio.sleep(0)
    refused = re.compile(r"(?<![,.\d])\b(403|401)\b|forbidden|unauthorized", re.IGNORECASE)
    log = installed.running.log.read_text(errors="replace")
    assert log, "the container wrote nothing"
    problems = [line for line in log.splitlines() if refused.search(line)]
    assert not problems, "\n".join(problems)
