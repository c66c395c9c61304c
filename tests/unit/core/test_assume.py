"""What was written, until the watch shows it (sunk.model.assume.AssumeCache), on plain data."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sunk.model.assume import AssumeCache, CancelsSent

LOCK = "sunk.coreweave.com/lock"
JOB = "sunk.coreweave.com/job-id"


def obj(uid: str = "u1", annotations: Mapping[str, str] | None = None,
        **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": "ns", "uid": uid}
    if annotations is not None:
        meta["annotations"] = dict(annotations)
    return {"metadata": meta, "spec": spec}


def taint(key: str = LOCK) -> dict[str, str]:
    return {"key": key, "value": "true", "effect": "NoSchedule"}


# -- annotations ----------------------------------------------------------------------------
def test_an_object_reads_as_the_watch_shows_it_when_nothing_was_written() -> None:
    cache = AssumeCache()
    assert cache.annotations(obj(annotations={"a": "1"})) == {"a": "1"}
    assert cache.annotations(obj()) == {}
    assert cache.annotations({}) == {}
    assert cache.pending_annotations("u1") == {}


def test_written_annotations_are_seen_on_top_removals_too() -> None:
    cache = AssumeCache()
    cache.wrote_annotations("u1", {JOB: "7", "gone": None})
    stale = obj(annotations={JOB: "3", "gone": "x", "kept": "y"})
    assert cache.annotations(stale) == {JOB: "7", "kept": "y"}
    assert cache.pending_annotations("u1") == {JOB: "7", "gone": None}
    # The returned dict is a copy: the object is left as the watch gave it.
    assert stale["metadata"]["annotations"] == {JOB: "3", "gone": "x", "kept": "y"}
    # Another object is not affected.
    assert cache.annotations(obj("u2", {JOB: "3"})) == {JOB: "3"}


def test_later_writes_add_to_earlier_ones() -> None:
    cache = AssumeCache()
    cache.wrote_annotations("u1", {LOCK: "pending", "a": "1"})
    cache.wrote_annotations("u1", {LOCK: "locked"})
    assert cache.pending_annotations("u1") == {LOCK: "locked", "a": "1"}
    assert cache.annotations(obj()) == {LOCK: "locked", "a": "1"}


def test_written_annotations_are_dropped_once_the_watch_shows_them() -> None:
    cache = AssumeCache()
    cache.wrote_annotations("u1", {JOB: "7", "gone": None})
    cache.observe("MODIFIED", obj(annotations={JOB: "3", "gone": "x"}))  # an older copy
    assert cache.pending_annotations("u1") == {JOB: "7", "gone": None}
    cache.observe("MODIFIED", obj(annotations={JOB: "7", "gone": "x"}))  # half of it
    assert cache.pending_annotations("u1") == {JOB: "7", "gone": None}
    cache.observe("MODIFIED", obj(annotations={JOB: "7", "other": "z"}))
    assert cache.pending_annotations("u1") == {}
    # From now on the watch alone is believed.
    assert cache.annotations(obj(annotations={JOB: "9"})) == {JOB: "9"}


def test_a_removal_is_confirmed_by_an_object_without_annotations() -> None:
    cache = AssumeCache()
    cache.wrote_annotations("u1", {"gone": None})
    cache.observe("MODIFIED", obj())
    assert cache.pending_annotations("u1") == {}


def test_another_objects_event_confirms_nothing() -> None:
    cache = AssumeCache()
    cache.wrote_annotations("u1", {JOB: "7"})
    cache.observe("MODIFIED", obj("u2", {JOB: "7"}))
    assert cache.pending_annotations("u1") == {JOB: "7"}


# -- bindings ---------------------------------------------------------------------------------
def test_a_bind_is_assumed_until_the_pod_shows_its_node() -> None:
    cache = AssumeCache()
    pending = obj()
    assert not cache.is_bound(pending)
    cache.bound("u1")
    assert cache.is_bound(pending)
    assert not cache.is_bound(obj("u2"))
    cache.observe("MODIFIED", pending)  # not yet
    assert cache.is_bound(pending)
    cache.observe("MODIFIED", obj(nodeName="n1"))
    assert cache.is_bound(obj(nodeName="n1"))
    assert not cache.is_bound(pending)  # no longer assumed: the watch is believed again


def test_a_pod_with_a_node_is_bound_without_any_assumption() -> None:
    assert AssumeCache().is_bound(obj(nodeName="n1"))
    assert not AssumeCache().is_bound({})


# -- the lock taint ---------------------------------------------------------------------------
def test_the_lock_taint_is_read_from_the_node() -> None:
    cache = AssumeCache()
    assert cache.has_taint(obj("n", taints=[taint("other"), taint()]), LOCK)
    assert not cache.has_taint(obj("n", taints=[taint("other")]), LOCK)
    assert not cache.has_taint(obj("n"), LOCK)


def test_the_lock_taint_is_assumed_until_the_node_shows_it() -> None:
    cache = AssumeCache()
    bare, tainted = obj("n"), obj("n", taints=[taint()])
    cache.set_taint("n", LOCK, True)
    assert cache.has_taint(bare, LOCK)
    assert not cache.has_taint(bare, "other")  # only that key is assumed
    cache.observe("MODIFIED", bare)
    assert cache.has_taint(bare, LOCK)
    cache.observe("MODIFIED", tainted)
    assert not cache.has_taint(bare, LOCK)  # confirmed, so no longer assumed


def test_a_removed_taint_is_assumed_gone_until_the_node_shows_it() -> None:
    cache = AssumeCache()
    bare, tainted = obj("n"), obj("n", taints=[taint()])
    cache.set_taint("n", LOCK, False)
    assert not cache.has_taint(tainted, LOCK)
    cache.observe("MODIFIED", tainted)
    assert not cache.has_taint(tainted, LOCK)
    cache.observe("MODIFIED", bare)
    assert cache.has_taint(tainted, LOCK)


def test_the_last_taint_write_wins() -> None:
    cache = AssumeCache()
    cache.set_taint("n", LOCK, True)
    cache.set_taint("n", LOCK, False)
    assert not cache.has_taint(obj("n", taints=[taint()]), LOCK)


# -- forgetting -------------------------------------------------------------------------------
def written() -> AssumeCache:
    cache = AssumeCache()
    cache.wrote_annotations("u1", {JOB: "7"})
    cache.bound("u1")
    cache.set_taint("u1", LOCK, True)
    cache.wrote_annotations("u2", {JOB: "8"})
    cache.bound("u2")
    return cache


def assert_forgot_u1_only(cache: AssumeCache) -> None:
    assert cache.pending_annotations("u1") == {}
    assert cache.annotations(obj(annotations={JOB: "3"})) == {JOB: "3"}
    assert not cache.is_bound(obj())
    assert not cache.has_taint(obj(), LOCK)
    assert cache.pending_annotations("u2") == {JOB: "8"}
    assert cache.is_bound(obj("u2"))


def test_deleted_forgets_everything_of_that_uid() -> None:
    cache = written()
    cache.observe("DELETED", obj(annotations={JOB: "3"}))
    assert_forgot_u1_only(cache)


def test_forget() -> None:
    cache = written()
    cache.forget("u1")
    assert_forgot_u1_only(cache)
    cache.forget("u1")  # twice is fine
    cache.forget("never-seen")
    assert cache.pending_annotations("u2") == {JOB: "8"}


def test_a_later_change_by_someone_else_ends_the_assumption() -> None:
    cache = AssumeCache()
    cache.wrote_annotations("u1", {"a": "ours"}, resource_version="120")
    older = {"metadata": {"uid": "u1", "resourceVersion": "119", "annotations": {}}}
    cache.observe("MODIFIED", older)
    assert cache.annotations(older) == {"a": "ours"}, "an event from before our write"
    overwritten = {"metadata": {"uid": "u1", "resourceVersion": "121",
                                "annotations": {"a": "theirs"}}}
    cache.observe("MODIFIED", overwritten)
    assert cache.annotations(overwritten) == {"a": "theirs"}
    assert cache.pending_annotations("u1") == {}


def versioned(version: str, uid: str = "u1", **annotations: str) -> dict[str, Any]:
    return {"metadata": {"uid": uid, "resourceVersion": version, "annotations": annotations}}


def test_a_write_the_watch_showed_before_its_answer_is_not_assumed() -> None:
    """The watch's event can be read before the write's own answer: recorded after it, the
    write would stay assumed until the object next changes (a Pod pending in Slurm: never)."""
    cache = AssumeCache()
    cache.wrote_annotations("u1", {JOB: "7"}, "120", watched=versioned("120", **{JOB: "7"}))
    assert cache.pending_annotations("u1") == {}
    assert cache.waiting() == 0
    # a later version shown (someone else wrote since): the watch is right as well
    cache.wrote_annotations("u1", {JOB: "8"}, "121", watched=versioned("125", **{JOB: "9"}))
    assert cache.annotations(versioned("125", **{JOB: "9"})) == {JOB: "9"}


def test_a_write_the_watch_has_not_shown_is_assumed() -> None:
    cache = AssumeCache()
    for watched in (versioned("119", **{JOB: "6"}),  # an older copy
                    versioned("130", uid="u0"),  # another object of that name
                    None):  # not watched
        cache.wrote_annotations("u1", {JOB: "7"}, "120", watched=watched)
        assert cache.pending_annotations("u1") == {JOB: "7"}
        assert cache.waiting() == 1
        cache.observe("MODIFIED", versioned("120", **{JOB: "7"}))
        assert cache.waiting() == 0


def test_a_newer_assumed_write_stays_when_an_older_one_is_shown() -> None:
    cache = AssumeCache()
    cache.assume_annotations("u1", {JOB: "7", "uid": "u1"})
    cache.assume_annotations("u1", {JOB: "8"})  # replaced before the first was answered
    cache.wrote_annotations("u1", {JOB: "7", "uid": "u1"}, "120",
                            watched=versioned("120", **{JOB: "7", "uid": "u1"}))
    assert cache.pending_annotations("u1") == {JOB: "8"}


def test_waiting_counts_each_kind_of_write() -> None:
    cache = AssumeCache()
    cache.wrote_annotations("u1", {JOB: "7"})
    cache.bound("u1")
    cache.set_taint("n1", LOCK, True)
    assert cache.waiting() == 3
    cache.forget("u1")
    assert cache.waiting() == 1


def test_a_write_the_watch_shows_already_is_not_assumed_even_without_a_version() -> None:
    """A binding's answer carries no version: the watched object's content decides."""
    cache = AssumeCache()
    cache.wrote_annotations("u1", {JOB: "7"}, watched=versioned("5", **{JOB: "7"}))
    cache.bound("u1", watched=obj(nodeName="n1"))
    assert cache.waiting() == 0
    assert cache.is_bound(obj()) is False, "the watch is trusted: it shows the Node"
    cache.bound("u1", watched=obj())  # not on a Node yet in the watch: assumed
    cache.bound("u2", watched=obj(nodeName="n1"))  # another object's copy proves nothing
    cache.wrote_annotations("u1", {JOB: "8"}, watched=versioned("5", **{JOB: "7"}))
    assert cache.is_bound(obj("u1")) and cache.is_bound(obj("u2"))
    assert cache.pending_annotations("u1") == {JOB: "8"}


def test_a_taint_the_watch_shows_already_is_not_assumed() -> None:
    cache = AssumeCache()
    node = {"metadata": {"uid": "n1", "resourceVersion": "3"}, "spec": {"taints": [taint()]}}
    cache.set_taint("n1", LOCK, True, "3", watched=node)
    assert cache.waiting() == 0
    cache.set_taint("n1", LOCK, False, "4", watched=node)  # the watch is behind: assumed
    assert cache.has_taint(node, LOCK) is False
    cache.set_taint("n1", LOCK, True, "5", watched={**node, "metadata": {
        "uid": "n1", "resourceVersion": "5"}})  # shown at its version: no longer assumed
    assert cache.waiting() == 0


def test_a_write_answered_after_its_object_was_deleted_is_not_assumed() -> None:
    """Nothing would confirm it: it would stay for good."""
    cache = AssumeCache()
    cache.observe("DELETED", obj("u1"))
    cache.wrote_annotations("u1", {JOB: "7"}, "120")
    cache.assume_annotations("u1", {JOB: "8"})
    cache.bound("u1")
    cache.set_taint("u1", LOCK, True, "121")
    assert cache.waiting() == 0
    cache.bound("u2")  # another object is assumed as ever
    assert cache.waiting() == 1


def test_only_the_newest_deleted_uids_are_kept(monkeypatch: Any) -> None:
    monkeypatch.setattr("sunk.model.assume.DELETED_KEPT", 2)
    cache = AssumeCache()
    for uid in ("u1", "u2", "u3"):
        cache.observe("DELETED", obj(uid))
    cache.bound("u1")  # forgotten as deleted: a write to it is assumed again
    cache.bound("u3")
    assert cache.is_bound(obj("u1")) and not cache.is_bound(obj("u3"))


# -- cancels sent to Slurm -----------------------------------------------------------------
def test_a_cancel_is_in_hand_for_a_while_then_not() -> None:
    sent = CancelsSent(in_hand=10.0)
    sent.sent(41, now=100.0)
    assert sent.pending(41, now=100.0) and sent.pending(41, now=109.9)
    assert not sent.pending(41, now=110.0), "not ended after it: cancelled again when asked"
    assert not sent.pending(42, now=100.0)


def test_cancels_no_longer_in_hand_are_dropped_as_new_ones_come() -> None:
    sent = CancelsSent(in_hand=10.0)
    for n in range(1000):
        sent.sent(n, now=float(n))
    assert len(sent) == 10, "only the last ten seconds' cancels are kept"
    assert [n for n in range(1000) if sent.pending(n, now=999.0)] == list(range(990, 1000))
    sent.sent(995, now=1000.0)  # sent again: its time is the new one
    assert sent.pending(995, now=1009.0) and not sent.pending(991, now=1009.0)


def test_forgotten_cancels_are_sent_again() -> None:
    sent = CancelsSent()
    sent.sent(7, now=0.0)
    sent.sent(8, now=0.0)
    sent.failed(8)
    assert sent.pending(7, now=0.0) and not sent.pending(8, now=0.0), "a failed one is not kept"
    sent.forget()
    assert not sent.pending(7, now=0.0) and len(sent) == 0
