"""Why a Pod waits, as a PodScheduled condition: Slurm's reasons in words, the start estimate,
the nominated Node, and when a change is worth a write."""

from __future__ import annotations

import pytest

from sunk.plans import waiting

NOW = 1_800_000_000.0


@pytest.mark.parametrize(("reason", "words"), [
    ("Resources", "the nodes it can use are busy"),
    ("Priority", "jobs of higher priority are ahead of it"),
    ("ReqNodeNotAvail", "a node it needs is not available"),
    ("Reservation", "it waits for its reservation to begin"),
    ("QOSMaxGRESPerUser", "a limit of its QOS is reached (QOSMaxGRESPerUser)"),
    ("AssocGrpCpuLimit", "a limit of its account is reached (AssocGrpCpuLimit)"),
    ("SomethingNew", "SomethingNew"),
    ("", "no reason given yet"),
])
def test_slurm_reasons_read_as_words(reason: str, words: str) -> None:
    assert waiting.slurm_reason_in_words(reason).startswith(words)


@pytest.mark.parametrize(("start_time", "expected"), [
    ({"set": True, "infinite": False, "number": int(NOW) + 600}, NOW + 600),
    (int(NOW) + 60, NOW + 60),
    ({"set": False, "infinite": False, "number": 0}, None),
    ({"set": True, "infinite": True, "number": 0}, None),
    ({"set": True, "infinite": False, "number": 0}, None),
    ({"set": True, "infinite": False, "number": int(NOW) - 5}, None),  # past: no estimate
    (None, None), ("soon", None), (True, None),
])
def test_the_start_estimate_is_read_only_where_slurm_gives_one(
        start_time: object, expected: float | None) -> None:
    assert waiting.expected_start({"start_time": start_time}, NOW) == expected


def test_a_pending_job_names_itself_its_reason_its_start_and_its_planned_node() -> None:
    shown = waiting.in_slurm(42, "Priority", NOW + 3600, ["kwok-node-3", "kwok-node-4"])
    assert shown.reason == waiting.PENDING
    assert shown.message == (
        "Slurm job 42 is pending (Priority): jobs of higher priority are ahead of it; Slurm "
        "expects it to start at 2027-01-15T09:00:00Z on kwok-node-3, kwok-node-4.")
    assert (shown.nominated, shown.expected_start) == ("kwok-node-3", NOW + 3600)
    plain = waiting.in_slurm(42, "Resources", None, ["kwok-node-3"], gang="team/train")
    assert plain.message.startswith("gang team/train's Slurm job 42 is pending (Resources)")
    assert "expects" not in plain.message and plain.nominated == ""  # no plan without a start


def test_a_condition_is_written_once_per_change_and_not_more_often_than_every_10s() -> None:
    first = waiting.in_slurm(1, "Resources", None, [])
    other = waiting.in_slurm(1, "Priority", None, [])
    assert waiting.to_write(None, first, NOW) == 0.0
    shown = waiting.Shown(first, at=NOW)
    assert waiting.to_write(shown, first, NOW + 100) is None  # shown already
    assert waiting.to_write(shown, other, NOW + 4) == pytest.approx(6.0)
    assert waiting.to_write(shown, other, NOW + 10) == 0.0


def test_a_start_estimate_that_moved_a_little_is_not_written_again() -> None:
    wall = NOW
    shown = waiting.Shown(waiting.in_slurm(1, "Priority", NOW + 600, ["n1"]), at=0.0)

    def moved(to: float, reason: str = "Priority", nodes: tuple[str, ...] = ("n1",)
              ) -> float | None:
        """to_write after Slurm's estimate moved to ``to``."""
        return waiting.to_write(shown, waiting.in_slurm(1, reason, to, list(nodes)), 100.0,
                                wall)

    assert moved(NOW + 640) is None          # 40 s: under a minute
    assert moved(NOW + 540) == 0.0           # a minute earlier: written
    assert moved(NOW + 700) == 0.0           # 100 s, over a tenth of the wait (70 s)
    assert moved(NOW + 620, "Resources") == 0.0       # another reason
    assert moved(NOW + 620, nodes=("n2",)) == 0.0     # another planned Node
    assert moved(NOW + 620, nodes=("n1", "n3")) == 0.0  # more planned Nodes, the first kept
    far = waiting.Shown(waiting.in_slurm(1, "Priority", NOW + 36_000, []), at=0.0)
    # ten hours out: a tenth of the wait (an hour) is the tolerance
    assert waiting.to_write(far, waiting.in_slurm(1, "Priority", NOW + 36_000 + 3000, []),
                            100.0, wall) is None
    assert waiting.to_write(far, waiting.in_slurm(1, "Priority", NOW + 36_000 + 4000, []),
                            100.0, wall) == 0.0
    assert waiting.estimate_tolerance(NOW + 30, wall) == waiting.ESTIMATE_TOLERANCE


def test_the_condition_is_kube_schedulers() -> None:
    condition = waiting.condition(waiting.unschedulable("policy x: no"), NOW)
    assert condition == {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                         "message": "policy x: no", "lastTransitionTime": "2027-01-15T08:00:00Z",
                         "lastProbeTime": None}
