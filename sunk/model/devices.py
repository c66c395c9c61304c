"""The ResourceClaims and ResourceSlices sunk reads (``resource.k8s.io/v1``), for Pods that ask
for GPUs by claim (:mod:`sunk.plans.claims`).

Both are watched only where the API server serves them, and not waited for at start-up: a Pod
with a claim waits (and says why) until they are read. Claims are kept by namespace and name;
slices by the node they describe.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterator, Mapping
from typing import Any

from sunk import kube, objects
from sunk.plans import claims
from sunk.settings import Settings


def device_mapping(settings: Settings) -> claims.DeviceMapping | None:
    """How claims are told to Slurm, from the settings (None: claims are not read)."""
    if not settings.dra:
        return None
    return claims.DeviceMapping(classes=settings.dra_classes, driver=settings.dra_driver,
                                type_attribute=settings.dra_type_attribute,
                                types=settings.dra_types,
                                index_attribute=settings.dra_index_attribute)


class Devices:
    def __init__(self, api: kube.Client, settings: Settings, pods: kube.Informer) -> None:
        """``pods``: every Pod (whether Slurm counts a claim's GPUs: a Pod sunk placed)."""
        self.mapping = device_mapping(settings)
        self.scheduler_name = settings.scheduler_name
        self.pods = pods
        version = f"{claims.GROUP}/{claims.VERSION}"
        self.claim_informer = kube.Informer(api, "resourceclaims", version=version)
        self.slice_informer = kube.Informer(api, "resourceslices", version=version)

    def runs(self, settings: Settings) -> list[Callable[[], Coroutine[Any, Any, None]]]:
        """The watches to run (none unless ``settings`` reads claims)."""
        return [self.claim_informer.run, self.slice_informer.run] if settings.dra else []

    @property
    def ready(self) -> bool:
        return self.claim_informer.synced.is_set() and self.slice_informer.synced.is_set()

    def claims_of(self, pod: Mapping[str, Any]) -> claims.ClaimsSeen | None:
        """What the Pod's placement reads of claims (its namespace's, and each Node's devices
        no one Slurm knows holds); None while they are not read yet. Counted only for a Pod
        that names claims."""
        if not self.ready:
            return None
        namespace = (pod.get("metadata") or {}).get("namespace", "")
        by_name = _InNamespace(self.claim_informer.cache, str(namespace))
        if self.mapping is None or not claims.uses_claims(pod):
            return claims.ClaimsSeen(by_name)
        return claims.ClaimsSeen(by_name, claims.free_devices(
            self.slices(), self.all_claims(), self.mapping, self.slurm_knows))

    def slurm_knows(self, namespace: str, name: str) -> bool:
        """Whether Slurm counts the GPUs of Pod ``namespace/name``: it names this scheduler."""
        pod = self.pods.cache.get(f"{namespace}/{name}")
        return pod is not None and objects.pod(pod).spec.scheduler_name == self.scheduler_name

    def claim(self, namespace: str, name: str) -> kube.Obj | None:
        return self.claim_informer.cache.get(f"{namespace}/{name}")

    def all_claims(self) -> list[kube.Obj]:
        return list(self.claim_informer.cache.values())

    def slices(self) -> list[kube.Obj]:
        return list(self.slice_informer.cache.values())


class _InNamespace(Mapping[str, Mapping[str, Any]]):
    """One namespace's part of the claims cache (``ns/name`` keys), by name, with no copy."""

    def __init__(self, cache: Mapping[str, kube.Obj], namespace: str) -> None:
        self.cache, self.prefix = cache, f"{namespace}/"

    def __getitem__(self, name: str) -> Mapping[str, Any]:
        return self.cache[self.prefix + name]

    def __iter__(self) -> Iterator[str]:
        return (k[len(self.prefix):] for k in self.cache if k.startswith(self.prefix))

    def __len__(self) -> int:
        return sum(1 for _ in self)
