"""Prometheus metrics of the scheduler (served on --metrics-bind-address at /metrics)."""

from prometheus_client import Counter, Gauge, Histogram

JOBS_SUBMITTED = Counter("sunk_jobs_submitted_total", "Placeholder jobs submitted to Slurm")
SUBMIT_ERRORS = Counter("sunk_submit_errors_total", "Job submissions slurmrestd refused or lost")
JOBS_CANCELLED = Counter("sunk_jobs_cancelled_total", "Placeholder jobs cancelled by sunk")
PODS_BOUND = Counter("sunk_pods_bound_total", "Pods bound to a Node")
PODS_REJECTED = Counter("sunk_pods_rejected_total", "Pods rejected by policy")
PODS_DELETED = Counter("sunk_pods_deleted_total", "Pods deleted because their job ended")
RECONCILE_ERRORS = Counter("sunk_reconcile_errors_total", "Reconciles that failed and were retried")
BIND_LATENCY = Histogram("sunk_pod_creation_to_bound_seconds",
                         "Time from a Pod's creation to its binding",
                         buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600))
GANG_BIND_LATENCY = Histogram("sunk_gang_start_to_bound_seconds",
                              "Time from a gang's job start (as sunk learns it) to its last "
                              "member bound",
                              buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60))
SLURM_UP = Gauge("sunk_slurm_up", "Whether the last call to slurmrestd worked")
KUBE_UP = Gauge("sunk_kube_up", "Whether every watch of the API server is healthy")
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
NODE_CAPACITY_MISMATCH = Gauge(
    "sunk_node_capacity_mismatch", "What Slurm's node definition offers minus what Kubernetes "
    "leaves for Slurm (allocatable minus the slurmd and DaemonSet Pods' requests); 0 when they "
    "agree, above 0 when Slurm may place more than the Node holds", ["node", "resource"])
SLURM_REQUESTS = Counter("sunk_slurm_requests_total", "Calls to slurmrestd, by what they ask",
                         ["call"])
KUBE_REQUESTS = Counter("sunk_kube_requests_total", "Calls to the API server (watches included), "
                        "by verb and resource", ["verb", "resource"])
