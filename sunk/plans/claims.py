"""A Pod's ResourceClaims as Slurm GRES, and Slurm's GPUs as the claims' allocation (pure).

Kubernetes asks for GPUs through Dynamic Resource Allocation (``resource.k8s.io/v1``): a Pod
names ResourceClaims, each asking for devices of a DeviceClass; a driver publishes each node's
devices in ResourceSlices; the scheduler picks the devices and writes them into the claim's
status before binding. sunk lets Slurm pick: a claim's request becomes GRES on the Pod's
placeholder job (:func:`claim_requests`, :func:`gres`), and once the job runs, the GPU indexes
Slurm gave it (``gres_detail``) become the claim's allocated devices, the node's devices with
those indexes (:func:`allocation`). A Slurm job and a Pod on one node then hold disjoint GPUs,
each knowing which.

Only what Slurm can be told is taken: a request of a DeviceClass the mapping names, for a count
of devices, narrowed at most by the driver and by the attribute that names the device's model
(its GRES type). Anything else (another selector, admin access, all devices, a prioritized
list, a constraint between requests) is refused with the reason, as is a claim in use by a Pod
on another node.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

GROUP = "resource.k8s.io"
VERSION = "v1"


@dataclass(frozen=True)
class DeviceMapping:
    """How DeviceClasses are told to Slurm (the chart's ``scheduler.dra`` values)."""

    #: DeviceClass name -> GRES name (``gpu.nvidia.com`` -> ``gpu``).
    classes: Mapping[str, str] = field(default_factory=dict)
    #: The driver whose devices the classes select (its ResourceSlices give the indexes).
    driver: str = "gpu.nvidia.com"
    #: The attribute naming a device's model, and each model's GRES type (a selector on the
    #: model becomes ``gres/gpu:<type>:N``).
    type_attribute: str = "productName"
    types: Mapping[str, str] = field(default_factory=dict)
    #: The attribute holding a device's index on its node (Slurm's GRES index).
    index_attribute: str = "index"


class Unmappable(ValueError):
    """A claim asks for something Slurm cannot be told: the Pod is refused (``reason``)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class NotReady(LookupError):
    """A claim the Pod needs is not there yet, or is held elsewhere for now: the Pod waits."""


@dataclass(frozen=True)
class ClaimRequest:
    """One request of one claim, as Slurm gets it: ``count`` devices of GRES ``gres``."""

    claim: str
    request: str
    gres: str
    gres_type: str | None
    count: int


@dataclass(frozen=True)
class ClaimsSeen:
    """What a Pod's placement reads of claims: its namespace's claims by name, and each
    Kubernetes Node's devices of the mapped driver that no one Slurm knows of holds (a node
    missing: not known, not counted against)."""

    by_name: Mapping[str, Mapping[str, Any]]
    free: Mapping[str, int] = field(default_factory=dict)


def free_devices(slices: Iterable[Mapping[str, Any]], all_claims: Iterable[Mapping[str, Any]],
                 mapping: DeviceMapping, slurm_knows: Callable[[str, str], bool]
                 ) -> dict[str, int]:
    """Each Node's devices of the mapped driver, less those a claim holds for Pods Slurm does
    not know of (``slurm_knows(namespace, pod name)``: a Pod sunk placed). Slurm counts its own
    jobs' and sunk's Pods' GPUs; these it does not."""
    free: dict[str, int] = {}
    for piece in slices:
        spec = piece.get("spec") or {}
        if spec.get("driver") == mapping.driver and spec.get("nodeName"):
            node = str(spec["nodeName"])
            free[node] = free.get(node, 0) + len(spec.get("devices") or ())
    for claim in all_claims:
        meta = claim.get("metadata") or {}
        status = claim.get("status") or {}
        users = [r for r in status.get("reservedFor") or () if isinstance(r, Mapping)]
        if any(slurm_knows(str(meta.get("namespace")), str(r.get("name"))) for r in users):
            continue
        for driver, pool, _ in allocated_devices(claim):
            node = _allocated_node(status.get("allocation") or {}) or pool
            if driver == mapping.driver and node in free:
                free[node] -= 1
    return free


