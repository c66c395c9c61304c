"""A Pod's ResourceClaims allocated from the GPUs Slurm gave its job, before the Pod is bound.

The kubelet starts a Pod only once each of its claims is allocated and reserved for it. sunk
writes that allocation as kube-scheduler would, but from Slurm's choice: the devices of the
Pod's node whose indexes Slurm gave the job (:mod:`sunk.plans.claims`). The allocation follows
from the job alone, so a scheduler restarted between a job's start and the Pod's binding writes
the same devices (or finds them written).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict

from sunk import kube, objects
from sunk.apply.ports import KubePort, SlurmPort
from sunk.model.cluster import Cluster
from sunk.plans import claims

log = logging.getLogger("sunk.apply.claims")


class ClaimsNotAllocated(Exception):
    """The Pod's claims could not be allocated now: the Pod is not bound, and is tried again."""


class ClaimAllocator:
    def __init__(self, cluster: Cluster, kube_port: KubePort, slurm: SlurmPort,
                 mapping: claims.DeviceMapping | None) -> None:
        self.cluster = cluster
        self.kube = kube_port
        self.slurm = slurm
        self.mapping = mapping
        #: Job id -> each node's GRES, as Slurm gave it (a running job's never changes): a
        #: gang's members, bound at once, share one read. The newest few jobs only.
        self._gres: OrderedDict[int, asyncio.Future[dict[str, str]]] = OrderedDict()

    async def allocate(self, pod: kube.Obj, k8s_node: str, slurm_node: str, job_id: int) -> None:
        """Allocate the Pod's claims from job ``job_id``'s GPUs on ``slurm_node`` (hosted by
        ``k8s_node``). Raises ClaimsNotAllocated if they cannot be now."""
        if self.mapping is None or not claims.uses_claims(pod):
            return
        key = objects.pod(pod).metadata.key
        seen = self.cluster.devices.claims_of(pod)
        if seen is None:
            raise ClaimsNotAllocated(f"pod {key}: ResourceClaims are not read yet")
        try:
            known = seen.by_name
            asked = claims.claim_requests(pod, known, self.mapping)
            if not asked:
                return
            detail = (await self._job_gres(job_id)).get(slurm_node, "")
            indexes = claims.gres_indexes(detail, asked[0].gres)
            devices = claims.node_devices(self.cluster.devices.slices(), k8s_node, self.mapping)
            wanted = claims.allocation(asked, indexes, devices, k8s_node, self.mapping)
        except (claims.NotReady, claims.Unmappable) as exc:
            raise ClaimsNotAllocated(f"pod {key}: {exc}") from exc
        namespace = objects.pod(pod).metadata.namespace
        others = (c for c in self.cluster.devices.all_claims()
                  if (c.get("metadata") or {}).get("namespace") != namespace
                  or (c.get("metadata") or {}).get("name") not in wanted)
        if clashes := claims.held_elsewhere(wanted, others):
            raise ClaimsNotAllocated(
                f"pod {key}: Slurm gave job {job_id} GPUs that other claims hold already "
                f"({', '.join(clashes[:4])}): Slurm does not know of them; not bound until "
                "they are released")
        version = f"{claims.GROUP}/{claims.VERSION}"
        for name, allocation in wanted.items():
            claim = dict(known[name])
            for status in claims.claim_writes(claim, allocation, pod):
                await self.kube.patch_status("resourceclaims", version, claim, status)
            log.info("pod %s: claim %s allocated %s on %s (job %d: %s)", key, name,
                     ", ".join(r["device"] for r in allocation["devices"]["results"]),
                     k8s_node, job_id, detail)

    async def _job_gres(self, job_id: int, keep: int = 64) -> dict[str, str]:
        """One read of the job's GRES, shared by the members that ask at once; a read that
        failed or found none yet is not kept."""
        read = self._gres.get(job_id)
        if read is None or (read.done() and (read.exception() or not read.result())):
            read = self._gres[job_id] = asyncio.ensure_future(self.slurm.job_gres(job_id))
            while len(self._gres) > keep:
                self._gres.popitem(last=False)
        return await asyncio.shield(read)
