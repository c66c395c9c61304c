"""The generated Slurm configuration has what later issues rely on."""

from __future__ import annotations

from testbed import slurmconf
from testbed.topology import nodes

PORTS = slurmconf.SlurmPorts(slurmctld=6817, slurmd_base=17001, slurmrestd=6820)


def _conf(count: int = 4, kill_wait: int = 30, lock_timeout: int = 20,
          ports: slurmconf.SlurmPorts = PORTS) -> dict[str, list[str]]:
    text = slurmconf.slurm_conf(host="box", nodes=nodes(count), ports=ports, kill_wait=kill_wait,
                                lock_timeout=lock_timeout)
    parsed: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            parsed.setdefault(key, []).append(value)
    return parsed


def test_kill_wait_prolog_and_gres() -> None:
    conf = _conf(kill_wait=45)
    assert conf["KillWait"] == ["45"]
    assert conf["Prolog"] == ["/opt/sunk/scripts/prolog.sh"]
    assert conf["GresTypes"] == ["gpu"]


def test_one_node_line_per_node_with_its_own_port_and_gpu_type() -> None:
    lines = _conf(count=3)["NodeName"]
    assert len(lines) == 3
    assert lines[0].startswith("h100-000 ") and "Port=17001" in lines[0]
    assert "Gres=gpu:h100:8" in lines[0]
    assert lines[1].startswith("a100-001 ") and "Port=17002" in lines[1]
    assert "Gres=gpu:a100:8" in lines[1]


def test_partition_named_default_is_never_used_and_high_preempts_batch() -> None:
    conf = _conf()
    assert conf["PreemptType"] == ["preempt/partition_prio"]
    parts = {p.split()[0]: p for p in conf["PartitionName"]}
    assert set(parts) == {"batch", "high"}
    tier = {name: int(p.split("PriorityTier=")[1].split()[0]) for name, p in parts.items()}
    assert tier["high"] > tier["batch"]
    assert "Default=YES" in parts["batch"]


def test_every_node_has_a_gres_line_with_a_file() -> None:
    text = slurmconf.gres_conf(nodes(5))
    assert len(text.splitlines()) == 5
    assert all("File=" in line for line in text.splitlines())


def test_blocks_of_four_nodes_from_the_block_label_values() -> None:
    assert _conf()["TopologyPlugin"] == ["topology/block"]
    assert slurmconf.topology_conf(nodes(8)) == (
        "BlockName=block-0 Nodes=h100-000,a100-001,h100-002,a100-003\n"
        "BlockName=block-1 Nodes=h100-004,a100-005,h100-006,a100-007\n"
        "BlockSizes=4\n")
    assert [n.block for n in nodes(5)] == ["block-0"] * 4 + ["block-1"]


def test_a_short_last_block_lowers_the_base_block_size() -> None:
    """slurmctld refuses to start with a block smaller than the base block size."""
    assert slurmconf.topology_conf(nodes(6)).splitlines()[-1] == "BlockSizes=2"
    assert slurmconf.topology_conf(nodes(1)).splitlines() == [
        "BlockName=block-0 Nodes=h100-000", "BlockSizes=1"]


ACCOUNTING = slurmconf.SlurmPorts(slurmctld=6817, slurmd_base=17001, slurmrestd=6820,
                                  slurmdbd=6819)


def test_without_slurmdbd_no_accounting_and_partition_preemption() -> None:
    conf = _conf()
    assert conf["AccountingStorageType"] == ["accounting_storage/none"]
    assert "AccountingStorageEnforce" not in conf and "AccountingStoragePort" not in conf


def test_with_slurmdbd_accounts_and_qos_are_enforced_and_preemption_is_by_qos() -> None:
    conf = _conf(ports=ACCOUNTING)
    assert conf["AccountingStorageType"] == ["accounting_storage/slurmdbd"]
    assert conf["AccountingStoragePort"] == ["6819"]
    assert conf["AccountingStorageHost"] == ["localhost"]
    assert set(conf["AccountingStorageEnforce"][0].split(",")) == {"associations", "limits",
                                                                   "qos"}
    assert conf["JobAcctGatherType"] == ["jobacct_gather/none"]
    assert conf["ClusterName"] == ["sunk"]
    assert conf["PreemptType"] == ["preempt/qos"]
    assert conf["PreemptMode"] == ["CANCEL"]
    # The partitions (and their tiers) stay: a job in `high` preempts by its QOS now.
    assert conf["PartitionName"] == _conf()["PartitionName"]


def test_slurmdbd_conf_has_no_secret_and_takes_jwts() -> None:
    conf = dict(line.split("=", 1) for line in slurmconf.slurmdbd_conf(port=6819).splitlines()
                if line and not line.startswith("#"))
    assert conf["DbdPort"] == "6819"
    assert conf["StorageType"] == "accounting_storage/mysql"
    assert conf["StorageUser"] == slurmconf.ACCOUNTING_DB_USER
    assert conf["StorageLoc"] == slurmconf.ACCOUNTING_DB
    assert "StoragePass" not in conf  # the database user logs in by the socket, as OS root
    assert conf["SlurmUser"] == "root"
    assert conf["AuthAltTypes"] == "auth/jwt"
    assert conf["AuthAltParameters"] == f"jwt_key={slurmconf.ETC}/jwt.key"


def test_mariadb_listens_on_its_socket_only_and_slurmdbd_may_log_in_as_root_only() -> None:
    conf = slurmconf.mariadb_conf().splitlines()
    assert conf[0] == "[mariadbd]"
    assert "skip-networking" in conf
    assert f"datadir={slurmconf.MARIADB_DATA}" in conf
    assert conf.count(f"socket={slurmconf.MARIADB_SOCKET}") == 2  # the server's and clients'
    sql = slurmconf.MARIADB_INIT_SQL
    assert f"CREATE DATABASE IF NOT EXISTS {slurmconf.ACCOUNTING_DB};" in sql
    assert "IDENTIFIED VIA unix_socket USING 'root'" in sql


def test_slurm_waits_for_the_prolog_lock_before_calling_a_batch_script_missing() -> None:
    assert _conf(lock_timeout=20)["BatchStartTimeout"] == ["50"]
    assert _conf(lock_timeout=300)["BatchStartTimeout"] == ["330"]
