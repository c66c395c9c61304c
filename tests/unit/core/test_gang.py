"""Which gang a Pod claims, and a gang assembled from its Pods (sunk.plans.gang), on plain data."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sunk.plans.gang import (
    GANG_LABEL,
    INDEX_ANNOTATION,
    JOB_INDEX,
    LWS_GROUP_INDEX,
    LWS_GROUP_KEY,
    LWS_NAME,
    LWS_SIZE,
    LWS_WORKER_INDEX,
    PODGROUP_LABEL,
    SIZE_ANNOTATION,
    Claim,
    Gang,
    Member,
    Owners,
    assemble,
    claim,
    gang_id,
    gang_name,
)
from sunk.slurm.job import member_id

PREFIX = "sunk.coreweave.com/"
MAX = 64
JobShape = tuple[int | None, int | None]


def owners(jobs: Mapping[tuple[str, str], JobShape] | None = None,
           groups: Mapping[tuple[str, str], int] | None = None, *,
           known: bool = True) -> Owners:
    jobs, groups = dict(jobs or {}), dict(groups or {})
    return Owners(job=lambda ns, n: jobs.get((ns, n)),
                  podgroup=lambda ns, n: groups.get((ns, n)), podgroups_known=known)


NONE = owners()


def uid(i: int) -> str:
    return f"{i:08x}-1111-2222-3333-444455556666"


def pod(name: str = "p-0", *, labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None, owner: Any = None,
        namespace: str = "ns", uid_: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": namespace, "name": name,
                            "uid": uid_ or uid(int(name.rsplit("-", 1)[-1])
                                               if name[-1].isdigit() else 99),
                            "labels": dict(labels or {}), "annotations": dict(annotations or {})}
    if owner is not None:
        meta["ownerReferences"] = owner
    return {"metadata": meta, "spec": {}}


def job_ref(name: str = "train", **over: Any) -> list[dict[str, Any]]:
    return [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": "j",
             "controller": True, **over}]


def sunk_pod(name: str, gang: str = "train", size: str | None = "3",
             index: str | None = None) -> dict[str, Any]:
    annotations = {}
    if size is not None:
        annotations[PREFIX + SIZE_ANNOTATION] = size
    if index is not None:
        annotations[PREFIX + INDEX_ANNOTATION] = index
    return pod(name, labels={PREFIX + GANG_LABEL: gang}, annotations=annotations)


def lws_pod(name: str, worker: str | None, *, size: str | None = "3", group: str = "1",
            lws: str | None = "infer") -> dict[str, Any]:
    labels = {LWS_GROUP_KEY: "0123abcd", LWS_GROUP_INDEX: group}
    if lws is not None:
        labels[LWS_NAME] = lws
    if worker is not None:
        labels[LWS_WORKER_INDEX] = worker
    return pod(name, labels=labels, annotations={LWS_SIZE: size} if size is not None else {})


# -- gang_name and claim: the four sources ------------------------------------------------------
def test_a_plain_pod_is_no_gang() -> None:
    plain = pod()
    assert gang_name(plain, PREFIX) is None
    assert claim(plain, PREFIX, NONE) is None
    assert claim({"metadata": {"name": "p", "namespace": "ns"}}, PREFIX, NONE) is None
    # sunk's label under another prefix is someone else's
    other = pod(labels={"example.com/" + GANG_LABEL: "train"})
    assert claim(other, PREFIX, NONE) is None


def test_sunk_label_gives_name_size_and_index_as_written() -> None:
    p = sunk_pod("p-0", size="4", index="2")
    assert gang_name(p, PREFIX) == "label:train"
    assert claim(p, PREFIX, NONE) == Claim("label:train", "4", "2")
    # unchecked here: whatever is written is carried to assemble
    assert claim(sunk_pod("p-0", size="abc"), PREFIX, NONE) == Claim("label:train", "abc", None)
    assert claim(sunk_pod("p-0", size=None), PREFIX, NONE) == Claim("label:train", None, None)


def test_podgroup_size_is_its_min_member() -> None:
    p = pod(labels={PODGROUP_LABEL: "g1"})
    groups = owners(groups={("ns", "g1"): 4})
    assert gang_name(p, PREFIX) == "podgroup:g1"
    assert claim(p, PREFIX, groups) == Claim("podgroup:g1", "4")
    # looked up in the Pod's own namespace
    elsewhere = pod(labels={PODGROUP_LABEL: "g1"}, namespace="other")
    assert claim(elsewhere, PREFIX, groups) == Claim(
        "podgroup:g1", None, waiting="PodGroup g1 not found")


def test_podgroup_not_found_or_not_watched_waits() -> None:
    p = pod(labels={PODGROUP_LABEL: "g1"})
    assert claim(p, PREFIX, NONE) == Claim("podgroup:g1", None, waiting="PodGroup g1 not found")
    assert claim(p, PREFIX, owners(known=False)) == Claim(
        "podgroup:g1", None,
        waiting="PodGroups are not watched (their CRD is not installed)")


def test_podgroup_min_member_zero_is_carried_as_written() -> None:
    c = claim(pod(labels={PODGROUP_LABEL: "g"}), PREFIX, owners(groups={("ns", "g"): 0}))
    assert c == Claim("podgroup:g", "0")


def test_lws_group_named_by_lws_and_group_index_ranked_by_worker_index() -> None:
    leader = lws_pod("infer-1", "0")
    worker = lws_pod("infer-1-2", "2")
    assert gang_name(leader, PREFIX) == gang_name(worker, PREFIX) == "lws:infer-1"
    assert claim(leader, PREFIX, NONE) == Claim("lws:infer-1", "3", "0")
    assert claim(worker, PREFIX, NONE) == Claim("lws:infer-1", "3", "2")
    # another group of the same LWS is another gang
    assert gang_name(lws_pod("infer-0", "0", group="0"), PREFIX) == "lws:infer-0"


def test_lws_without_name_or_group_index_falls_back_to_the_group_key() -> None:
    assert gang_name(lws_pod("x-0", "0", lws=None), PREFIX) == "lws:0123abcd"
    no_index = pod(labels={LWS_GROUP_KEY: "k", LWS_NAME: "infer"})
    assert gang_name(no_index, PREFIX) == "lws:k"
    empty_name = pod(labels={LWS_GROUP_KEY: "k", LWS_NAME: "", LWS_GROUP_INDEX: "0"})
    assert gang_name(empty_name, PREFIX) == "lws:k"
    assert claim(lws_pod("x-0", None, size=None), PREFIX, NONE) == Claim("lws:infer-1", None,
                                                                           None)


@pytest.mark.parametrize(("parallelism", "completions"), [(2, 2), (3, 3), (64, 64)])
def test_a_job_running_all_pods_at_once_is_a_gang(parallelism: int, completions: int) -> None:
    p = pod(owner=job_ref(), labels={JOB_INDEX: "1"})
    shapes = owners(jobs={("ns", "train"): (parallelism, completions)})
    assert gang_name(p, PREFIX) == "job:train"
    assert claim(p, PREFIX, shapes) == Claim("job:train", str(parallelism), "1")
    non_indexed = pod(owner=job_ref())
    assert claim(non_indexed, PREFIX, shapes) == Claim("job:train", str(parallelism), None)


@pytest.mark.parametrize("shape", [(2, 3), (3, 2), (1, 1), (None, None), (None, 3), (3, None),
                                   (0, 0), (-2, -2)])
def test_a_job_not_running_all_pods_at_once_schedules_each_alone(shape: JobShape) -> None:
    p = pod(owner=job_ref())
    assert gang_name(p, PREFIX) == "job:train"  # a candidate by its owner...
    assert claim(p, PREFIX, owners(jobs={("ns", "train"): shape})) is None  # ...but no gang


def test_a_job_not_seen_yet_waits() -> None:
    p = pod(owner=job_ref())
    assert claim(p, PREFIX, NONE) == Claim("job:train", None, waiting="Job train not seen yet")
    # another namespace's Job of the same name is not this Pod's
    assert claim(p, PREFIX, owners(jobs={("other", "train"): (2, 2)})) == Claim(
        "job:train", None, waiting="Job train not seen yet")


@pytest.mark.parametrize("ref", [
    {"controller": False}, {"controller": None}, {"kind": "CronJob"},
    {"apiVersion": "example.com/v1"}, {"apiVersion": "batchx"}, {"kind": "job"},
])
def test_only_a_controlling_batch_job_owner_counts(ref: dict[str, Any]) -> None:
    p = pod(owner=job_ref(**ref))
    assert gang_name(p, PREFIX) is None
    assert claim(p, PREFIX, owners(jobs={("ns", "train"): (3, 3)})) is None


def test_an_owner_reference_without_controller_does_not_count() -> None:
    refs = job_ref()
    del refs[0]["controller"]
    assert gang_name(pod(owner=refs), PREFIX) is None


def test_odd_owner_references_are_skipped_not_fatal() -> None:
    refs = ["junk", None, {"kind": "ReplicaSet", "apiVersion": "apps/v1", "controller": True,
                           "name": "rs"}, *job_ref("second")]
    assert gang_name(pod(owner=refs), PREFIX) == "job:second"
    assert gang_name(pod(owner=None), PREFIX) is None
    assert gang_name(pod(owner=[]), PREFIX) is None


def test_sources_are_checked_in_order_label_podgroup_lws_job() -> None:
    everything = {PREFIX + GANG_LABEL: "mine", PODGROUP_LABEL: "g", LWS_GROUP_KEY: "k",
                  LWS_NAME: "l", LWS_GROUP_INDEX: "0"}
    assert gang_name(pod(labels=everything, owner=job_ref()), PREFIX) == "label:mine"
    del everything[PREFIX + GANG_LABEL]
    assert gang_name(pod(labels=everything, owner=job_ref()), PREFIX) == "podgroup:g"
    del everything[PODGROUP_LABEL]
    assert gang_name(pod(labels=everything, owner=job_ref()), PREFIX) == "lws:l-0"
    assert gang_name(pod(owner=job_ref()), PREFIX) == "job:train"


def test_a_labelled_job_pod_takes_its_size_from_the_label_source() -> None:
    # A Job that does not run all at once, but whose Pods say they are a gang: the label wins.
    p = pod(labels={PREFIX + GANG_LABEL: "t"}, annotations={PREFIX + SIZE_ANNOTATION: "2"},
            owner=job_ref())
    assert claim(p, PREFIX, owners(jobs={("ns", "train"): (1, 5)})) == Claim("label:t", "2")


@pytest.mark.parametrize(("labels", "owner", "name"), [
    ({PREFIX + GANG_LABEL: "x"}, None, "label:x"),
    ({PODGROUP_LABEL: "g"}, None, "podgroup:g"),
    ({LWS_GROUP_KEY: "k", LWS_NAME: "a", LWS_GROUP_INDEX: "0"}, None, "lws:a-0"),
    ({}, job_ref(), "job:train"),
])
def test_every_gang_name_has_a_colon(labels: dict[str, str], owner: Any, name: str) -> None:
    # no Pod name has one, so a gang's key is never a Pod's
    found = gang_name(pod(labels=labels, owner=owner), PREFIX)
    assert found == name and ":" in found


# -- gang_id ------------------------------------------------------------------------------------
def test_gang_id_is_stable_hex_and_differs_by_namespace_and_name() -> None:
    gid = gang_id("ns", "label:train")
    assert gid == hashlib.sha256(b"ns/label:train").hexdigest()[:32]
    assert re.fullmatch(r"[0-9a-f]{32}", gid)
    assert gang_id("ns", "label:train") == gid
    assert gang_id("other", "label:train") != gid
    assert gang_id("ns", "job:train") != gid
    g = Gang("ns", "label:train", 3, ())
    assert g.id == gid and g.key == "ns/label:train"


@given(st.text(min_size=1, max_size=20), st.text(min_size=1, max_size=30))
def test_gang_id_is_always_32_lowercase_hex(namespace: str, name: str) -> None:
    assert re.fullmatch(r"[0-9a-f]{32}", gang_id(namespace, name))


# -- assemble -----------------------------------------------------------------------------------
def together(*pods: dict[str, Any], own: Owners = NONE,
             max_size: int = MAX) -> Gang:
    pairs = []
    for p in pods:
        c = claim(p, PREFIX, own)
        assert c is not None
        pairs.append((p, c))
    name = pairs[0][1].name if pairs else "label:train"
    return assemble("ns", name, pairs, max_size=max_size)


def ranks(g: Gang) -> list[tuple[str, int]]:
    return [(m.key, m.rank) for m in g.members]


def test_a_whole_gang_without_ranks_is_ranked_by_name() -> None:
    g = together(sunk_pod("p-2"), sunk_pod("p-0"), sunk_pod("p-1"))
    assert g == Gang("ns", "label:train", 3, (Member("ns/p-0", uid(0), 0),
                                              Member("ns/p-1", uid(1), 1),
                                              Member("ns/p-2", uid(2), 2)))
    assert g.complete and not g.problem and not g.waiting
    assert [m.id for m in g.members] == [member_id(uid(i)) for i in range(3)]


def test_name_order_is_string_order_not_numeric() -> None:
    g = together(*(sunk_pod(f"p-{i}", size="11") for i in range(11)))
    assert [k for k, _ in ranks(g)][:3] == ["ns/p-0", "ns/p-1", "ns/p-10"]
    assert [r for _, r in ranks(g)] == list(range(11))


def test_rank_hints_win_over_name_order() -> None:
    g = together(sunk_pod("p-0", index="2"), sunk_pod("p-1", index="0"),
                 sunk_pod("p-2", index="1"))
    assert ranks(g) == [("ns/p-1", 0), ("ns/p-2", 1), ("ns/p-0", 2)]
    assert g.complete
    # whitespace around a hint is forgiven, as for the size
    g = together(sunk_pod("p-0", index=" 1 "), sunk_pod("p-1", index="0"), sunk_pod("p-2",
                                                                                  index="2"))
    assert ranks(g) == [("ns/p-1", 0), ("ns/p-0", 1), ("ns/p-2", 2)]


def test_an_incomplete_gang_with_hints_keeps_their_ranks() -> None:
    g = together(sunk_pod("p-0", size="4", index="3"), sunk_pod("p-1", size="4", index="1"))
    assert ranks(g) == [("ns/p-1", 1), ("ns/p-0", 3)]
    assert g.size == 4 and not g.problem and not g.complete


def test_an_incomplete_gang_without_hints_is_not_complete() -> None:
    g = together(sunk_pod("p-0", size="3"), sunk_pod("p-1", size="3"))
    assert g.size == 3 and not g.problem and not g.waiting and not g.complete
    assert ranks(g) == [("ns/p-0", 0), ("ns/p-1", 1)]


@given(st.permutations(range(6)))
def test_any_permutation_of_hints_gives_members_in_rank_order(perm: list[int]) -> None:
    pods = [sunk_pod(f"p-{i}", size="6", index=str(r)) for i, r in enumerate(perm)]
    g = together(*pods)
    assert g.complete
    assert [m.rank for m in g.members] == list(range(6))
    assert {m.key: m.rank for m in g.members} == {f"ns/p-{i}": r for i, r in enumerate(perm)}


def test_a_gang_of_one_is_allowed() -> None:
    g = together(sunk_pod("p-0", size="1"))
    assert g.complete and g.size == 1


@pytest.mark.parametrize("size", ["0", "abc", "\u0663", "\u00b3", "-1", "+3", "3.0", "1e3", "",
                                  " ", "0x3", "1000000", "99999999999999999999", str(MAX + 1),
                                  "3 3"])
def test_a_bad_size_is_a_problem(size: str) -> None:
    g = together(sunk_pod("p-0", size=size), sunk_pod("p-1", size=size))
    assert g.size is None and not g.complete
    assert g.problem == (f"gang size {size[:20]!r} is not a whole number from 1 to {MAX}")
    # members are still listed (in name order), so each gets told
    assert ranks(g) == [("ns/p-0", 0), ("ns/p-1", 1)]


@pytest.mark.parametrize(("size", "n"), [(" 2 ", 2), ("02", 2), (str(MAX), MAX), ("000001", 1)])
def test_a_good_size_as_written(size: str, n: int) -> None:
    g = together(*(sunk_pod(f"p-{i}", size=size) for i in range(min(n, 3))))
    assert g.size == n and not g.problem
    assert g.complete == (n <= 3)


def test_the_largest_size_follows_max_size() -> None:
    g = together(sunk_pod("p-0", size="8"), max_size=8)
    assert g.size == 8 and not g.problem
    g = together(sunk_pod("p-0", size="9"), max_size=8)
    assert g.size is None and "from 1 to 8" in g.problem


def test_a_huge_size_is_cut_in_the_message() -> None:
    g = together(sunk_pod("p-0", size="9" * 500))
    assert g.problem == f"gang size {'9' * 20!r} is not a whole number from 1 to {MAX}"


def test_members_disagreeing_on_size_is_a_problem() -> None:
    g = together(sunk_pod("p-0", size="3"), sunk_pod("p-1", size="2"), sunk_pod("p-2", size="3"))
    assert g.size is None and not g.complete
    assert g.problem == "members disagree on the gang's size: '2', '3'"
    # written differently is disagreeing too (sizes are compared as written)
    g = together(sunk_pod("p-0", size="3"), sunk_pod("p-1", size="03"))
    assert g.problem.startswith("members disagree on the gang's size")


def test_no_member_giving_a_size_is_a_problem() -> None:
    g = together(sunk_pod("p-0", size=None), sunk_pod("p-1", size=None))
    assert g.size is None and g.problem == "no member gives the gang's size"
    empty = assemble("ns", "label:train", [], max_size=MAX)
    assert empty.members == () and empty.problem == "no member gives the gang's size"
    assert not empty.complete


def test_some_members_without_size_is_a_problem() -> None:
    g = together(sunk_pod("p-0", size="2"), sunk_pod("p-1", size=None))
    assert g.size == 2 and not g.complete
    assert g.problem == "some members do not give the gang's size"


def test_more_pods_than_the_size_is_a_problem() -> None:
    g = together(*(sunk_pod(f"p-{i}", size="2") for i in range(3)))
    assert g.size == 2 and not g.complete
    assert g.problem == ("3 Pods claim a gang of 2: a gang's job has a fixed number of nodes; "
                         "remove the extra Pods")
    # checked before the missing sizes
    g = together(sunk_pod("p-0", size="1"), sunk_pod("p-1", size=None))
    assert g.problem.startswith("2 Pods claim a gang of 1")


def test_duplicated_ranks_are_a_problem() -> None:
    g = together(sunk_pod("p-0", index="1"), sunk_pod("p-1", index="1"),
                 sunk_pod("p-2", index="0"))
    assert g.problem == "members' ranks are not distinct numbers from 0 to 2: [0, 1, 1]"
    assert not g.complete and g.size == 3
    assert ranks(g) == [("ns/p-0", 0), ("ns/p-1", 1), ("ns/p-2", 2)]  # name order


@pytest.mark.parametrize("index", ["3", "4", "999999"])
def test_a_rank_out_of_range_is_a_problem(index: str) -> None:
    g = together(sunk_pod("p-0", index="0"), sunk_pod("p-1", index="1"),
                 sunk_pod("p-2", index=index))
    assert g.problem == (f"members' ranks are not distinct numbers from 0 to 2: "
                         f"[0, 1, {int(index)}]")
    assert not g.complete


@pytest.mark.parametrize("index", ["x", "-1", "\u0662", "1.0", "", "1000000", "+1"])
def test_a_rank_not_a_whole_number_is_a_problem(index: str) -> None:
    g = together(sunk_pod("p-0", index="0"), sunk_pod("p-1", index="1"),
                 sunk_pod("p-2", index=index))
    assert g.problem == ("members' ranks are not all whole numbers: '0', '1', "
                         f"{index[:12]!r}")
    assert not g.complete


def test_ranks_given_by_some_members_only_is_a_problem() -> None:
    g = together(sunk_pod("p-0", index="0"), sunk_pod("p-1"), sunk_pod("p-2", index="2"))
    assert g.problem == "members' ranks are not all whole numbers: '0', '', '2'"
    assert not g.complete


def test_waiting_comes_before_any_problem() -> None:
    own = owners(jobs={("ns", "train"): (2, 2)})
    waiting = claim(pod("p-0", owner=job_ref()), PREFIX, NONE)
    known = claim(pod("p-1", owner=job_ref(), labels={JOB_INDEX: "7"}), PREFIX, own)
    assert waiting is not None and known is not None
    g = assemble("ns", "job:train", [(pod("p-0"), waiting), (pod("p-1"), known)], max_size=MAX)
    assert g.waiting == "Job train not seen yet" and not g.problem
    assert g.size is None and not g.complete
    assert ranks(g) == [("ns/p-0", 0), ("ns/p-1", 1)]


# -- assemble with each source ---------------------------------------------------------------
def test_an_indexed_job_is_ranked_by_completion_index() -> None:
    own = owners(jobs={("ns", "train"): (3, 3)})
    pods = [pod(f"train-{i}", owner=job_ref(), labels={JOB_INDEX: str(2 - i)})
            for i in range(3)]
    g = together(*pods, own=own)
    assert g.name == "job:train" and g.complete
    assert ranks(g) == [("ns/train-2", 0), ("ns/train-1", 1), ("ns/train-0", 2)]


def test_a_non_indexed_job_is_ranked_by_name() -> None:
    own = owners(jobs={("ns", "train"): (2, 2)})
    g = together(pod("train-1", owner=job_ref()), pod("train-0", owner=job_ref()), own=own)
    assert g.complete and ranks(g) == [("ns/train-0", 0), ("ns/train-1", 1)]


def test_a_job_with_more_pods_than_parallelism_is_a_problem() -> None:
    own = owners(jobs={("ns", "train"): (2, 2)})
    g = together(*(pod(f"train-{i}", owner=job_ref()) for i in range(3)), own=own)
    assert g.problem.startswith("3 Pods claim a gang of 2")


def test_an_lws_group_leader_is_rank_zero() -> None:
    g = together(lws_pod("infer-1-2", "2"), lws_pod("infer-1-1", "1"), lws_pod("infer-1", "0"))
    assert g.complete
    assert ranks(g) == [("ns/infer-1", 0), ("ns/infer-1-1", 1), ("ns/infer-1-2", 2)]


def test_an_lws_group_with_a_missing_worker_index_is_a_problem() -> None:
    g = together(lws_pod("infer-1", "0"), lws_pod("infer-1-1", None), lws_pod("infer-1-2", "2"))
    assert g.problem.startswith("members' ranks are not all whole numbers")


def test_a_podgroup_gang() -> None:
    own = owners(groups={("ns", "g"): 2})
    g = together(pod("a-1", labels={PODGROUP_LABEL: "g"}), pod("a-0", labels={PODGROUP_LABEL:
                                                                              "g"}), own=own)
    assert g.name == "podgroup:g" and g.complete
    assert ranks(g) == [("ns/a-0", 0), ("ns/a-1", 1)]
    more = together(*(pod(f"a-{i}", labels={PODGROUP_LABEL: "g"}) for i in range(3)), own=own)
    assert more.problem.startswith("3 Pods claim a gang of 2")
    none = together(pod("a-0", labels={PODGROUP_LABEL: "g"}))
    assert none.waiting == "PodGroup g not found" and not none.complete


@pytest.mark.parametrize("min_member", [0, -1, MAX + 1])
def test_a_podgroup_with_a_bad_min_member_is_a_problem(min_member: int) -> None:
    own = owners(groups={("ns", "g"): min_member})
    g = together(pod("a-0", labels={PODGROUP_LABEL: "g"}), own=own)
    assert g.problem == (f"gang size {str(min_member)!r} is not a whole number from 1 to {MAX}")


def test_complete_needs_the_exact_count_and_no_problem_or_waiting() -> None:
    members = (Member("ns/a", uid(0), 0), Member("ns/b", uid(1), 1))
    assert Gang("ns", "label:g", 2, members).complete
    assert not Gang("ns", "label:g", 3, members).complete
    assert not Gang("ns", "label:g", 1, members).complete
    assert not Gang("ns", "label:g", None, members).complete
    assert not Gang("ns", "label:g", 2, members, problem="x").complete
    assert not Gang("ns", "label:g", 2, members, waiting="x").complete


def test_member_id_is_from_the_pod_uid() -> None:
    m = Member("ns/a", "ABCDEF01-2345-6789-abcd-ef0123456789", 0)
    assert m.id == "abcdef012345"
