"""The bed's accounting setup: what sacctmgr is told, and how what it lists is checked."""

from __future__ import annotations

import pytest

from testbed import accounting, accounts, cluster

#: `sacctmgr -n -P show assoc where cluster=sunk format=account,user,partition,qos,defaultqos`
#: as Slurm 24.11 printed it after the setup ran (the account rows have no user).
SHOWN_ASSOCIATIONS = """\
root|||normal|
root|root||high,low,normal|normal
root|root|high|high,low,normal|high
default|||normal|
default|k8s-pods||high,low,normal|normal
default|k8s-pods|high|high,low,normal|high
default|root||high,low,normal|normal
default|root|high|high,low,normal|high
research|||normal|
research|k8s-pods||high,low,normal|normal
research|k8s-pods|high|high,low,normal|high
research|root||high,low,normal|normal
research|root|high|high,low,normal|high
"""
SHOWN_QOS = "normal|\nlow|\nhigh|low,normal\n"
SHOWN_USERS = "k8s-pods|default\nroot|default\n"


def test_what_slurm_listed_after_the_setup_is_what_the_setup_wants() -> None:
    assert accounts.differences(SHOWN_ASSOCIATIONS, SHOWN_QOS, SHOWN_USERS) == []
    assert len(accounts.parse_associations(SHOWN_ASSOCIATIONS)) == 10


def test_a_missing_association_a_wrong_default_qos_and_preemption_are_told() -> None:
    shown = SHOWN_ASSOCIATIONS.replace("research|k8s-pods|high|high,low,normal|high\n", "")
    shown = shown.replace("default|root|high|high,low,normal|high",
                          "default|root|high|high,low,normal|normal")
    problems = accounts.differences(shown, "normal|\nlow|\nhigh|low\n",
                                    "k8s-pods|default\nroot|root\n")
    text = "\n".join(problems)
    assert "missing association Association(account='research', user='k8s-pods', " \
           "partition='high'" in text
    assert "unexpected association Association(account='default', user='root', " \
           "partition='high'" in text
    assert "QOS high preempts 'low', not 'low,normal'" in text
    assert "user root has default account 'root', not 'default'" in text


def test_a_job_in_partition_high_gets_qos_high_which_preempts_batchs_default_qos() -> None:
    """How `high` still preempts `batch` under preempt/qos (the e2e preemption tests)."""
    defaults = {(a.account, a.user, a.partition): a.default_qos
                for a in accounts.expected_associations()}
    assert defaults[("default", "root", "high")] == "high"
    assert defaults[("default", "root", "")] == accounts.DEFAULT_QOS == "normal"
    assert accounts.DEFAULT_QOS in accounts.PREEMPTS["high"]
    assert "low" in accounts.PREEMPTS["high"]


def test_every_user_the_bed_submits_as_has_associations() -> None:
    """root (slurmrestd's token, tests' sbatch) and every user a Pod's user-id may name."""
    users = {line.split(":")[0] for line in cluster.TEST_USERS} | {cluster.SLURM_USER}
    assert users == set(accounts.USERS)
    assert all(accounts.DEFAULT_ACCOUNT in acc for acc in accounts.USERS.values())
    assert "root" in accounts.USERS["root"]  # the account annotation e2e test charges `root`


def test_the_setup_adds_then_sets_and_a_second_add_is_nothing_new() -> None:
    cmds = accounts.setup_commands()
    assert cmds[0] == ["add", "qos", "low,high"]
    verbs = [c[0] for c in cmds]
    assert verbs.index("modify", 2) > max(i for i, v in enumerate(verbs) if v == "add")
    assert ["add", "user", "k8s-pods", "account=default,research", "cluster=sunk",
            "defaultaccount=default", "partition=high"] in cmds
    assert cmds[-1][-1] == "defaultqos=high"
    again = ("Request didn't affect anything\nNothing added.\n", " Nothing new added.\n",
             " This cluster sunk already exists.  Not adding.\n",
             " Already existing account default on cluster sunk\n")
    assert all(accounts.nothing_new(["add", "x"], 1, out) for out in again)
    assert not accounts.nothing_new(["add", "x"], 1, " Unknown option: bogus\n")
    assert not accounts.nothing_new(["modify", "x"], 1, " Nothing new added.\n")
    assert not accounts.nothing_new(["add", "x"], 2, " Nothing new added.\n")


def test_the_template_key_follows_the_setup(monkeypatch: pytest.MonkeyPatch) -> None:
    key = accounting.template_key()
    assert key == accounting.template_key() and len(key) == 12
    monkeypatch.setattr(accounts, "PREEMPTS", {"high": ("low",)})
    assert accounting.template_key() != key
