"""The dashboard: HTML pages refreshed in place by htmx, and the same views as a JSON API.

Read-only (GET only), served on the scheduler's own event loop, and built on the scheduler's
in-memory state (see :mod:`web.pods`, :mod:`web.gangs`, :mod:`web.nodes`, :mod:`web.policies`):
only a Pod's own page asks for anything, its Events (through :meth:`SchedulerView.pod_events`,
so this package imports no client), and at most once per :data:`EVENTS_TTL` per Pod.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Final
from urllib.parse import quote, urlencode

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from litestar import Litestar, get
from litestar.config.compression import CompressionConfig
from litestar.exceptions import NotFoundException
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import JsonRenderPlugin
from litestar.params import FromPath, QueryParameter
from litestar.plugins.htmx import HTMXPlugin, HTMXRequest
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.response import Redirect, Template
from litestar.static_files import create_static_files_router
from litestar.template import TemplateConfig

from web import gangs, nodes, pods, policies, trends
from web.auth import Guard
from web.formatting import clock, duration, mebibytes, pretty_json
from web.protocol import SchedulerView
from web.summary import summary
from web.viewmodels import (
    DEFAULT_LIMIT,
    NODE_FILTERS,
    POD_STATES,
    EventView,
    GangDetail,
    GangList,
    NodeList,
    PodDetail,
    PodList,
    PolicyView,
    Summary,
    Trends,
)

HERE: Final = Path(__file__).parent
TEMPLATES: Final = HERE / "templates"
STATIC: Final = HERE / "static"
#: How often open pages refresh themselves (seconds).
REFRESH_SECONDS: Final = 2
#: A Pod's Events are fetched from the API server at most this often (seconds).
EVENTS_TTL: Final = 5.0
#: How long a Pod's page waits for its Events (seconds) before it shows the rest without them.
EVENTS_TIMEOUT: Final = 5.0
MAX_EVENTS: Final = 50
#: The largest ``offset`` the Pods list takes: far past any cluster, small enough to stay an
#: ordinary int in every URL and JSON reader.
MAX_OFFSET: Final = 1_000_000_000

#: (namespace, name, uid) -> the Pod's Events, newest first, or why they could not be read.
EventSource = Callable[[str, str, str], Awaitable[list[EventView] | str]]


# -- Events of one Pod ---------------------------------------------------------------------------


def cached_events(scheduler: SchedulerView, *, ttl: float = EVENTS_TTL) -> EventSource:
    """Events of one Pod through the scheduler (by uid), cached for ``ttl`` seconds so a page
    refreshing every couple of seconds costs at most one small call per ``ttl``. A failure is
    not cached: the next refresh tries again."""
    cache: dict[str, tuple[float, list[EventView]]] = {}

    async def fetch(namespace: str, name: str, uid: str) -> list[EventView] | str:
        now = time.monotonic()
        if (hit := cache.get(uid)) is not None and hit[0] > now:
            return hit[1]
        try:
            async with asyncio.timeout(EVENTS_TIMEOUT):
                answer = await scheduler.pod_events(namespace, name, uid)
        except TimeoutError:
            return f"Events could not be read: no answer within {EVENTS_TIMEOUT:g} s"
        if isinstance(answer, str):
            return f"Events could not be read: {answer}"
        events = [pods.event_view(e) for e in answer]
        epoch = datetime.datetime.min.replace(tzinfo=datetime.UTC)
        events.sort(key=lambda e: e.last_seen or epoch, reverse=True)
        events = events[:MAX_EVENTS]
        if len(cache) > 256:
            for key in [k for k, (until, _) in cache.items() if until <= now]:
                del cache[key]
        cache[uid] = (now + ttl, events)
        return events

    return fetch


def _environment() -> Environment:
    """Autoescaping on for every template, whatever its name: all of it is HTML. Every template
    is compiled here, at start-up (Jinja caches them; auto_reload off)."""
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=True,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                      auto_reload=False)
    env.filters.update(duration=duration, mebibytes=mebibytes, clock=clock,
                       pretty=pretty_json)
    env.globals.update(refresh_seconds=REFRESH_SECONDS, pod_states=POD_STATES,
                       node_filters=NODE_FILTERS)
    for name in env.list_templates():  # compiled now, not on a first request (~30 ms of it)
        env.get_template(name)
    return env


# -- the app -------------------------------------------------------------------------------------

_NO_STORE: Final = {"Cache-Control": "no-store", "Vary": "HX-Request"}

Namespace = Annotated[str, QueryParameter(name="namespace", description="only this namespace")]
PodStateFilter = Annotated[str, QueryParameter(
    name="state", description="only Pods in this state: " + ", ".join(POD_STATES))]
NodeStateFilter = Annotated[str, QueryParameter(
    name="state", description="only nodes with this Slurm state flag or lock: "
    + ", ".join(NODE_FILTERS))]
Search = Annotated[str, QueryParameter(name="q", description="a substring of the Pod name")]
Limit = Annotated[int, QueryParameter(name="limit", ge=1, le=100_000,
                                      description="at most this many Pods")]
Offset = Annotated[int, QueryParameter(
    name="offset", ge=0, le=MAX_OFFSET,
    description="skip this many matching Pods (0: from the first); past the last, no rows")]


def _query(**params: str | int) -> str:
    kept = {k: v for k, v in params.items() if v not in ("", None)}
    return f"?{urlencode(kept)}" if kept else ""


@dataclass(frozen=True, slots=True)
class Paging:
    """Where a page of the Pods list is among the matching Pods, and links to the pages around
    it, each keeping the filters and the limit ("" where there is no such page)."""

    #: The rows shown, counted from 1 among the matching Pods (0 and 0: none).
    first: int
    last: int
    previous_url: str
    next_url: str
    #: The first page's, "" when this is it.
    first_url: str
    #: The offset is past the last matching Pod: no rows, though some match.
    past_end: bool


def paging(listing: PodList, url: Callable[[int], str]) -> Paging:
    """``url(offset)``: the page that starts at ``offset``. Previous goes back ``limit`` rows,
    but from past the end, to the last page that has rows."""
    offset, limit, matching, shown = (listing.offset, listing.limit, listing.matching,
                                      len(listing.pods))
    last_page = (matching - 1) // limit * limit if matching else 0
    return Paging(
        first=offset + 1 if shown else 0, last=offset + shown,
        previous_url=url(min(max(0, offset - limit), last_page)) if offset else "",
        next_url=url(offset + limit) if offset + limit < matching else "",
        first_url=url(0) if offset else "",
        past_end=not shown and 0 < matching <= offset)


def create_app(scheduler: SchedulerView, *, auth_token: str | None = None,
               basic_auth: tuple[str, str] | None = None) -> Litestar:
    """The dashboard of ``scheduler``; ``auth_token`` and ``basic_auth`` as
    :func:`web.auth.auth_from_env` reads them (neither: no authentication)."""
    fetch_events = cached_events(scheduler)
    header_plots = trends.cached_plots(scheduler)

    def now() -> float:
        return time.time()

    def page(name: str, request: HTMXRequest, context: dict[str, Any],
             status_code: int = 200) -> Template:
        """The whole page, or for htmx's refresh only its ``_name.html`` part (plus the header,
        swapped out of band); a history restore gets the whole page."""
        partial = bool(request.htmx) and not request.htmx.history_restore_request
        context = {**context, "summary": summary(scheduler, now()),
                   "trends": header_plots(), "page": name, "oob": partial}
        template = f"_{name}_partial.html" if partial else f"{name}.html"
        return Template(template_name=template, context=context, status_code=status_code,
                        headers=_NO_STORE)

    async def detail(namespace: str, name: str) -> PodDetail | None:
        rec = scheduler.state.pods.get(f"{namespace}/{name}")
        if rec is None:
            return None
        answer = await fetch_events(namespace, name, rec.uid)
        found, error = ([], answer) if isinstance(answer, str) else (answer, "")
        # The state is read after the await: it is current, and read in one go.
        return pods.pod_detail(scheduler, namespace, name, now(), events=found,
                               events_error=error)

    # -- HTML --------------------------------------------------------------------------------

    @get("/", include_in_schema=False, sync_to_thread=False)
    def index() -> Redirect:
        return Redirect("/pods")

    @get("/pods", include_in_schema=False, sync_to_thread=False)
    def pods_page(request: HTMXRequest, namespace: Namespace = "",
                  state_filter: PodStateFilter = "", search: Search = "",
                  offset: Offset = 0, limit: Limit = DEFAULT_LIMIT) -> Template:
        listing = pods.pods(scheduler, now(), namespace=namespace, state=state_filter,
                             query=search, offset=offset, limit=limit)
        kept_limit = limit if limit != DEFAULT_LIMIT else ""

        def url(at: int) -> str:
            """This page's filters and limit, from ``at``; the refresh asks for this page's own
            (so it stays on it), a change of filters starts again from the first."""
            return "/pods" + _query(namespace=namespace, state=state_filter, q=search,
                                    offset=at or "", limit=kept_limit)

        return page("pods", request, {
            "listing": listing, "namespace": namespace, "state": state_filter, "q": search,
            "limit": kept_limit, "paging": paging(listing, url), "self_url": url(offset)})

    @get("/pods/{namespace:str}/{name:str}", include_in_schema=False)
    async def pod_page(request: HTMXRequest, namespace: FromPath[str], name: FromPath[str]
                       ) -> Template:
        found = await detail(namespace, name)
        gone = found is None
        status = 200
        if gone:  # 286 stops htmx polling; a direct visit gets a real 404
            status = 286 if request.htmx else 404
        return page("pod", request, {
            "detail": found, "namespace": namespace, "name": name,
            "self_url": f"/pods/{namespace}/{name}"}, status_code=status)

    @get("/gangs", include_in_schema=False, sync_to_thread=False)
    def gangs_page(request: HTMXRequest) -> Template:
        return page("gangs", request, {"listing": gangs.gangs(scheduler),
                                       "self_url": "/gangs"})

    @get("/gangs/{namespace:str}/{name:str}", include_in_schema=False, sync_to_thread=False)
    def gang_page(request: HTMXRequest, namespace: FromPath[str], name: FromPath[str]
                  ) -> Template:
        found = gangs.gang_detail(scheduler, namespace, name)
        status = 200
        if found is None:  # as for a Pod: 286 stops htmx polling, a direct visit gets a 404
            status = 286 if request.htmx else 404
        return page("gang", request, {
            "detail": found, "namespace": namespace, "name": name,
            "self_url": f"/gangs/{quote(namespace, safe='')}/{quote(name, safe='')}"},
            status_code=status)

    @get("/nodes", include_in_schema=False, sync_to_thread=False)
    def nodes_page(request: HTMXRequest, state_filter: NodeStateFilter = "") -> Template:
        return page("nodes", request, {
            "listing": nodes.nodes(scheduler, state=state_filter), "state": state_filter,
            "self_url": "/nodes" + _query(state=state_filter)})

    @get("/policies", include_in_schema=False, sync_to_thread=False)
    def policies_page(request: HTMXRequest) -> Template:
        return page("policies", request, {"policy": policies.policies(scheduler),
                                          "self_url": "/policies"})

    # -- JSON --------------------------------------------------------------------------------

    @get("/api/v1/summary", sync_to_thread=False, tags=["dashboard"])
    def api_summary() -> Summary:
        """Connection health and counts: the dashboard's header."""
        return summary(scheduler, now())

    @get("/api/v1/pods", sync_to_thread=False, tags=["dashboard"])
    def api_pods(namespace: Namespace = "", state_filter: PodStateFilter = "",
                 search: Search = "", offset: Offset = 0,
                 limit: Limit = DEFAULT_LIMIT) -> PodList:
        """Pods of this scheduler, sorted by namespace and name: of those matching the
        filters, ``limit`` from the ``offset``-th on (the next page: ``offset`` + ``limit``,
        while that is below ``matching``)."""
        return pods.pods(scheduler, now(), namespace=namespace, state=state_filter,
                          query=search, offset=offset, limit=limit)

    @get("/api/v1/pods/{namespace:str}/{name:str}", tags=["dashboard"])
    async def api_pod(namespace: FromPath[str], name: FromPath[str]) -> PodDetail:
        """One Pod: its row, job description, Slurm's job record, history and Events."""
        found = await detail(namespace, name)
        if found is None:
            raise NotFoundException(f"no Pod {namespace}/{name} in the scheduler's state")
        return found

    @get("/api/v1/gangs", sync_to_thread=False, tags=["dashboard"])
    def api_gangs() -> GangList:
        """Gangs (groups of Pods that become one multi-node Slurm job) and their members in
        rank order: those that wait or can never run first, then by namespace and name."""
        return gangs.gangs(scheduler)

    @get("/api/v1/gangs/{namespace:str}/{name:str}", sync_to_thread=False, tags=["dashboard"])
    def api_gang(namespace: FromPath[str], name: FromPath[str]) -> GangDetail:
        """One gang: its row, Slurm's record of its job and its history."""
        found = gangs.gang_detail(scheduler, namespace, name)
        if found is None:
            raise NotFoundException(f"no gang {namespace}/{name} in the scheduler's state")
        return found

    @get("/api/v1/nodes", sync_to_thread=False, tags=["dashboard"])
    def api_nodes(state_filter: NodeStateFilter = "") -> NodeList:
        """Slurm nodes with their Kubernetes Node, lock, drain, jobs, Pods and free resources."""
        return nodes.nodes(scheduler, state=state_filter)

    @get("/api/v1/policies", sync_to_thread=False, tags=["dashboard"])
    def api_policies() -> PolicyView:
        """The policy set in force and the last reload's problems."""
        return policies.policies(scheduler)

    @get("/api/v1/trends", sync_to_thread=False, tags=["dashboard"])
    def api_trends() -> Trends:
        """The scheduler's own throughput and latency over the last hour, from its metrics:
        one sample per interval (10 s), oldest first; the latency quantiles are approximate,
        at the resolution of the histogram's buckets. The header's plots."""
        return trends.trends(scheduler)

    return Litestar(
        route_handlers=[index, pods_page, pod_page, gangs_page, gang_page, nodes_page,
                        policies_page, api_summary, api_pods, api_pod, api_gangs, api_gang,
                        api_nodes, api_policies, api_trends,
                        create_static_files_router("/static", directories=[STATIC])],
        template_config=TemplateConfig(
            instance=JinjaTemplateEngine.from_environment(_environment())),
        plugins=[HTMXPlugin()],
        # A refresh of 1,000 Pods is ~550 kB of HTML and ~25 kB gzipped: worth it through a
        # port-forward; level 6 costs a few ms where 9 costs several times more.
        compression_config=CompressionConfig(backend="gzip", minimum_size=2048,
                                             gzip_compress_level=6),
        middleware=[Guard(auth_token, basic_auth)],
        openapi_config=OpenAPIConfig(
            title="sunk dashboard", version="v1", path="/schema",
            description="Read-only views of what the sunk scheduler is doing.",
            use_handler_docstrings=True, render_plugins=[JsonRenderPlugin()]),
        logging_config=None, debug=False)
