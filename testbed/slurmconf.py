"""Slurm configuration for the test bed: pure text from the topology and the chosen ports."""

from __future__ import annotations

from dataclasses import dataclass

from sunk import topology
from testbed.topology import NODE_CPUS, NODE_GPUS, NODE_MEMORY_MIB, TestbedNode

#: Where things live inside the chroot. /run is a tmpfs mounted fresh by every `up`.
ETC = "/run/slurm/etc"
SCRIPTS = "/opt/sunk/scripts"
GPU_DEV = "/run/slurm/dev/gpu"


@dataclass(frozen=True)
class SlurmPorts:
    slurmctld: int
    slurmd_base: int
    slurmrestd: int


def slurm_conf(*, host: str, nodes: list[TestbedNode], ports: SlurmPorts,
               kill_wait: int) -> str:
    """slurm.conf with KillWait, a Prolog, GPU GRES, two partitions and partition preemption.

    Preemption is by partition priority (`preempt/partition_prio`): QOS-based preemption needs
    slurmdbd, which the test bed does not run. Jobs in `high` preempt (cancel) jobs in `batch`.
    """
    lines = [
        "# Written by `python -m testbed up`; regenerated on every start.",
        "ClusterName=sunk",
        f"SlurmctldHost={host}(127.0.0.1)",
        f"SlurmctldPort={ports.slurmctld}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        "AuthAltTypes=auth/jwt",
        f"AuthAltParameters=jwt_key={ETC}/jwt.key",
        "StateSaveLocation=/run/slurm/state",
        "SlurmdSpoolDir=/run/slurm/spool/%n",
        "SlurmctldPidFile=/run/slurm/slurmctld.pid",
        "SlurmdPidFile=/run/slurm/slurmd-%n.pid",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SlurmdParameters=config_overrides",
        "SchedulerType=sched/backfill",
        "SchedulerParameters=batch_sched_delay=0,sched_min_interval=0",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU_Memory",
        # Without it a job that names no memory takes all of the node's.
        "DefMemPerCPU=1024",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "MpiDefault=none",
        "MailProg=/bin/true",
        "ReturnToService=2",
        "SlurmdTimeout=300",
        "InactiveLimit=0",
        "MinJobAge=300",
        # Room for the scale benchmark's 11,000 jobs (the default is 10,000).
        "MaxJobCount=20000",
        f"KillWait={kill_wait}",
        f"Prolog={SCRIPTS}/prolog.sh",
        "PrologFlags=Alloc",
        "GresTypes=gpu",
        "PreemptType=preempt/partition_prio",
        "PreemptMode=CANCEL",
        # Blocks of nodes (racks, NVLink domains) from topology.conf: a multi-node job is
        # placed inside one block when it fits.
        "TopologyPlugin=topology/block",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
    ]
    for i, node in enumerate(nodes):
        lines.append(
            f"NodeName={node.slurm_name} NodeHostname=localhost NodeAddr=127.0.0.1 "
            f"Port={ports.slurmd_base + i} CPUs={NODE_CPUS} RealMemory={NODE_MEMORY_MIB} "
            f"Gres=gpu:{node.gres_type}:{NODE_GPUS} Feature={node.gres_type} State=UNKNOWN")
    lines += [
        "PartitionName=batch Nodes=ALL Default=YES MaxTime=INFINITE State=UP "
        "PriorityTier=1 PreemptMode=CANCEL",
        "PartitionName=high Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=10 "
        "PreemptMode=OFF",
    ]
    return "\n".join(lines) + "\n"


def gres_conf(nodes: list[TestbedNode]) -> str:
    """GPUs without GPUs: each node's GRES names plain files (a line without File= is ignored)."""
    return "".join(
        f"NodeName={n.slurm_name} Name=gpu Type={n.gres_type} File={GPU_DEV}[0-{NODE_GPUS - 1}]\n"
        for n in nodes)


def topology_conf(nodes: list[TestbedNode]) -> str:
    """topology.conf for topology/block, written as sunk writes it from the Node label: each
    node's block is the value the test bed puts in that label (blocks of 4 nodes).

    BlockSizes is the smallest block's size: BLOCK_SIZE, unless the node count is not a
    multiple of it (slurmctld refuses to start with a block smaller than the base block size).
    """
    return topology.topology_conf([(n.slurm_name, n.block) for n in nodes])


CGROUP_CONF = "CgroupPlugin=disabled\n"
