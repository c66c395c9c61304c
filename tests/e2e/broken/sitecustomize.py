"""A deliberately broken sunk, for the soak's checker to catch: on ``PYTHONPATH``, Python runs
this at start-up, and from then on the node plan never takes a lock away (no unlock, no taint
removed). Used only by ``tests/e2e/test_chaos.py``."""

from __future__ import annotations

from sunk.plans import actions as do
from sunk.plans import nodeplan
from sunk.plans.locking import LockState

_plan_lock = nodeplan.plan_lock


def _never_unlocks(facts: nodeplan.NodeFacts) -> tuple[do.NodeAction, ...]:
    return tuple(action for action in _plan_lock(facts)
                 if not (isinstance(action, do.SetLockTaint) and not action.present)
                 and not (isinstance(action, do.SetLockState)
                          and action.after is LockState.FALSE))


nodeplan.plan_lock = _never_unlocks
