"""The Pod cache keeps Pods trimmed (sunk.kube.trim), and the whole Pod only while its
policies are to run: policies still see every field."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from sunk.kube import KubeError
from sunk.loops.scheduler import Scheduler
from sunk.plans.keys import PodKey
from sunk.policy.loader import PolicyStore
from sunk.wiring import connect_scheduler
from tests.unit.core import stand_ins
from tests.unit.core.stand_ins import (
    POLICIES,
    PREFIX,
    Bed,
    answer,
    namespace,
    node,
    owned,
    pod,
    put,
    slurmd,
)

SUBMIT = f"{stand_ins.SLURM}/job/submit"
POD_PATH = "/api/v1/namespaces/ns/pods/p"

NO_HOST_PATH = """
apiVersion: sunk.coreweave.com/v1alpha1
kind: SchedulingPolicy
metadata:
  name: no-host-path
spec:
  validations:
    - expression: >-
        !has(object.spec.volumes) || object.spec.volumes.all(v, !has(v.hostPath))
      reason: HostPathVolume
      message: hostPath volumes are not allowed
"""


def with_host_path(**kw: Any) -> dict[str, Any]:
    made = pod(**kw)
    made["spec"]["volumes"] = [{"name": "data", "hostPath": {"path": "/data"}}]
    return made


@pytest.fixture
async def bed(tmp_path: Path) -> AsyncIterator[tuple[Bed, Scheduler]]:
    for source in POLICIES.glob("*.yaml"):
        (tmp_path / source.name).write_text(source.read_text())
    (tmp_path / "90-no-host-path.yaml").write_text(NO_HOST_PATH)
    store = PolicyStore.from_directory(tmp_path, settings={"killWaitSeconds": 30,
                                                            "annotationPrefix": PREFIX})
    async with stand_ins.bed() as made:
        put(made.cluster.namespace_informer, namespace())
        put(made.cluster.node_informer, node())
        put(made.cluster.slurmd_informer, slurmd())
        made.slurm.routes[("POST", SUBMIT)] = answer(200, {"job_id": 41})
        scheduler = Scheduler(made.cluster, made.watch, made.executor, store)
        connect_scheduler(scheduler)
        yield made, scheduler
        scheduler.queue.close()


async def test_a_policy_reads_a_field_the_cache_drops(bed: tuple[Bed, Scheduler]) -> None:
    made, scheduler = bed
    made.add_pod(with_host_path())
    cached = made.cluster.pod("ns/p")
    assert cached is not None and "volumes" not in cached["spec"], "the cache keeps it trimmed"
    await scheduler.reconcile(PodKey("ns", "p"))
    assert made.slurm.calls("POST", SUBMIT) == [], "denied on the whole Pod"
    assert made.kube.calls("GET", POD_PATH) == [], "kept from its event: not read again"
    await made.settle()
    assert [e["reason"] for e in made.events()] == ["HostPathVolume"]


async def test_a_pod_without_the_field_is_submitted(bed: tuple[Bed, Scheduler]) -> None:
    made, scheduler = bed
    made.add_pod(pod())
    await scheduler.reconcile(PodKey("ns", "p"))
    assert len(made.slurm.calls("POST", SUBMIT)) == 1


async def test_the_whole_pod_is_kept_only_while_its_policies_are_to_run(
        bed: tuple[Bed, Scheduler]) -> None:
    made, _ = bed
    cluster = made.cluster
    made.any_pod(with_host_path())
    assert set(cluster.whole_pods.kept) == {"ns/p"}
    made.any_pod(with_host_path(annotations=owned(41)))  # its job, written for it
    assert cluster.whole_pods.kept == {}
    made.any_pod(with_host_path(annotations=owned(41, uid="someone-else")))  # copied: no job
    assert set(cluster.whole_pods.kept) == {"ns/p"}
    made.any_pod(with_host_path(node="node-a"))  # bound by someone else
    assert cluster.whole_pods.kept == {}
    made.any_pod(with_host_path())
    made.any_pod(with_host_path(), kind="DELETED")
    assert cluster.whole_pods.kept == {}
    other = with_host_path()
    other["spec"]["schedulerName"] = "default-scheduler"
    made.any_pod(other)
    assert cluster.whole_pods.kept == {}, "not ours: its policies never run here"


async def test_a_pod_with_a_job_is_read_whole_from_the_api_server(
        bed: tuple[Bed, Scheduler]) -> None:
    made, _ = bed
    made.add_pod(with_host_path(annotations=owned(41)))
    made.kube.routes[("GET", POD_PATH)] = answer(200, with_host_path(annotations=owned(41)))
    cached = made.cluster.pod("ns/p")
    assert cached is not None and "volumes" not in cached["spec"]
    whole = await made.cluster.whole_pod(cached)
    assert whole is not None and whole["spec"]["volumes"][0]["hostPath"] == {"path": "/data"}
    made.kube.routes[("GET", POD_PATH)] = answer(200, with_host_path(uid="a-new-pod"))
    assert await made.cluster.whole_pod(cached) is None, "another Pod of that name"
    made.kube.routes[("GET", POD_PATH)] = answer(404, {"kind": "Status", "code": 404})
    assert await made.cluster.whole_pod(cached) is None, "deleted meanwhile"
    made.kube.routes[("GET", POD_PATH)] = answer(500, {"kind": "Status", "code": 500})
    with pytest.raises(KubeError):
        await made.cluster.whole_pod(cached)
