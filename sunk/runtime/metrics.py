"""Prometheus metrics of the scheduler (served on --metrics-bind-address at /metrics)."""

import asyncio
import gc
import time
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

#: Each metric's children made so far, by label values (:func:`child`).
_children: dict[tuple[int, tuple[str, ...]], Any] = {}


def child(metric: Any, *labels: str) -> Any:
    """``metric.labels(*labels)``, made once per label values: ``labels()`` takes a lock and
    builds its key at every call, and the clients and the hook API count several calls a Pod.
    For metrics whose label values are few (methods, resources, hooks, statuses)."""
    key = (id(metric), labels)
    if (made := _children.get(key)) is None:
        made = _children[key] = metric.labels(*labels)
    return made


JOBS_SUBMITTED = Counter("sunk_jobs_submitted_total", "Placeholder jobs submitted to Slurm")
SUBMIT_ERRORS = Counter("sunk_submit_errors_total", "Job submissions slurmrestd refused or lost")
JOBS_CANCELLED = Counter("sunk_jobs_cancelled_total", "Placeholder jobs cancelled by sunk")
PODS_BOUND = Counter("sunk_pods_bound_total", "Pods bound to a Node")
PODS_REJECTED = Counter("sunk_pods_rejected_total", "Pods rejected by policy")
PODS_DELETED = Counter("sunk_pods_deleted_total", "Pods deleted because their job ended")
RECONCILE_ERRORS = Counter("sunk_reconcile_errors_total", "Reconciles that failed and were retried")
INTERNAL_ERRORS = Counter("sunk_internal_errors_total", "Reconciles that failed on a fault of "
                          "sunk's own (an unexpected exception, logged with its traceback): "
                          "retried, never a rejection of the Pod")
BIND_LATENCY = Histogram("sunk_pod_creation_to_bound_seconds",
                         "Time from a Pod's creation to its binding, by namespace",
                         ["namespace"],
                         buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600))
PODS_WAITING = Gauge("sunk_pods_waiting", "Pods whose job waits in Slurm's queue, by namespace, "
                     "partition and Slurm's reason", ["namespace", "partition", "reason"])
START_ESTIMATE_ERROR = Histogram(
    "sunk_start_estimate_error_seconds", "How far Slurm's last start estimate for a job of a "
    "Pod was from the moment the job started (absolute)",
    buckets=(1, 5, 10, 30, 60, 300, 600, 1800, 3600, 14400))
CONDITIONS_WRITTEN = Counter("sunk_pod_conditions_written_total", "PodScheduled conditions "
                             "written on Pods that wait, by the condition's reason", ["reason"])
GANG_BIND_LATENCY = Histogram("sunk_gang_start_to_bound_seconds",
                              "Time from a gang's job start (as sunk learns it) to its last "
                              "member bound",
                              buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60))
SLURM_UP = Gauge("sunk_slurm_up", "Whether the last call to slurmrestd worked")
KUBE_UP = Gauge("sunk_kube_up", "Whether every watch of the API server is healthy")
ASSUMED_WRITES = Gauge("sunk_assumed_writes", "Writes to the API server (an object's "
                       "annotations, a binding, a taint) its watch has not shown yet; one that "
                       "stays up means a watch that lags")
ORPHANS_CANCELLED = Counter("sunk_orphaned_jobs_cancelled_total",
                            "Jobs of ours cancelled because their Pod no longer exists")
ANNOTATIONS_IGNORED = Counter("sunk_pod_annotations_ignored_total",
                              "Pods whose scheduler-owned annotations were not written for them")
HOOK_CALLS = Counter("sunk_hook_calls_total", "Hook API calls", ["hook", "status"])
LOCK_TRANSITIONS = Counter("sunk_node_lock_transitions_total", "Node lock state changes",
                           ["state"])
EVICTIONS = Counter("sunk_lock_evictions_total", "Evictions made to lock nodes", ["result"])
REFITS = Counter("sunk_refits_total", "Jobs cancelled and resubmitted because Slurm chose a Node "
                 "without room for the Pod in Kubernetes' view")
NODE_PODS_NOT_COUNTED = Gauge(
    "sunk_node_pods_not_counted_by_slurm", "Pods on the Node taking room that Slurm does not "
    "know is taken, as last seen when a Pod could not be bound where Slurm ran its job (0 once "
    "a Pod is bound there again)", ["node"])
NODE_CAPACITY_MISMATCH = Gauge(
    "sunk_node_capacity_mismatch", "What Slurm's node definition offers minus what Kubernetes "
    "leaves for Slurm (allocatable minus the slurmd and DaemonSet Pods' requests); 0 when they "
    "agree, above 0 when Slurm may place more than the Node holds", ["node", "resource"])
SLURM_REQUESTS = Counter("sunk_slurm_requests_total", "Calls to slurmrestd, by what they ask",
                         ["call"])
KUBE_REQUESTS = Counter("sunk_kube_requests_total", "Calls to the API server (watches included), "
                        "by verb and resource", ["verb", "resource"])

QUEUE_WAIT = Histogram("sunk_workqueue_wait_seconds", "How long a key waited in a work queue "
                       "for a worker (queue: pods, a Pod or gang to reconcile; nodes, a Node's "
                       "lock)", ["queue"],
                       buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5))

_PAUSE_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)
GC_PAUSE = Histogram("sunk_gc_pause_seconds", "Python's garbage collections, by generation: "
                     "the event loop (hooks, dashboard, watches) stands still meanwhile",
                     ["generation"], buckets=_PAUSE_BUCKETS)
LOOP_LAG = Histogram("sunk_event_loop_lag_seconds", "How late a timer of the event loop fires: "
                     "how long one piece of work held the loop (a request waits that long)",
                     buckets=_PAUSE_BUCKETS)


def watch_gc() -> None:
    """Time every garbage collection into :data:`GC_PAUSE` (once per process)."""
    started = [0.0]
    pauses = [GC_PAUSE.labels(generation=str(g)) for g in range(3)]

    def timed(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            pauses[info["generation"]].observe(time.perf_counter() - started[0])

    if not any(getattr(c, "__name__", "") == "timed" for c in gc.callbacks):
        gc.callbacks.append(timed)


async def watch_loop_lag(every: float = 0.25) -> None:
    """Forever: how late a timer fires, into :data:`LOOP_LAG`."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + every
        await asyncio.sleep(every)
        LOOP_LAG.observe(max(0.0, loop.time() - due))
