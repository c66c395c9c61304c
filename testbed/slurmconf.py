"""Slurm configuration for the test bed: pure text from the topology and the chosen ports."""

from __future__ import annotations

from dataclasses import dataclass

from sunk.plans import topology
from testbed.topology import NODE_CPUS, NODE_GPUS, NODE_MEMORY_MIB, TestbedNode

#: Where things live inside the chroot. /run is a tmpfs mounted fresh by every `up`.
ETC = "/run/slurm/etc"
SCRIPTS = "/opt/sunk/scripts"
GPU_DEV = "/run/slurm/dev/gpu"
#: MariaDB's data directory: a bind mount of the bed's own copy of the accounting database.
MARIADB_DATA = "/var/lib/sunk-accounting"
MARIADB_RUN = "/run/mysqld"
MARIADB_CONF = f"{MARIADB_RUN}/my.cnf"
MARIADB_SOCKET = f"{MARIADB_RUN}/mysqld.sock"
#: The database slurmdbd keeps its records in, and the MariaDB user it logs in as.
ACCOUNTING_DB = "slurm_acct_db"
ACCOUNTING_DB_USER = "slurmdbd"


@dataclass(frozen=True)
class SlurmPorts:
    slurmctld: int
    slurmd_base: int
    slurmrestd: int
    #: slurmdbd's port; None runs Slurm without accounting (no slurmdbd, no MariaDB).
    slurmdbd: int | None = None


def slurm_conf(*, host: str, nodes: list[TestbedNode], ports: SlurmPorts,
               kill_wait: int, lock_timeout: int) -> str:
    """slurm.conf with KillWait, a Prolog, GPU GRES, two partitions and preemption.

    With slurmdbd (``ports.slurmdbd``), accounting is enforced (an unknown account, user or QOS
    is refused at submit) and preemption is by QOS (`preempt/qos`): `high` cancels `low` and
    `normal` jobs. A job in partition `high` gets QOS `high` by default (its user's association
    in that partition says so: testbed.accounts), so `high` still cancels `batch` as it did
    without slurmdbd, where preemption is by partition priority (`preempt/partition_prio`).
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
        # Heterogeneous jobs (a gang whose members differ) start only in a backfill cycle:
        # every 2 s here (the default is 30 s), and as soon as every component can.
        "SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,bf_interval=2,"
        "bf_hetjob_immediate",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU_Memory",
        # Without it a job that names no memory takes all of the node's.
        "DefMemPerCPU=1024",
        *_accounting(ports.slurmdbd),
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
        # The prolog waits up to the lock timeout for the scheduler: Slurm must not call the
        # batch script missing meanwhile (default 10 s; seen at 1,000 Pods starting at once:
        # the job requeued, its prolog's lock refused, the node drained).
        f"BatchStartTimeout={lock_timeout + 30}",
        "GresTypes=gpu",
        "PreemptType=" + ("preempt/qos" if ports.slurmdbd else "preempt/partition_prio"),
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


def _accounting(slurmdbd_port: int | None) -> list[str]:
    if slurmdbd_port is None:
        return ["AccountingStorageType=accounting_storage/none"]
    return [
        "AccountingStorageType=accounting_storage/slurmdbd",
        "AccountingStorageHost=localhost",
        f"AccountingStoragePort={slurmdbd_port}",
        # Unknown accounts, users and QOS are refused at submit, as on a real cluster.
        "AccountingStorageEnforce=associations,limits,qos",
        "AccountingStorageTRES=gres/gpu",
        # No cgroups here, and nothing to gather: jobs are placeholders.
        "JobAcctGatherType=jobacct_gather/none",
    ]


def slurmdbd_conf(*, port: int) -> str:
    """slurmdbd.conf (mode 600, owned by SlurmUser root). slurmdbd logs to its stderr, the bed's
    log, as slurmctld does. It reaches MariaDB on its socket as the database user
    ACCOUNTING_DB_USER, which only the OS user root may log in as (no password anywhere), and it
    takes slurmrestd's JWTs, for the /slurmdb/ endpoints."""
    return "\n".join([
        "# Written by `python -m testbed up`; regenerated on every start.",
        "AuthType=auth/munge",
        "AuthAltTypes=auth/jwt",
        f"AuthAltParameters=jwt_key={ETC}/jwt.key",
        "DbdHost=localhost",
        "DbdAddr=127.0.0.1",
        f"DbdPort={port}",
        "SlurmUser=root",
        "PidFile=/run/slurm/slurmdbd.pid",
        "DebugLevel=info",
        "StorageType=accounting_storage/mysql",
        "StorageHost=localhost",
        f"StorageUser={ACCOUNTING_DB_USER}",
        f"StorageLoc={ACCOUNTING_DB}",
    ]) + "\n"


def mariadb_conf() -> str:
    """MariaDB's only configuration file (``--defaults-file``: Debian's /etc/mysql is not read):
    a unix socket and no TCP, and a test bed's durability (a crash may lose the last second;
    a bed's records live as long as the bed)."""
    return "\n".join([
        "[mariadbd]",
        f"datadir={MARIADB_DATA}",
        f"socket={MARIADB_SOCKET}",
        f"pid-file={MARIADB_RUN}/mysqld.pid",
        "skip-networking",
        # slurmdbd warns below 900. It also warns, once at start, that innodb_buffer_pool_size
        # (MariaDB's default, 128M) is below what it recommends: plenty for a test bed.
        "innodb_lock_wait_timeout=900",
        # A smaller redo log (the default is 96M): the data directory is copied on every `up`.
        "innodb_log_file_size=32M",
        "innodb_flush_log_at_trx_commit=2",
        "innodb_doublewrite=0",
        "",
        "[client]",
        f"socket={MARIADB_SOCKET}",
    ]) + "\n"


#: Run once on a new data directory, as MariaDB's root. The database is made here and not by
#: slurmdbd: slurmdbd makes it after its first connection fails (the database is missing), then
#: connects again on the same handle, and with Debian trixie's libmariadb 3.4.10 every query on
#: that handle fails ("Number of columns in result (=1) set execeeds maxmimum allowed number of
#: columns (=0)", error 5027), and slurmdbd exits.
MARIADB_INIT_SQL = (
    f"CREATE DATABASE IF NOT EXISTS {ACCOUNTING_DB}; "
    f"CREATE USER IF NOT EXISTS '{ACCOUNTING_DB_USER}'@'localhost' "
    "IDENTIFIED VIA unix_socket USING 'root'; "
    f"GRANT ALL ON {ACCOUNTING_DB}.* TO '{ACCOUNTING_DB_USER}'@'localhost';"
)


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
