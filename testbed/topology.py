"""What the test bed's cluster looks like: pure data, shared by the Kubernetes and Slurm sides."""

from __future__ import annotations

from dataclasses import dataclass

#: GPU model label value -> Slurm GRES type, cycled over the nodes so placement has a choice.
GPU_MODELS = (("H100_NVLINK_80GB", "h100"), ("A100_PCIE_80GB", "a100"))
#: GRES type -> the product name the bed's DRA driver gives its devices (as NVIDIA's does).
GPU_PRODUCTS = {"h100": "NVIDIA H100 80GB HBM3", "a100": "NVIDIA A100 80GB PCIe"}
#: What each Slurm node offers Slurm. The Kubernetes Node has room for that plus the slurmd
#: Pod's own requests: Slurm's view and Kubernetes' agree (docs/chart.md, "Node sizes").
NODE_CPUS = 32
NODE_MEMORY_MIB = 256 * 1024
NODE_GPUS = 8
SLURMD_CPUS = 1
SLURMD_MEMORY_MIB = 1024
SLURM_NAMESPACE = "slurm"
NODESET = "compute"
#: Nodes per block (rack, NVLink domain): node i is in block i // BLOCK_SIZE, told by the Node
#: label sunk.plans.topology.BLOCK_LABEL and, to Slurm, by topology.conf (topology/block).
BLOCK_SIZE = 4


@dataclass(frozen=True)
class TestbedNode:
    """One machine: a Kubernetes Node (kwok) hosting one Slurm node (slurmd) of the same index."""

    __test__ = False  # not a pytest test class, despite its name

    index: int
    gpu_model: str
    gres_type: str

    @property
    def k8s_name(self) -> str:
        return f"kwok-node-{self.index:03d}"

    @property
    def slurm_name(self) -> str:
        return f"{self.gres_type}-{self.index:03d}"

    @property
    def block(self) -> str:
        return f"block-{self.index // BLOCK_SIZE}"

    @property
    def slurmd_pod(self) -> str:
        return f"slurm-{NODESET}-{self.slurm_name}"


def nodes(count: int) -> list[TestbedNode]:
    return [TestbedNode(i, *GPU_MODELS[i % len(GPU_MODELS)]) for i in range(count)]