def _allocated_node(allocation: Mapping[str, Any]) -> str | None:
    """The one Node an allocation's node selector names by ``metadata.name``, if it does."""
    for term in (allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or ():
        for field_ in term.get("matchFields") or ():
            values = field_.get("values") or []
            if field_.get("key") == "metadata.name" and len(values) == 1:
                return str(values[0])
    return None


# -- which claims a Pod uses ----------------------------------------------------------------------
def claim_names(pod: Mapping[str, Any]) -> list[tuple[str, str | None]]:
    """The Pod's claims as ``(its name in the Pod, the ResourceClaim's name)``: a named claim's
    name, a template's generated claim as the Pod's status gives it (None until the
    resource-claim controller has made it)."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    made = {s.get("name"): s.get("resourceClaimName")
            for s in status.get("resourceClaimStatuses") or () if isinstance(s, Mapping)}
    names: list[tuple[str, str | None]] = []
    for entry in spec.get("resourceClaims") or ():
        if not isinstance(entry, Mapping):
            continue
        name = str(entry.get("name", ""))
        if entry.get("resourceClaimName"):
            names.append((name, str(entry["resourceClaimName"])))
        elif entry.get("resourceClaimTemplateName"):
            generated = made.get(name)
            names.append((name, str(generated) if generated else None))
    return names


def uses_claims(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("resourceClaims"))


# -- a claim's requests as GRES -----------------------------------------------------------------
_DRIVER = re.compile(r'^device\.driver\s*==\s*"(?P<value>[^"\\]*)"$')
_ATTRIBUTE = re.compile(r'^device\.attributes\["(?P<domain>[^"\\]+)"\]'
                        r'(?:\.(?P<attr>[A-Za-z_][A-Za-z0-9_]*)|\["(?P<key>[^"\\]+)"\])'
                        r'\s*==\s*"(?P<value>[^"\\]*)"$')


def _selector_type(expression: str, mapping: DeviceMapping) -> str | None:
    """The GRES type a CEL selector narrows the request to (None: it narrows nothing Slurm
    needs told). Raises Unmappable for a selector sunk cannot tell Slurm."""
    gres_type: str | None = None
    for term in (t.strip().strip("()").strip() for t in expression.split("&&")):
        if (m := _DRIVER.match(term)) is not None:
            if m["value"] != mapping.driver:
                raise Unmappable("UnmappableClaim", f"selector {expression!r} asks for driver "
                                                    f"{m['value']!r}; sunk maps {mapping.driver!r}")
            continue
        m = _ATTRIBUTE.match(term)
        attribute = m and (m["attr"] or m["key"])
        if m is None or m["domain"] != mapping.driver or attribute != mapping.type_attribute:
            raise Unmappable("UnmappableClaim", f"selector {expression[:200]!r} cannot be told "
                                                "to Slurm: sunk maps only device.driver and "
                                                f"device.attributes[{mapping.driver!r}]."
                                                f"{mapping.type_attribute} == \"...\"")
        if (named := mapping.types.get(m["value"])) is None:
            raise Unmappable("UnmappableClaim", f"no GRES type is mapped for "
                                                f"{mapping.type_attribute} {m['value']!r}")
        if gres_type not in (None, named):
            raise Unmappable("UnmappableClaim", f"selector {expression[:200]!r} names two models")
        gres_type = named
    return gres_type


def _request(claim: str, raw: Mapping[str, Any], mapping: DeviceMapping) -> ClaimRequest:
    name = str(raw.get("name", ""))
    where = f"claim {claim}, request {name}"
    if raw.get("firstAvailable"):
        raise Unmappable("UnmappableClaim", f"{where}: a prioritized list (firstAvailable) "
                                            "cannot be told to Slurm")
    exact = raw.get("exactly")
    if not isinstance(exact, Mapping):
        raise Unmappable("UnmappableClaim", f"{where}: no exact request")
    device_class = str(exact.get("deviceClassName", ""))
    if (gres_name := mapping.classes.get(device_class)) is None:
        raise Unmappable("UnknownDeviceClass", f"{where}: DeviceClass {device_class!r} is not "
                                               "mapped to a Slurm GRES (scheduler.dra.classes)")
    if exact.get("adminAccess"):
        raise Unmappable("UnmappableClaim", f"{where}: admin access to devices in use is not "
                                            "something Slurm gives")
    if (mode := exact.get("allocationMode") or "ExactCount") != "ExactCount":
        raise Unmappable("UnmappableClaim", f"{where}: allocationMode {mode} (sunk asks Slurm "
                                            "for a count of devices)")
    count = exact.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 1024:
        raise Unmappable("UnmappableClaim", f"{where}: count {count!r} is not a number of devices")
    gres_type = None
    for selector in exact.get("selectors") or ():
        cel = selector.get("cel") if isinstance(selector, Mapping) else None
        expression = cel.get("expression") if isinstance(cel, Mapping) else None
        if not isinstance(expression, str):
            raise Unmappable("UnmappableClaim", f"{where}: a selector sunk cannot read")
        found = _selector_type(expression, mapping)
        if found is not None and gres_type not in (None, found):
            raise Unmappable("UnmappableClaim", f"{where}: selectors name two models")
        gres_type = found or gres_type
    return ClaimRequest(claim, name, gres_name, gres_type, count)


def claim_requests(pod: Mapping[str, Any], claims: Mapping[str, Mapping[str, Any]],
                   mapping: DeviceMapping) -> tuple[ClaimRequest, ...]:
    """What the Pod's claims ask Slurm for (``claims``: the namespace's ResourceClaims by name).
    Raises NotReady while a claim is missing or in use by Pods elsewhere, and Unmappable for
    a claim Slurm cannot be told."""
    meta = pod.get("metadata") or {}
    uid = meta.get("uid")
    requests: list[ClaimRequest] = []
    for entry, name in claim_names(pod):
        if name is None:
            raise NotReady(f"the claim of {entry!r} has not been made from its template yet")
        claim = claims.get(name)
        if claim is None:
            raise NotReady(f"ResourceClaim {name} not found")
        spec = (claim.get("spec") or {}).get("devices") or {}
        if spec.get("constraints"):
            raise Unmappable("UnmappableClaim", f"claim {name}: constraints between requests "
                                                "cannot be told to Slurm")
        users = [r for r in (claim.get("status") or {}).get("reservedFor") or ()
                 if isinstance(r, Mapping) and r.get("uid") != uid]
        if users:
            who = ", ".join(str(r.get("name")) for r in users[:3])
            raise NotReady(f"claim {name} is in use by {who}: Slurm cannot be asked for the "
                           "devices it holds; waiting until it is released")
        requests += [_request(name, r, mapping) for r in spec.get("requests") or ()
                     if isinstance(r, Mapping)]
    return tuple(requests)


def gres(requests: Sequence[ClaimRequest], extra_gpus: int = 0,
         extra_type: str | None = None) -> str | None:
    """``gres/<name>[:<type>]:<count>`` for the job's ``tres_per_node``, summing the claims'
    requests (and ``extra_gpus`` asked as an extended resource); None if nothing is asked.
    Raises Unmappable when they name different GRES or models (one job gets one kind)."""
    kinds = {(r.gres, r.gres_type) for r in requests}
    if extra_gpus:
        kinds.add(("gpu", extra_type))
    names = {k for k, _ in kinds}
    types = {t for _, t in kinds if t is not None}
    if not kinds:
        return None
    if len(names) > 1 or len(types) > 1:
        raise Unmappable("UnmappableClaim", "the Pod's claims ask for different kinds of device "
                                            f"({', '.join(sorted(f'{n}:{t}' for n, t in kinds))}); "
                                            "one Slurm job is given one kind per node")
    count = sum(r.count for r in requests) + extra_gpus
    (gres_name,) = names
    return f"gres/{gres_name}:{types.pop()}:{count}" if types else f"gres/{gres_name}:{count}"


# -- Slurm's GPUs as the claims' devices -----------------------------------------------------------
_DETAIL = re.compile(r"(?P<name>[A-Za-z0-9_.-]+)(?::(?P<type>[^:(,]+))?(?::(?P<count>\d+))?"
                     r"\(IDX:(?P<idx>[0-9,\-]*)\)")


def _indexes(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        if first.isdigit() and (not last or last.isdigit()):
            out += range(int(first), int(last or first) + 1)
    return out


def gres_indexes(detail: str, gres_name: str = "gpu") -> list[int]:
    """The indexes of ``gres_name`` one node's ``gres_detail`` entry gives
    (``gpu:h100:2(IDX:0-1)``; several GRES are comma-separated)."""
    return sorted({i for m in _DETAIL.finditer(detail) if m["name"] == gres_name
                   for i in _indexes(m["idx"])})


def _attribute(device: Mapping[str, Any], name: str, driver: str) -> Any:
    attributes = device.get("attributes") or {}
    value = attributes.get(name, attributes.get(f"{driver}/{name}"))
    if isinstance(value, Mapping):
        for kind in ("int", "string", "version", "bool"):
            if kind in value:
                return value[kind]
    return None


def node_devices(slices: Iterable[Mapping[str, Any]], node: str, mapping: DeviceMapping
                 ) -> dict[int, tuple[str, str]]:
    """A node's devices of the mapped driver by index: index -> (pool, device name)."""
    found: dict[int, tuple[str, str]] = {}
    for piece in slices:
        spec = piece.get("spec") or {}
        if spec.get("driver") != mapping.driver or spec.get("nodeName") != node:
            continue
        pool = str((spec.get("pool") or {}).get("name", ""))
        for device in spec.get("devices") or ():
            index = _attribute(device, mapping.index_attribute, mapping.driver)
            if isinstance(index, int) and not isinstance(index, bool):
                found.setdefault(index, (pool, str(device.get("name", ""))))
    return found


