"""Hook credentials: the secret file, the Authorization header, job credentials (pure)."""

from __future__ import annotations

import re

import pytest

from sunk.hooks.auth import JOB_PREFIX, HookKeys, HookRefused, bearer, job_owner
from sunk.settings import parse_tokens


def keys(*tokens: str) -> HookKeys:
    return HookKeys(lambda: tokens)


def test_parse_tokens_skips_blank_lines_and_comments() -> None:
    text = "# rotated 2025-01-01\n\n  new  \n\t\n#old-commented-out\n  # indented comment\nold\n"
    assert parse_tokens(text) == ["new", "old"]
    assert parse_tokens("only") == ["only"]
    assert parse_tokens("a\r\nb\r\n") == ["a", "b"]
    assert parse_tokens("") == []
    assert parse_tokens("\n  \n# nothing but comments\n") == []


@pytest.mark.parametrize(("header", "token"), [
    ("Bearer abc", "abc"),
    ("bearer abc", "abc"),
    ("BEARER abc", "abc"),
    ("  Bearer   abc  ", "abc"),
    ("Bearer sunk-job.00ff", "sunk-job.00ff"),
    ("Bearer", None),
    ("Bearer    ", None),
    ("", None),
    ("abc", None),
    ("Basic abc", None),
    ("Bearerabc", None),
    ("Bearer\tabc", None),
])
def test_bearer_reads_the_token_of_a_bearer_header_only(header: str, token: str | None) -> None:
    assert bearer(header) == token


def test_job_credentials_are_bound_to_one_pod_of_one_scheduler_and_one_secret() -> None:
    k = keys("t1")
    mine = k.job_credential(job_owner("sched", "uid-1"))
    assert re.fullmatch(re.escape(JOB_PREFIX) + "[0-9a-f]{64}", mine)
    assert mine == k.job_credential(job_owner("sched", "uid-1"))  # deterministic
    assert mine.startswith("sunk-job.")
    others = {
        k.job_credential(job_owner("sched", "uid-2")),
        k.job_credential(job_owner("other", "uid-1")),
        keys("t2").job_credential(job_owner("sched", "uid-1")),
    }
    assert len(others) == 3 and mine not in others
    assert k.is_job_credential(mine, job_owner("sched", "uid-1"))
    assert not k.is_job_credential(mine, job_owner("sched", "uid-2"))
    assert not k.is_job_credential(mine, job_owner("other", "uid-1"))
    assert not keys("t2").is_job_credential(mine, job_owner("sched", "uid-1"))


def test_the_first_token_mints_and_every_token_is_accepted() -> None:
    owner = job_owner("sched", "uid-1")
    rotated = keys("new", "old")
    assert rotated.job_credential(owner) == keys("new").job_credential(owner)
    assert rotated.is_job_credential(keys("old").job_credential(owner), owner)
    assert rotated.is_job_credential(keys("new").job_credential(owner), owner)
    assert not keys("new").is_job_credential(keys("old").job_credential(owner), owner)
    assert rotated.is_node_secret("new") and rotated.is_node_secret("old")
    assert not rotated.is_node_secret("older") and not rotated.is_node_secret("")


def test_a_job_credential_is_never_the_node_secret_and_needs_its_prefix() -> None:
    owner = job_owner("sched", "uid-1")
    k = keys("t1")
    cred = k.job_credential(owner)
    assert not k.is_node_secret(cred)
    assert not k.is_job_credential(cred.removeprefix(JOB_PREFIX), owner)
    assert not k.is_job_credential("t1", owner)
    assert not k.is_job_credential(cred + "0", owner)
    assert not k.is_job_credential(JOB_PREFIX.upper() + cred.removeprefix(JOB_PREFIX), owner)


def test_no_secret_configured() -> None:
    k = keys()
    assert not k.configured() and keys("t").configured()
    assert not k.is_node_secret("") and not k.is_job_credential(JOB_PREFIX, "x/y")
    with pytest.raises(ValueError, match="no hook secret"):
        k.job_credential(job_owner("sched", "uid-1"))


def test_the_secret_is_read_on_every_call() -> None:
    tokens = ["a"]
    k = HookKeys(lambda: tokens)
    before = k.job_credential("s/u")
    tokens[:] = ["b"]
    assert k.is_node_secret("b") and not k.is_node_secret("a")
    assert k.job_credential("s/u") != before


def test_hook_refused_carries_status_detail_and_retry_after() -> None:
    refused = HookRefused(503, "Slurm did not answer", retry_after=5)
    assert (refused.status, refused.detail, refused.retry_after) == (503, "Slurm did not answer", 5)
    assert str(refused) == "Slurm did not answer"
    assert HookRefused(409, "no").retry_after is None
