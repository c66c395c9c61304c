"""The scheduling benchmarks' Pod mix: the share asked for is one of a kind (the policy
engine's memo has seen none of them), the rest alike, and every one passes the default
policies (a refused Pod would be measured as fast)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from benchmarks import pods
from sunk.policy.engine import PolicyEngine
from sunk.policy.loader import load_directory

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(("share", "count"), [(0.0, 0), (0.5, 200), (0.25, 100), (1.0, 400)])
def test_the_share_asked_for_is_one_of_a_kind(share: float, count: int) -> None:
    made = [pods.mixed(f"p-{i}", i, share) for i in range(400)]
    one_of_a_kind = [p for p in made if p["metadata"]["annotations"]]
    assert len(one_of_a_kind) == count
    alike = [p for p in made if not p["metadata"]["annotations"]]
    assert all(p["spec"] == alike[0]["spec"] for p in alike)
    keys = {(str(p["metadata"]["annotations"]),
             str(p["spec"]["containers"][0]["resources"])) for p in one_of_a_kind}
    assert len(keys) == count, "each differs from every other"


def test_every_pod_of_the_mix_passes_the_default_policies() -> None:
    loaded = load_directory(ROOT / "policies", settings={"killWaitSeconds": 30})
    engine = PolicyEngine(loaded.policies, loaded.settings, memo_size=0)
    for i in range(0, 400, 7):
        pod = copy.deepcopy(pods.mixed(f"p-{i}", i, 0.5))
        pod["metadata"]["uid"] = f"uid-{i}"
        decision = engine.evaluate(pod)
        assert decision.allowed, (pod["metadata"]["annotations"], decision.message)
