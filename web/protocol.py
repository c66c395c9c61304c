"""What the dashboard reads of the scheduler: the parts of the cluster model it needs
(``sunk.wiring.DashboardSource`` provides them), as protocols, so that the dashboard depends
on no client and tests can build a scheduler from plain data (``tests/unit/web/sample.py``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from sunk.model.nodeindex import NodeIndex
from sunk.model.state import SchedulerState
from sunk.policy.engine import PolicyEngine
from sunk.policy.loader import PolicyStatus, RecentError
from sunk.settings import Settings
from sunk.slurm.job import Job


class PolicySource(Protocol):
    """``sunk.policy.PolicyStore``: its status, and the engine in force (for the documents)."""

    def status(self) -> PolicyStatus: ...

    def recent_errors(self) -> list[RecentError]:
        """Expressions that failed on Pods lately, newest first."""
        ...

    @property
    def engine(self) -> PolicyEngine: ...


class LatencyView(Protocol):
    """``sunk.runtime.trends.Latency``: one histogram's observations within one interval (seconds;
    ``p50`` and ``p99`` at bucket resolution; None when nothing was observed)."""

    @property
    def count(self) -> float: ...

    @property
    def mean(self) -> float | None: ...

    @property
    def p50(self) -> float | None: ...

    @property
    def p99(self) -> float | None: ...


class TrendPointView(Protocol):
    """``sunk.runtime.trends.TrendPoint``: what the scheduler did in the ``seconds`` up to
    ``at``."""

    @property
    def at(self) -> float: ...

    @property
    def seconds(self) -> float: ...

    @property
    def bound(self) -> float: ...

    @property
    def submitted(self) -> float: ...

    @property
    def rejected(self) -> float: ...

    @property
    def latency(self) -> LatencyView: ...

    @property
    def gang_latency(self) -> LatencyView: ...


class TrendsSource(Protocol):
    """``sunk.runtime.trends.TrendRecorder``: a point every ``interval`` seconds, for the last
    ``window`` seconds, oldest first."""

    @property
    def interval(self) -> float: ...

    @property
    def window(self) -> float: ...

    @property
    def points(self) -> Sequence[TrendPointView]: ...


class SchedulerView(Protocol):
    """What the dashboard reads of the scheduler; ``sunk.wiring.DashboardSource`` satisfies it."""

    @property
    def state(self) -> SchedulerState:
        """What the scheduler's loops write as things happen: Pod records, gang records
        (``gangs``, and ``gang_of`` from a Pod to its gang), Slurm nodes, health."""
        ...

    @property
    def settings(self) -> Settings: ...

    @property
    def policies(self) -> PolicySource: ...

    @property
    def jobs(self) -> Mapping[int, Job]: ...

    @property
    def trends(self) -> TrendsSource:
        """The scheduler's own throughput and latency over the last hour, from its metrics."""
        ...

    def pod(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The Pod object, as the scheduler's cache holds it (trimmed of what it never reads)."""
        ...

    def node(self, name: str) -> Mapping[str, Any] | None:
        """The Kubernetes Node ``name``, as the scheduler's cache holds it."""
        ...

    @property
    def node_index(self) -> NodeIndex:
        """Slurm node -> its live slurmd Pod -> its Kubernetes Node: the scheduler's own index."""
        ...

    def kube_problem(self) -> str:
        """What is wrong with the watches of the API server ("" if nothing), including that
        they have not listed everything once yet."""
        ...

    def node_requests(self, node: str) -> Mapping[str, int]:
        """What the Pods bound to Kubernetes Node ``node`` request, counting only those a node
        lock leaves in place (``sunk.plans.fit.NodeUsage``; CPU in millicores, memory in bytes)."""
        ...

    async def pod_events(self, namespace: str, name: str, uid: str
                         ) -> list[dict[str, Any]] | str:
        """The Pod's core/v1 Events as the API server returns them (``involvedObject.uid`` is
        ``uid``), in any order; or, if the API server did not answer, why not (shown on the
        Pod's page). The only call to the API server the dashboard makes: it caches the
        answer and bounds the wait, so an implementation need do neither."""
        ...