def allocation(requests: Sequence[ClaimRequest], indexes: Sequence[int],
               devices: Mapping[int, tuple[str, str]], node: str, mapping: DeviceMapping
               ) -> dict[str, dict[str, Any]]:
    """Each claim's ``status.allocation`` from the GPUs Slurm gave the job on ``node`` (lowest
    index first, request by request in the Pod's order). Raises NotReady if Slurm gave fewer
    than asked, or the node publishes no device of an index (its slices are behind)."""
    wanted = sum(r.count for r in requests)
    if len(indexes) < wanted:
        raise NotReady(f"Slurm gave the job {len(indexes)} GPUs on {node}; its claims ask "
                       f"for {wanted}")
    left = sorted(indexes)
    results: dict[str, list[dict[str, str]]] = {}
    for request in requests:
        for _ in range(request.count):
            index = left.pop(0)
            if index not in devices:
                raise NotReady(f"{node} publishes no {mapping.driver} device of index {index}")
            pool, device = devices[index]
            results.setdefault(request.claim, []).append(
                {"request": request.request, "driver": mapping.driver, "pool": pool,
                 "device": device})
    selector = {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": [node]}]}]}
    return {claim: {"devices": {"results": got}, "nodeSelector": selector}
            for claim, got in results.items()}


def allocated_devices(claim: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """A claim's allocated devices as ``(driver, pool, device)``."""
    allocated = ((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}
    return [(str(r.get("driver")), str(r.get("pool")), str(r.get("device")))
            for r in allocated.get("results") or () if isinstance(r, Mapping)]


def held_elsewhere(wanted: Mapping[str, Mapping[str, Any]],
                   all_claims: Iterable[Mapping[str, Any]]) -> list[str]:
    """The devices of ``wanted`` (claim name -> allocation) that another claim holds already
    (one allocated by kube-scheduler, for a Pod Slurm does not know): "device (claim ns/name)".
    Slurm gave them, not knowing: writing them again would hand one GPU out twice."""
    mine = {(r["driver"], r["pool"], r["device"]): name for name, a in wanted.items()
            for r in a["devices"]["results"]}
    clashes = []
    for claim in all_claims:
        meta = claim.get("metadata") or {}
        for device in allocated_devices(claim):
            owner = mine.get(device)
            if owner is not None and owner != meta.get("name"):
                clashes.append(f"{device[2]} (claim {meta.get('namespace')}/{meta.get('name')})")
    return clashes


def claim_writes(claim: Mapping[str, Any], want: Mapping[str, Any], pod: Mapping[str, Any]
                 ) -> list[dict[str, Any]]:
    """The statuses to write on ``claim``, in order, so it is allocated as ``want`` and reserved
    for ``pod`` ([]: it already is). The API server keeps an allocation once made: one of other
    devices (a job Slurm replaced) is first taken back, then the new one written; the claim is
    reserved for no one else then (:func:`claim_requests` checked)."""
    meta = pod.get("metadata") or {}
    status = claim.get("status") or {}
    reserved = [r for r in status.get("reservedFor") or () if isinstance(r, Mapping)]
    me = {"resource": "pods", "name": meta.get("name"), "uid": meta.get("uid")}
    has_me = any(r.get("uid") == me["uid"] for r in reserved)
    current = status.get("allocation")
    if isinstance(current, Mapping) and _same(current, want):
        return [] if has_me else [{"reservedFor": [*reserved, me]}]
    write = {"allocation": dict(want), "reservedFor": [me]}
    if current:
        return [{"allocation": None, "reservedFor": None}, write]
    return [write]


def _same(current: Mapping[str, Any], want: Mapping[str, Any]) -> bool:
    def devices(a: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
        return sorted((str(r.get("request")), str(r.get("driver")), str(r.get("pool")),
                       str(r.get("device"))) for r in (a.get("devices") or {}).get("results") or ())
    return devices(current) == devices(want)
