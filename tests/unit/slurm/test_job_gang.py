"""A gang's job: its ``extra`` names the gang and its members (sunk.slurm.job)."""

from __future__ import annotations

import dataclasses
import re
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sunk.slurm.job import (
    STARTED,
    Job,
    PodIdentity,
    admin_comment,
    job_extra,
    job_name,
    member_id,
    parse_extra,
)

A, B, C = "0123456789ab", "abcdef012345", "ffffffffffff"
GANG = PodIdentity("ns", "label:train", "0" * 31 + "f", "sunk", (A, B, C))
POD = PodIdentity("ns", "p-0", "1234-abcd", "sunk")


def test_a_gang_extra_names_its_members_in_rank_order_and_round_trips() -> None:
    extra = job_extra(GANG)
    assert extra == (f"sunk-gang=ns/label:train uid={'0' * 31}f scheduler=sunk "
                     f"members={A},{B},{C}")
    assert parse_extra(extra) == (GANG, False)
    who, _ = parse_extra(extra)
    assert who is not None and who.gang and who.members == (A, B, C)
    reordered = dataclasses.replace(GANG, members=(C, A, B))
    assert parse_extra(job_extra(reordered))[0] == reordered != GANG


def test_a_gang_extra_says_when_the_script_started() -> None:
    extra = job_extra(GANG)
    assert parse_extra(extra + STARTED) == (GANG, True)
    assert parse_extra(extra + STARTED + "\n") == (GANG, True)
    assert parse_extra(extra + " ") == (GANG, False)


def test_a_gang_of_one() -> None:
    one = dataclasses.replace(GANG, members=(A,))
    assert job_extra(one).endswith(f"members={A}")
    assert parse_extra(job_extra(one) + STARTED) == (one, True)


def test_a_pod_extra_has_no_members_and_is_unchanged() -> None:
    assert job_extra(POD) == "sunk-pod=ns/p-0 uid=1234-abcd scheduler=sunk"
    assert not POD.gang and POD.members == ()
    assert parse_extra(job_extra(POD)) == (POD, False)
    assert job_name(POD) == "pod:ns/p-0"


def test_a_gang_job_is_named_for_the_gang() -> None:
    assert job_name(GANG) == "gang:ns/label:train"
    assert GANG.key == "ns/label:train"
    assert admin_comment(GANG) == f"sunk-pod-uid={'0' * 31}f scheduler=sunk"


@pytest.mark.parametrize("extra", [
    "sunk-gang=ns/label:train uid=abcd scheduler=sunk",  # a gang without members
    "sunk-gang=ns/label:train uid=abcd scheduler=sunk" + STARTED,
    "sunk-gang=ns/label:train uid=abcd scheduler=sunk members=",
    "sunk-gang=ns/label:train uid=abcd scheduler=sunk members=0123456789AB",  # not lowercase
    "sunk-gang=ns/label:train uid=abcd scheduler=sunk members=0123456789a",  # 11 digits
    "sunk-gang=ns/label:train uid=abcd scheduler=sunk members=ghijklmnopqr",  # not hex
    "sunk-gang=ns/label:train uid=abcd scheduler=sunk  members=0123456789ab",  # two spaces
    f"sunk-pod=ns/p-0 uid=1234 scheduler=sunk members={A}",  # a Pod's job with members
    f"sunk-pod=ns/p-0 uid=1234 scheduler=sunk members={A},{B}" + STARTED,
    f"sunk-gang=ns/label:train uid=xyz scheduler=sunk members={A}",  # uid not hex
    f"sunk-gangs=ns/label:train uid=abcd scheduler=sunk members={A}",
    f"sunk-gang=label:train uid=abcd scheduler=sunk members={A}",  # no namespace
    f" sunk-gang=ns/label:train uid=abcd scheduler=sunk members={A}",  # not at the start
])
def test_a_gang_without_members_or_a_pod_with_members_is_refused(extra: str) -> None:
    assert parse_extra(extra) == (None, False)
    assert Job(1, "x", "RUNNING", extra, "", "").owner is None


def test_a_scheduler_name_cannot_swallow_the_members() -> None:
    who, started = parse_extra(f"sunk-gang=ns/g:x uid=ab scheduler=s1 members={A}: started")
    assert who is not None and who.scheduler == "s1" and who.members == (A,) and started


def test_job_from_api_parses_a_gangs_owner() -> None:
    raw = {"job_id": 9, "name": job_name(GANG), "job_state": ["RUNNING"],
           "extra": job_extra(GANG) + STARTED, "nodes": "h100-[000-002]",
           "admin_comment": admin_comment(GANG), "state_reason": "None"}
    job = Job.from_api(raw)
    assert job.owner == GANG and job.started
    assert job.owner is not None and job.owner.gang and job.owner.members == (A, B, C)
    pending = Job.from_api({**raw, "extra": job_extra(GANG), "job_state": ["PENDING"]})
    assert pending.owner == GANG and not pending.started


# -- member_id --------------------------------------------------------------------------------
def test_member_id_is_the_first_twelve_hex_digits_lowercased() -> None:
    assert member_id("ABCDEF01-2345-6789-ABCD-EF0123456789") == "abcdef012345"
    assert member_id("01234567-89ab-cdef-0123-456789abcdef") == "0123456789ab"
    # two uids sharing only their first 12 hex digits collide: documented as unique per gang
    assert member_id("01234567-89ab-0000-0000-000000000000") == member_id(
        "01234567-89ab-ffff-ffff-ffffffffffff")
    assert member_id("01234567-89aa-cdef-0123-456789abcdef") != "0123456789ab"


@given(st.uuids())
def test_member_id_of_any_uuid_is_12_lowercase_hex_and_parses(uid: uuid.UUID) -> None:
    for text in (str(uid), str(uid).upper()):
        mid = member_id(text)
        assert re.fullmatch(r"[0-9a-f]{12}", mid)
        assert mid == uid.hex[:12]
    gang = dataclasses.replace(GANG, members=(member_id(str(uid)), A))
    assert parse_extra(job_extra(gang) + STARTED) == (gang, True)


@given(st.lists(st.uuids(), min_size=1, max_size=64, unique=True),
       st.sampled_from(["label:t", "job:train-1", "podgroup:g", "lws:infer-0"]))
def test_any_gang_round_trips(uids: list[uuid.UUID], name: str) -> None:
    gang = PodIdentity("team-a", name, uuid.uuid4().hex, "sunk-2",
                       tuple(member_id(str(u)) for u in uids))
    assert parse_extra(job_extra(gang)) == (gang, False)
    assert parse_extra(job_extra(gang) + STARTED) == (gang, True)


@pytest.mark.parametrize("members", [f"{A}c", f"{A},{B}x", f"{A},zz", f"{A},"])
def test_a_malformed_member_list_is_refused_not_cut(members: str) -> None:
    assert parse_extra(f"sunk-gang=ns/g:x uid=ab scheduler=s members={members}") == (
        None, False)
