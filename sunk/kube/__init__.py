"""The Kubernetes API: the only package that imports kr8s (to read credentials).

``client``: one HTTP session to the API server, calls and watch streams; ``informer``:
list-then-watch caches; ``trim``: what the Pod cache keeps of a Pod; ``writes``: what the
scheduler writes, with typed bodies.
"""

from sunk.kube.client import (
    UNREACHABLE,
    Client,
    Credentials,
    KubeError,
    Obj,
    api_path,
    close,
    connect,
    connect_waiting,
    load_credentials,
    request,
)
from sunk.kube.informer import Handler, Informer, Subset, created, key
from sunk.kube.trim import trim_pod
from sunk.kube.writes import (
    annotate,
    annotate_showing_waiting,
    bind,
    delete_pod,
    event,
    evict,
    patch_status,
    set_taints,
    show_waiting,
)

__all__ = [
    "UNREACHABLE",
    "Client",
    "Credentials",
    "Handler",
    "Informer",
    "KubeError",
    "Obj",
    "Subset",
    "annotate",
    "annotate_showing_waiting",
    "api_path",
    "bind",
    "close",
    "connect",
    "connect_waiting",
    "created",
    "delete_pod",
    "event",
    "evict",
    "key",
    "load_credentials",
    "patch_status",
    "request",
    "set_taints",
    "show_waiting",
    "trim_pod",
]
