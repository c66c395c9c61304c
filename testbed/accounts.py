"""Slurm accounting's contents in the test bed: cluster, QOS, accounts, users and their
associations, as sacctmgr commands and as what ``sacctmgr show`` lists once they ran. Pure.

QOS ``normal`` (every job's default), ``low`` and ``high``; ``high`` preempts (cancels) ``low``
and ``normal`` jobs. A user's association in partition ``high`` makes ``high`` its default QOS,
so a job in that partition preempts as it did by partition priority before the bed had
slurmdbd. Accounts ``root`` -> ``default`` (every user's default) and ``research``.
"""

from __future__ import annotations

from dataclasses import dataclass

CLUSTER = "sunk"
QOS = ("normal", "low", "high")
#: QOS -> the QOS whose jobs it preempts (with the cluster's PreemptMode, CANCEL).
PREEMPTS = {"high": ("low", "normal")}
DEFAULT_QOS = "normal"
#: Partition -> the default QOS of a job in it, when not DEFAULT_QOS.
PARTITION_QOS = {"high": "high"}
#: Accounts under ``root`` (which Slurm makes with the cluster).
ACCOUNTS = ("default", "research")
DEFAULT_ACCOUNT = "default"
#: User -> the accounts it may charge. ``root`` submits for the bed (slurmrestd's token, tests'
#: sbatch); ``k8s-pods`` is the user a Pod's user-id annotation names (testbed.cluster).
USERS = {"root": ("root", *ACCOUNTS), "k8s-pods": ACCOUNTS}

#: What a second run of an ``add`` says, with exit status 1, when all it adds exists already.
_NOTHING_NEW = ("already exists", "Nothing new added", "Already existing", "Nothing added")


@dataclass(frozen=True, order=True)
class Association:
    """One user association as ``sacctmgr show assoc`` lists it (partition "" for any)."""

    account: str
    user: str
    partition: str
    qos: frozenset[str]
    default_qos: str


def setup_commands() -> list[list[str]]:
    """``sacctmgr -i`` arguments that make the bed's accounting from an empty database; on one
    that has it already, the ``add``s say so (exit 1: see :func:`nothing_new`) and the
    ``modify``s change nothing."""
    users = ",".join(USERS)
    qos = ",".join(QOS)
    cmds: list[list[str]] = [
        ["add", "qos", ",".join(q for q in QOS if q != "normal")],  # Slurm makes normal
        *(["modify", "qos", "where", f"name={q}", "set", f"preempt={','.join(victims)}"]
          for q, victims in PREEMPTS.items()),
        ["add", "cluster", CLUSTER],
        ["add", "account", ",".join(ACCOUNTS), f"cluster={CLUSTER}",
         "description=sunk test bed", "organization=sunk"],
    ]
    for partition in ("", *PARTITION_QOS):
        where = [f"partition={partition}"] if partition else []
        for user, accounts in USERS.items():
            cmds.append(["add", "user", user, f"account={','.join(accounts)}",
                         f"cluster={CLUSTER}", f"defaultaccount={DEFAULT_ACCOUNT}", *where])
    # Set last, on every association (the one Slurm made for root in account root too), then
    # in each partition with a default of its own.
    cmds.append(["modify", "user", "where", f"name={users}", "set",
                 f"defaultaccount={DEFAULT_ACCOUNT}"])
    cmds.append(["modify", "user", "where", f"name={users}", f"cluster={CLUSTER}", "set",
                 f"qos={qos}", f"defaultqos={DEFAULT_QOS}"])
    for partition, default in PARTITION_QOS.items():
        cmds.append(["modify", "user", "where", f"name={users}", f"cluster={CLUSTER}",
                     f"partition={partition}", "set", f"defaultqos={default}"])
    return cmds


def nothing_new(command: list[str], returncode: int, output: str) -> bool:
    """Whether a failed ``add`` failed only because what it adds exists already."""
    return (command[0] == "add" and returncode == 1
            and any(phrase in output for phrase in _NOTHING_NEW))


def expected_associations() -> set[Association]:
    return {Association(account, user, partition, frozenset(QOS),
                        PARTITION_QOS.get(partition, DEFAULT_QOS))
            for user, accounts in USERS.items() for account in accounts
            for partition in ("", *PARTITION_QOS)}


#: ``sacctmgr -n -P show ...`` arguments whose output the parsers below read.
SHOW_ASSOCIATIONS = ["show", "assoc", "where", f"cluster={CLUSTER}",
                     "format=account,user,partition,qos,defaultqos"]
SHOW_QOS = ["show", "qos", "format=name,preempt"]
SHOW_USERS = ["show", "user", "format=user,defaultaccount"]


def parse_associations(text: str) -> set[Association]:
    """User associations from SHOW_ASSOCIATIONS' output (account-only rows are left out)."""
    found = set()
    for line in text.splitlines():
        if not line.strip():
            continue
        account, user, partition, qos, default_qos = line.split("|")[:5]
        if user:
            found.add(Association(account, user, partition,
                                  frozenset(q for q in qos.split(",") if q), default_qos))
    return found


def parse_pairs(text: str) -> dict[str, str]:
    """``name|value`` lines (SHOW_QOS, SHOW_USERS) as a dict."""
    return dict(line.split("|")[:2] for line in text.splitlines() if line.strip())


def differences(associations: str, qos: str, users: str) -> list[str]:
    """How what the three ``show`` outputs list differs from what setup_commands make; empty
    when it matches."""
    problems = []
    got = parse_associations(associations)
    want = expected_associations()
    problems += [f"missing association {a}" for a in sorted(want - got)]
    problems += [f"unexpected association {a}" for a in sorted(got - want)]
    preempts = parse_pairs(qos)
    for name in QOS:
        if name not in preempts:
            problems.append(f"missing QOS {name}")
        elif set(filter(None, preempts[name].split(","))) != set(PREEMPTS.get(name, ())):
            problems.append(f"QOS {name} preempts {preempts[name]!r}, "
                            f"not {','.join(PREEMPTS.get(name, ()))!r}")
    defaults = parse_pairs(users)
    problems += [f"user {user} has default account {defaults.get(user)!r}, "
                 f"not {DEFAULT_ACCOUNT!r}"
                 for user in USERS if defaults.get(user) != DEFAULT_ACCOUNT]
    return problems
