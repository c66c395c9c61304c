"""Health (is Slurm there, is the API server there) and the cluster model that holds it: its
caches read as the scheduler reads them, and the Pod handler's bookkeeping."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator

import httpx
import pytest

from sunk import kube
from sunk.model import health
from tests.unit.core import stand_ins
from tests.unit.core.stand_ins import (
    Bed,
    answer,
    namespace,
    node,
    pod,
    put,
    slurmd,
    stop,
    until,
    who,
)


@pytest.fixture
async def bed() -> AsyncIterator[Bed]:
    async with stand_ins.bed() as made:
        yield made


# -- Slurm -------------------------------------------------------------------------------------

async def test_slurm_is_a_problem_until_it_answers_and_when_it_falls_silent(bed: Bed) -> None:
    watched = bed.cluster.health
    back: list[str] = []
    watched.on_slurm_back.append(lambda: back.append("back"))
    assert watched.slurm_problem() == "no answer yet"
    watched.slurm_answered(None)
    assert watched.slurm_problem() == "" and back == ["back"]
    watched.slurm_answered(None)
    assert back == ["back"], "told once per recovery"
    watched.slurm_answered(RuntimeError("GET /jobs/state/: 503 down"))
    assert watched.slurm_problem() == "GET /jobs/state/: 503 down"
    assert not bed.cluster.state.slurm_healthy
    watched.slurm_answered(None)
    assert back == ["back", "back"]
    watched._slurm_answered_at = time.monotonic() - watched.poll_interval - health.SLURM_SILENCE - 2
    assert watched.slurm_problem().startswith("no answer from slurmrestd for ")


# -- the API server ----------------------------------------------------------------------------

async def test_the_api_server_is_judged_by_the_watches_and_the_probe(bed: Bed) -> None:
    watched = bed.cluster.health
    back: list[str] = []
    watched.on_kube_back.append(lambda: back.append("back"))
    informers = bed.cluster.informers()
    assert {i.resource for i in informers} >= {"nodes", "pods", "namespaces"}
    for informer in informers:
        informer.healthy = True
    watched.note_kube()
    assert bed.cluster.state.kube_healthy and back == [], "the first verdict is no recovery"
    informers[0].healthy, informers[0].last_error = False, "KubeError: 503"
    watched.note_kube()
    assert watched.kube_problem() == "nodes: KubeError: 503"
    assert not bed.cluster.state.kube_healthy and back == []
    informers[0].healthy = True
    watched.note_kube()
    assert bed.cluster.state.kube_healthy and back == ["back"]
    watched.note_kube()
    assert back == ["back"]


async def test_an_api_server_away_from_the_first_verdict_is_logged_but_no_recovery(
        bed: Bed, caplog: pytest.LogCaptureFixture) -> None:
    """Failing since start (RBAC refusing the probe's read, say): the log says so, once; its
    end is logged too, and re-queues nothing (nothing was missed: every Pod was looked at)."""
    caplog.set_level(logging.INFO, logger="sunk.model.health")
    watched = bed.cluster.health
    back: list[str] = []
    watched.on_kube_back.append(lambda: back.append("back"))
    informers = bed.cluster.informers()
    for informer in informers:
        informer.healthy = True
    watched._kube_probe_error = "403 forbidden"
    for _ in range(3):
        watched.note_kube()
    assert not bed.cluster.state.kube_healthy
    watched._kube_probe_error = ""
    watched.note_kube()
    assert bed.cluster.state.kube_healthy and back == []
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", "the API server does not answer: a read failed: 403 forbidden"),
        ("INFO", "the API server answers again")]


async def test_the_probe_notices_an_api_server_that_refuses_reads(bed: Bed) -> None:
    for informer in bed.cluster.informers():
        informer.healthy = True
    bed.kube.routes[("GET", "/api/v1/nodes")] = answer(503, {"message": "shutting down"})
    probe = asyncio.create_task(bed.cluster.health.probe_kube(bed.cluster.api, interval=0.01))
    try:
        await until(lambda: bed.cluster.state.kube_error)
        assert not bed.cluster.state.kube_healthy
        assert "shutting down" in bed.cluster.state.kube_error
        assert bed.cluster.state.kube_error.startswith("a read failed: ")
        del bed.kube.routes[("GET", "/api/v1/nodes")]
        await until(lambda: bed.cluster.state.kube_healthy)
    finally:
        await stop(probe)
    assert bed.kube.paths("GET")[0] == "/api/v1/nodes"


async def test_a_slow_read_is_not_an_outage_until_it_passes_the_silence(
        bed: Bed, caplog: pytest.LogCaptureFixture) -> None:
    """An API server under load answers late: not down (no "answers again" re-queueing every
    Pod) unless the read takes longer than the silence allowed."""
    for informer in bed.cluster.informers():
        informer.healthy = True
    watched, back = bed.cluster.health, []
    watched.on_kube_back.append(lambda: back.append("back"))
    delay = 0.05

    async def late(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(delay)
        return httpx.Response(200, json={"items": []})

    bed.kube.routes[("GET", "/api/v1/nodes")] = late  # type: ignore[assignment]
    probe = asyncio.create_task(watched.probe_kube(bed.cluster.api, interval=0.01, silence=0.5))
    try:
        await until(lambda: len(bed.kube.paths("GET")) >= 3)
        assert bed.cluster.state.kube_healthy and back == [], "coming up is no recovery"
        delay = 2.0
        await until(lambda: not bed.cluster.state.kube_healthy)
        assert bed.cluster.state.kube_error == "a read failed: no answer within 0.5s"
        await asyncio.sleep(1.1)  # two more probes fail: the log said it once
        assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
            "the API server does not answer: a read failed: no answer within 0.5s"]
    finally:
        await stop(probe)


# -- the cluster model -------------------------------------------------------------------------

async def test_a_pod_is_found_by_key_and_by_its_jobs_identity(bed: Bed) -> None:
    put(bed.cluster.pod_informers[0], pod())
    assert bed.cluster.pod("ns/p") is not None and bed.cluster.pod("ns/q") is None
    assert bed.cluster.pod_of(who()) is not None
    assert bed.cluster.pod_of(who("ffff-0009")) is None, "same name, another Pod"
    assert [p["metadata"]["uid"] for p in bed.cluster.pods()] == ["aaaa-0001"]


async def test_in_namespace_scope_each_namespace_has_its_informer() -> None:
    async with stand_ins.bed(scope="namespace", watch_namespace=["a", "b"]) as made:
        cluster = made.cluster
        assert [i.namespace for i in cluster.pod_informers] == ["a", "b"]
        put(cluster.pod_informers[1], pod(namespace="b"))
        assert cluster.pod("b/p") is not None and cluster.pod("a/p") is None


async def test_the_pods_naming_the_scheduler_come_from_the_watch_of_every_pod() -> None:
    async with stand_ins.bed(scope="namespace", watch_namespace=["a", "b"]) as made:
        cluster, told = made.cluster, []
        cluster.pod_handlers.append(lambda kind, p: told.append((kind, kube.key(p))))
        ours_in_b, ours_in_c = pod(namespace="b"), pod(namespace="c")
        theirs = pod(namespace="a")
        theirs["spec"]["schedulerName"] = "default-scheduler"
        for each in (ours_in_b, ours_in_c, theirs):
            made.any_pod(each)
        assert cluster.pod("b/p") is ours_in_b, "the same object as every Pod's cache holds"
        assert cluster.pod("c/p") is None and cluster.pod("a/p") is None
        assert told == [("ADDED", "b/p")]
        made.any_pod(ours_in_b, "DELETED")
        assert cluster.pod("b/p") is None and told[-1] == ("DELETED", "b/p")
        assert [i.resource for i in cluster.informers()].count("pods") == 2  # all, slurmd


async def test_without_the_scheduler_only_the_shared_informers_run() -> None:
    async with stand_ins.bed(components=["syncer"]) as made:
        resources = [i.resource for i in made.cluster.informers()]
        assert "namespaces" not in resources
        assert resources.count("pods") == 2  # every Pod's, the slurmd Pods'
        made.any_pod(stand_ins.pod())
        assert made.cluster.pods_on("node-a") == [] and all(
            not i.cache for i in made.cluster.pod_informers), "no scheduler: no Pods of ours"


async def test_the_node_index_and_snapshot_are_built_again_only_on_change(bed: Bed) -> None:
    cluster = bed.cluster
    put(cluster.slurmd_informer, slurmd())
    put(cluster.node_informer, node())
    index = cluster.index()
    assert index.to_k8s == {"slurm-1": "node-a"} and cluster.index() is index
    snapshot = cluster.snapshot()
    assert cluster.snapshot() is snapshot
    assert snapshot.slurm_to_k8s == {"slurm-1": "node-a"} and snapshot.slurm_nodes is None
    cluster.set_slurm_nodes([{"name": "slurm-1", "state": ["IDLE"]}])
    again = cluster.snapshot()
    assert again is not snapshot and again.slurm_nodes == frozenset({"slurm-1"})
    cluster.set_slurm_nodes([{"name": "slurm-1", "state": ["ALLOCATED"]}])
    assert cluster.snapshot() is again, "a state change is not a new node"
    assert cluster.state.slurm_nodes["slurm-1"]["state"] == ["ALLOCATED"]
    put(cluster.node_informer, node(unschedulable=True))
    assert cluster.snapshot().nodes["node-a"].unschedulable
    put(cluster.slurmd_informer, slurmd("slurm-2", "node-b"))
    assert cluster.index() is not index and cluster.index().to_k8s["slurm-2"] == "node-b"


async def test_the_namespace_and_node_are_read_from_their_caches(bed: Bed) -> None:
    assert bed.cluster.namespace("ns") is None and bed.cluster.node("node-a") is None
    put(bed.cluster.namespace_informer, namespace())
    put(bed.cluster.node_informer, node())
    assert bed.cluster.namespace("ns") == namespace()
    assert bed.cluster.node("node-a") == node()


async def test_a_deleted_pod_ends_its_record_its_assumptions_and_wakes_its_waiters(
        bed: Bed) -> None:
    cluster = bed.cluster
    seen: list[tuple[str, str]] = []
    cluster.pod_handlers.append(lambda kind, obj: seen.append((kind, obj["metadata"]["uid"])))
    bed.add_pod(pod())
    cluster.state.record("ns", "p", "aaaa-0001", 0.0)
    cluster.assumed.bound("aaaa-0001")
    waiting = asyncio.create_task(cluster.wait_pod_gone("aaaa-0001", within=5))
    await asyncio.sleep(0.01)
    bed.add_pod(pod(), "DELETED")
    assert await asyncio.wait_for(waiting, 1)
    assert "ns/p" not in cluster.state.pods
    assert not cluster.assumed.is_bound(pod())
    assert seen == [("ADDED", "aaaa-0001"), ("DELETED", "aaaa-0001")]
    assert not await cluster.wait_pod_gone("bbbb-0002", within=0.01)
