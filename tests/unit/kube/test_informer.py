"""The Informer against an HTTP-level stand-in: list, watch, 410, bookmarks, dropped streams."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import httpx
import pytest

from sunk import kube, objects
from tests.unit.kube.fakes import FakeServer, client, listing, never, obj, status, watch

Seen = list[tuple[str, str]]


def recorder() -> tuple[Seen, Callable[[str, kube.Obj], None]]:
    seen: Seen = []
    return seen, lambda kind, o: seen.append((kind, kube.key(o)))


@pytest.fixture
async def running() -> AsyncIterator[Callable[[kube.Informer], None]]:
    """Runs informers in the background; cancels them when the test ends."""
    tasks: list[asyncio.Task[None]] = []
    yield lambda informer: tasks.append(asyncio.create_task(informer.run()))
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def params(request: httpx.Request) -> dict[str, str]:
    return dict(request.url.params)


async def test_list_then_watch_keeps_the_cache_and_calls_the_handler(
        running: Callable[[kube.Informer], None]) -> None:
    a2 = obj("a", "12", spec={"v": 2})
    server = FakeServer(
        listing("10", obj("a", "1"), obj("b", "2")),
        watch(("ADDED", obj("c", "11")), ("MODIFIED", a2), ("DELETED", obj("b", "13")),
              ("BOOKMARK", {"metadata": {"resourceVersion": "14"}})),
        never)
    seen, handler = recorder()
    api = client(server)
    informer = kube.Informer(api, "pods", namespace="ns", label_selector="app=x",
                             handler=handler)
    running(informer)
    await server.wait_for(3)
    assert seen == [("ADDED", "ns/a"), ("ADDED", "ns/b"), ("ADDED", "ns/c"),
                    ("MODIFIED", "ns/a"), ("DELETED", "ns/b")]
    assert informer.cache == {"ns/a": a2, "ns/c": obj("c", "11")}
    assert informer.generation == 4  # the list, then three changes; the bookmark is none
    assert informer.synced.is_set() and informer.healthy
    listed, watched, resumed = server.requests
    assert listed.url.path == watched.url.path == "/api/v1/namespaces/ns/pods"
    assert params(listed) == {"labelSelector": "app=x"}
    assert params(watched) == {"labelSelector": "app=x", "watch": "true",
                               "resourceVersion": "10", "allowWatchBookmarks": "true",
                               "timeoutSeconds": "300"}
    assert params(resumed)["resourceVersion"] == "14"  # the bookmark's: no list again
    await api.aclose()


async def test_410_gone_lists_again_and_what_went_missing_arrives_as_deleted(
        running: Callable[[kube.Informer], None]) -> None:
    server = FakeServer(
        listing("10", obj("a", "1"), obj("b", "2")),
        watch(("ERROR", {"kind": "Status", "code": 410, "message": "too old"})),
        listing("20", obj("a", "15"), obj("c", "16")),
        never)
    seen, handler = recorder()
    api = client(server)
    informer = kube.Informer(api, "pods", handler=handler)
    running(informer)
    await server.wait_for(4)
    assert seen == [("ADDED", "ns/a"), ("ADDED", "ns/b"),
                    ("DELETED", "ns/b"), ("ADDED", "ns/a"), ("ADDED", "ns/c")]
    assert sorted(informer.cache) == ["ns/a", "ns/c"]
    assert informer.cache["ns/a"]["metadata"]["resourceVersion"] == "15"
    assert params(server.requests[3])["resourceVersion"] == "20"
    assert informer.healthy
    await api.aclose()


async def test_a_watch_refused_with_410_lists_again(
        running: Callable[[kube.Informer], None]) -> None:
    server = FakeServer(listing("10"), status(410, "too old"), listing("20"), never)
    api = client(server)
    informer = kube.Informer(api, "nodes")
    running(informer)
    await server.wait_for(4)
    assert [r.url.params.get("watch") for r in server.requests] == [None, "true", None, "true"]
    assert params(server.requests[3])["resourceVersion"] == "20"
    await api.aclose()


async def until(check: Callable[[], bool]) -> None:
    async with asyncio.timeout(5):
        while not check():  # noqa: ASYNC110 - the informer offers nothing to wait on
            await asyncio.sleep(0.01)


async def test_a_dropped_stream_resumes_at_the_last_resource_version_seen(
        running: Callable[[kube.Informer], None]) -> None:
    opened = asyncio.Event()

    async def resumed(request: httpx.Request) -> httpx.Response:
        await opened.wait()  # the test looks at the informer between the drop and this
        return watch(hang=True)

    server = FakeServer(
        listing("10", obj("a", "1")),
        watch(("ADDED", obj("b", "11")), error=httpx.ReadError("connection reset")),
        resumed)
    seen, handler = recorder()
    api = client(server)
    informer = kube.Informer(api, "pods", handler=handler)
    running(informer)
    await server.wait_for(3)
    assert not informer.healthy  # until the server takes a watch again
    assert "stream broke" in informer.last_error
    assert params(server.requests[2])["resourceVersion"] == "11"  # not 10, and no list
    opened.set()
    await until(lambda: informer.healthy)  # once the resumed watch is open, not at its end
    assert informer.last_error == ""
    assert seen == [("ADDED", "ns/a"), ("ADDED", "ns/b")]
    await api.aclose()


async def test_a_refused_watch_is_reported_and_listed_again(
        running: Callable[[kube.Informer], None]) -> None:
    reported: list[tuple[bool, str]] = []

    async def relist(request: httpx.Request) -> httpx.Response:
        reported.append((informer.healthy, informer.last_error))
        return listing("30")

    server = FakeServer(listing("10"), status(500, "etcd is down"), relist, never)
    api = client(server)
    informer = kube.Informer(api, "pods")
    running(informer)
    await server.wait_for(4)
    [(healthy, error)] = reported
    assert not healthy and "500 etcd is down" in error
    assert server.requests[2].url.params.get("watch") is None  # a list, not a resume
    assert informer.healthy and informer.last_error == ""
    await api.aclose()


async def test_an_unreachable_server_never_ends_the_informer(
        running: Callable[[kube.Informer], None]) -> None:
    async def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused")

    server = FakeServer(refuse, listing("10", obj("a", "1")), never)
    api = client(server)
    informer = kube.Informer(api, "pods")
    running(informer)
    await server.wait_for(1)
    async with asyncio.timeout(5):
        await informer.synced.wait()
    assert list(informer.cache) == ["ns/a"]
    await api.aclose()


async def test_a_coroutine_handler_is_awaited_and_one_that_fails_gets_a_fresh_list(
        running: Callable[[kube.Informer], None]) -> None:
    seen: Seen = []
    failures = [RuntimeError("handler broke")]

    async def handler(kind: str, o: kube.Obj) -> None:
        await asyncio.sleep(0)
        if kind == "MODIFIED" and failures:
            raise failures.pop()
        seen.append((kind, kube.key(o)))

    server = FakeServer(listing("10", obj("a", "1")),
                        watch(("MODIFIED", obj("a", "11"))),
                        listing("11", obj("a", "11")), never)
    api = client(server)
    informer = kube.Informer(api, "pods", handler=handler)
    running(informer)
    await server.wait_for(4)
    # the handler failed on MODIFIED: an unexpected error lists again, so nothing is lost
    assert seen == [("ADDED", "ns/a"), ("ADDED", "ns/a")]
    assert informer.cache["ns/a"]["metadata"]["resourceVersion"] == "11"
    await api.aclose()



async def test_the_cache_holds_objects_without_their_managed_fields(
        running: Callable[[kube.Informer], None]) -> None:
    fields = [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]
    listed, watched = obj("a", "1"), obj("b", "11")
    listed["metadata"]["managedFields"] = fields
    watched["metadata"]["managedFields"] = fields
    server = FakeServer(listing("10", listed), watch(("ADDED", watched)), never)
    handed: list[kube.Obj] = []
    api = client(server)
    informer = kube.Informer(api, "pods", namespace="ns",
                             handler=lambda kind, o: handed.append(o))
    running(informer)
    await server.wait_for(3)
    assert set(informer.cache) == {"ns/a", "ns/b"}
    for cached in [*informer.cache.values(), *handed]:
        assert "managedFields" not in cached["metadata"]
        assert cached["metadata"]["resourceVersion"] in ("1", "11")
    await api.aclose()


def test_a_subset_keeps_what_it_selects_and_follows_its_source() -> None:
    source = kube.Informer(client(FakeServer()), "pods")
    told: Seen = []
    subset = kube.Subset(source, lambda o: (o.get("spec") or {}).get("mine") is True,
                         namespace="ns", handler=lambda kind, o: told.append((kind, kube.key(o))))
    mine, other = obj("a", "1", spec={"mine": True}), obj("b", "2", spec={"mine": False})
    subset.observe("ADDED", mine)
    subset.observe("ADDED", other)
    assert subset.cache == {"ns/a": mine} and told == [("ADDED", "ns/a")]
    no_longer = obj("a", "3", spec={"mine": False})
    subset.observe("MODIFIED", no_longer)  # no longer selected: gone from the subset
    subset.observe("DELETED", other)  # never kept: nothing to tell
    assert subset.cache == {} and told == [("ADDED", "ns/a"), ("DELETED", "ns/a")]
    assert subset.generation == 2
    assert not subset.synced.is_set()
    source.synced.set()
    source.last_error = "boom"
    assert subset.synced.is_set() and subset.last_error == "boom"
    assert subset.resource == "pods" and subset.namespace == "ns"


async def test_a_burst_of_events_lets_the_rest_of_the_loop_run_and_each_is_trimmed(
        running: Callable[[kube.Informer], None]) -> None:
    """A thousand Pods deleted at once arrive already read: hook calls and dashboard pages
    must not wait for all of them to be handled."""
    burst = [("ADDED", obj(f"p{n}", str(100 + n), spec={"drop": 1, "keep": n}))
             for n in range(64)]
    server = FakeServer(listing("10", *(obj(f"l{n}", str(n)) for n in range(40))),
                        watch(*burst), never)
    ticks = [0]
    at_event: list[int] = []

    def handler(kind: str, o: kube.Obj) -> None:
        at_event.append(ticks[0])

    def trim(o: kube.Obj) -> kube.Obj:
        o.get("spec", {}).pop("drop", None)
        return o

    async def ticking() -> None:
        while True:
            ticks[0] += 1
            await asyncio.sleep(0)

    api = client(server)
    informer = kube.Informer(api, "pods", handler=handler, trim=trim)
    ticker = asyncio.create_task(ticking())
    running(informer)
    await server.wait_for(3)
    ticker.cancel()
    listed, watched = at_event[:40], at_event[40:]
    assert len(watched) == 64
    assert len(set(listed)) > 1 and len(set(watched)) > 1, "the loop ran in between"
    assert all(o["spec"] == {"keep": n} for n, o in enumerate(
        informer.cache[f"ns/p{n}"] for n in range(64)))
    await api.aclose()


async def test_a_listing_is_read_item_by_item_and_an_item_that_is_no_object_is_skipped(
        running: Callable[[kube.Informer], None]) -> None:
    listed = httpx.Response(200, json={"kind": "List", "metadata": {"resourceVersion": "10"},
                                       "items": [obj("a", "1"), "garbled", obj("b", "2")]})
    server = FakeServer(listed, never)
    api = client(server)
    informer = kube.Informer(api, "pods")
    running(informer)
    await server.wait_for(2)
    assert sorted(informer.cache) == ["ns/a", "ns/b"]
    assert informer.resource_version == "10"
    await api.aclose()


async def test_a_listing_that_is_not_a_list_is_an_error() -> None:
    api = client(FakeServer(httpx.Response(200, json={"metadata": {}, "items": {"a": 1}}),
                            httpx.Response(200, json=["not", "an", "object"]),
                            httpx.Response(200, text="<html>a proxy's page</html>"),
                            status(403, "forbidden")))
    for expected in ("not a list", "not a list", "not JSON", "403 forbidden"):
        with pytest.raises(kube.KubeError, match=expected):
            await api.list("pods")
    await api.aclose()


async def test_the_typed_fields_follow_the_cache_through_list_watch_and_relist(
        running: Callable[[kube.Informer], None]) -> None:
    """Each cached object is decoded once, when cached, and let go when the cache lets it go:
    the handler already reads the new object's typed fields, and nothing is kept for a
    replaced, deleted or re-listed object (else the typed copies would grow for ever)."""
    a2 = obj("a", "12", spec={"nodeName": "n2"})
    server = FakeServer(
        listing("10", obj("a", "1", spec={"nodeName": "n1"}), obj("b", "2")),
        watch(("MODIFIED", a2), ("DELETED", obj("b", "13")),
              ("ERROR", {"kind": "Status", "code": 410, "message": "too old"})),
        listing("20", obj("c", "21")),
        never)
    decoded = objects.Decoded(objects.Pod)
    nodes_seen: list[tuple[str, str]] = []
    api = client(server)
    informer = kube.Informer(api, "pods", decoded=decoded, handler=lambda kind, o: (
        nodes_seen.append((kind, decoded.read(o).spec.node_name))))
    running(informer)
    await server.wait_for(4)
    assert nodes_seen == [("ADDED", "n1"), ("ADDED", ""), ("MODIFIED", "n2"), ("DELETED", ""),
                          ("DELETED", "n2"), ("ADDED", "")]
    (cached,) = informer.cache.values()
    assert len(decoded) == 1
    assert decoded.read(cached) is decoded.read(cached)  # kept, not decoded on each read
    assert decoded.read(cached).metadata.key == "ns/c"
    await api.aclose()
