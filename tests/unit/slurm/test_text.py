"""What Slurm's words mean: hostlists, error numbers, pending reasons (pure)."""

from __future__ import annotations

import pytest

from sunk.slurm.text import MAX_HOSTS, NEVER_STARTS, expand_hostlist, never_starts, permanent_error


@pytest.mark.parametrize(("text", "hosts"), [
    ("", []),
    ("   ", []),
    ("a", ["a"]),
    ("a,b", ["a", "b"]),
    (" a , b ,", ["a", "b"]),
    ("h100-[000-002]", ["h100-000", "h100-001", "h100-002"]),
    ("n[1-3,7]", ["n1", "n2", "n3", "n7"]),
    ("x[01-03]y", ["x01y", "x02y", "x03y"]),
    ("n[08-10]", ["n08", "n09", "n10"]),
    ("h100-[000-002,5],a1", ["h100-000", "h100-001", "h100-002", "h100-5", "a1"]),
    ("a[1-2],b[3,5],c", ["a1", "a2", "b3", "b5", "c"]),
    ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
    ("n[7]", ["n7"]),
])
def test_expand_hostlist(text: str, hosts: list[str]) -> None:
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize(("text", "hosts"), [
    ("n[", ["n"]),
    ("n]", ["n]"]),
    ("n[a-b]", []),
    ("n[3-1]", []),
    ("n[]", ["n"]),
    ("[", []),
    ("[1-2]", ["1", "2"]),
    ("n[1-2,x,4]", ["n1", "n2", "n4"]),
    ("n[1-2-3]", []),
    ("n[[1]]", []),
    ("n[1-2", ["n1-2"]),
    (",,,", []),
    ("n[\u0661-\u0663]", []),  # Unicode digits are not numbers Slurm writes
    ("n[" + "1" * 5000 + "]", []),  # more digits than Python reads as an int
    ("n[1-" + "9" * 30 + "]", []),
])
def test_malformed_hostlists_expand_to_what_can_be_read(text: str, hosts: list[str]) -> None:
    assert expand_hostlist(text) == hosts


def test_hostlists_are_cut_at_max_hosts_without_building_more() -> None:
    """Each range alone is within the bound; their product or sum is not (a product of
    10**10 names would exhaust memory if it were built first)."""
    product = expand_hostlist("a[1-100000]b[1-100000]")
    assert len(product) == MAX_HOSTS and product[:2] == ["a1b1", "a1b2"]
    assert len(expand_hostlist("n[" + ",".join(["0-99999"] * 50) + "]")) == MAX_HOSTS
    assert len(expand_hostlist(",".join(["n[0-99999]"] * 50))) == MAX_HOSTS
    assert expand_hostlist(f"n[0-{MAX_HOSTS + 1}]") == []  # one range too wide: not read


@pytest.mark.parametrize("number", [2000, 2018, 2045, 2066, 2072, 7201])
def test_refusals_of_the_job_as_described_are_permanent(number: int) -> None:
    # 2000 partition, 2018 node name, 2045 account, 2066 QOS, 2072 user, 7201 topology
    assert permanent_error([number])


@pytest.mark.parametrize("numbers", [
    [], [2007], [2016], [2013], [2105], [2125], [1001], [1000], [5004], [6000], [9000],
    [0], [-1], [2999 + 1], [7200], [7300], [3000],
])
def test_not_now_and_other_errors_may_pass(numbers: list[int]) -> None:
    assert not permanent_error(numbers)


def test_mixed_errors_are_permanent_only_if_every_one_is() -> None:
    assert permanent_error([2018, 2045])
    assert not permanent_error([2018, 2016])
    assert not permanent_error([1001, 2018])
    assert not permanent_error([2066, 5004])


def test_never_starts() -> None:
    for reason in ("JobHeldAdmin", "JobHeldUser", "BadConstraints", "InvalidAccount",
                   "InvalidQOS", "DependencyNeverSatisfied", "launch_failed_requeued_held"):
        why = never_starts(reason)
        assert why is not None and why == NEVER_STARTS[reason]
    for reason in ("Resources", "Priority", "None", "Dependency", "", "jobheldadmin",
                   "ReqNodeNotAvail"):
        assert never_starts(reason) is None


def test_a_gres_that_is_not_a_string_counts_no_gpus() -> None:
    from sunk.slurm.text import gpu_count

    for odd in (None, 8, ["gpu:h100:8"], {"gpu": 8}):
        assert gpu_count(odd) == 0
    assert gpu_count("gpu:h100:8(S:0-1)") == 8
