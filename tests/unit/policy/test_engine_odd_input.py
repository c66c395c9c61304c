"""Odd input to the engine: dict subclasses in the Pod, params CEL cannot hold, ``variables``
read as a whole."""

from __future__ import annotations

from collections import defaultdict

import pytest

from sunk.policy import PolicyEngine, PolicyLoadError, load_sources

from .pods import pod, policy


def _engine(memo_size: int, **spec: object) -> PolicyEngine:
    engine = load_sources({"p.yaml": policy("p", **spec)})
    return PolicyEngine(engine.policies, memo_size=memo_size)


@pytest.mark.parametrize("memo_size", [1024, 0], ids=["memo", "no-memo"])
def test_a_dict_subclass_with_missing_is_not_read_as_plain_json(memo_size: int) -> None:
    """A defaultdict in the Pod is read as JSON's dict: its ``__missing__`` does not invent the
    field ``has()`` asks for, and evaluating leaves the Pod as it was."""
    engine = _engine(memo_size, validations=[{"expression": "!has(object.spec.nodeName)"}])
    subject = pod()
    subject["spec"] = defaultdict(str, subject["spec"])
    decision = engine.evaluate(subject)
    assert "nodeName" not in subject["spec"]  # the Pod is not changed by evaluating it
    assert not decision.denials, decision.denials


def test_a_param_beyond_int64_is_refused_at_load() -> None:
    """Params are read as JSON, but what CEL cannot hold (an integer beyond 64 bits) is refused
    when the policy loads, not met at every evaluation."""
    document = policy(
        "p", params={"big": 2**64}, validations=[{"expression": "params.big + 1 > 0"}]
    )
    with pytest.raises(PolicyLoadError):
        load_sources({"p.yaml": document})


def test_a_variable_reading_variables_as_a_whole_does_not_recurse() -> None:
    """``size(variables)`` inside a variable counts the variables without computing them (the one
    being computed included), as Kubernetes' lazy variables do."""
    engine = _engine(
        0,
        variables=[{"name": "a", "expression": "size(variables) >= 0"}],
        validations=[{"expression": "variables.a"}],
    )
    decision = engine.evaluate(pod())
    assert not decision.errors, decision.errors


def test_a_dict_subclass_read_by_index_is_not_changed() -> None:
    """``object.spec['nodeName']`` on a defaultdict: the index goes to cel-python's operator
    on a converted copy, never through the defaultdict's ``__missing__``."""
    engine = _engine(
        0,
        validations=[
            {"expression": "!('x' in object.spec) || true"},
            {"expression": "object.spec['nodeName'] == ''"},
        ],
    )
    subject = pod()
    subject["spec"] = defaultdict(str, subject["spec"])
    decision = engine.evaluate(subject)
    assert "nodeName" not in subject["spec"]
    assert [error.message for error in decision.errors] == ["no such key"]
