"""Loading policy sets: what is read, how problems are reported, and reloading."""

from __future__ import annotations

import asyncio
import json
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from sunk.policy import (
    Origin,
    PolicyIssue,
    PolicyLoadError,
    PolicyStore,
    load_configmap,
    load_directory,
    load_sources,
    read_directory,
)

from .pods import pod


def document(name: str = "test", /, **spec: Any) -> dict[str, Any]:
    spec.setdefault("validations", [{"expression": "true"}])
    return {
        "apiVersion": "sunk.coreweave.com/v1alpha1",
        "kind": "SchedulingPolicy",
        "metadata": {"name": name},
        "spec": spec,
    }


def issues_of(sources: dict[str, str]) -> list[PolicyIssue]:
    with pytest.raises(PolicyLoadError) as caught:
        load_sources(sources)
    return list(caught.value.issues)


def one_issue(spec_or_document: dict[str, Any], *, whole: bool = False) -> PolicyIssue:
    raw = spec_or_document if whole else document(**spec_or_document)
    [issue] = issues_of({"policy.yaml": json.dumps(raw)})
    return issue


# --- what problems look like ---------------------------------------------------------------


def test_a_problem_names_the_file_document_policy_and_field() -> None:
    text = "\n---\n".join(
        [json.dumps(document("good")), json.dumps(document("bad", validationAction=["Warn"]))]
    )
    [issue] = issues_of({"team.yaml": text})
    assert issue.origin == Origin("team.yaml", 2)
    assert issue.policy == "bad"
    assert issue.field == "spec.validationAction"
    assert issue.message == "Extra inputs are not permitted"
    assert str(issue) == (
        "team.yaml document 2, policy bad, spec.validationAction: Extra inputs are not permitted"
    )


def test_every_problem_of_a_set_is_reported_at_once() -> None:
    issues = issues_of(
        {
            "a.yaml": json.dumps(document("a", failurePolicy="Sometimes")),
            "b.yaml": json.dumps(document("b", validations=[{"expression": "1 +"}])),
            "c.yaml": "kind: [",
        }
    )
    assert [(i.origin.source if i.origin else None, i.field) for i in issues] == [
        ("a.yaml", "spec.failurePolicy"),
        ("b.yaml", "spec.validations[0].expression"),
        ("c.yaml", None),
    ]
    message = str(PolicyLoadError(issues))
    assert message.startswith("invalid policy set (3 problem(s)):\n  - a.yaml document 1")


def test_a_yaml_syntax_error_names_the_file_and_position() -> None:
    [issue] = issues_of({"broken.yaml": "apiVersion: x\nspec: [unclosed\n"})
    assert issue.origin == Origin("broken.yaml", 1)
    assert issue.message.startswith("invalid YAML: ")
    assert "line 3" in issue.message


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"kind": "ValidatingAdmissionPolicy"}, "kind", "Input should be 'SchedulingPolicy'"),
        ({"apiVersion": "v1"}, "apiVersion", "Input should be 'sunk.coreweave.com/v1alpha1'"),
        ({"metadata": {"name": "Not_A_Name"}}, "metadata.name", "String should match pattern"),
        ({"metadata": {}}, "metadata.name", "Field required"),
    ],
)
def test_document_fields_are_checked(change: dict[str, Any], field: str, message: str) -> None:
    issue = one_issue({**document(), **change}, whole=True)
    assert issue.field == field
    assert issue.message.startswith(message)


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        ({"failurePolicy": "Never"}, "spec.failurePolicy", "Input should be 'Fail' or 'Ignore'"),
        ({"validationActions": []}, "spec.validationActions", "List should have at least 1"),
        ({"validationActions": ["Deny", "Warn"]}, "spec", "Value error, validationActions cannot"),
        ({"validationActions": ["Warn", "Warn"]}, "spec", "Value error, validationActions lists"),
        (
            {"validations": [{"expression": "true", "reason": "not camel"}]},
            "spec.validations[0].reason",
            "String should match pattern",
        ),
        (
            {"validations": [{"expression": ""}]},
            "spec.validations[0].expression",
            "String should have at least 1 character",
        ),
        ({"validations": [], "mappings": {}}, "spec", "Value error, a policy needs validations"),
        (
            {"mappings": {"Account": {"type": "string", "expression": "'a'"}}},
            "spec.mappings.Account.[key]",
            "String should match pattern",
        ),
        (
            {"mappings": {"account": {"type": "str", "expression": "'a'"}}},
            "spec.mappings.account.type",
            "Input should be 'string', 'int', 'bool' or 'list(string)'",
        ),
        (
            {"variables": [{"name": "x", "expression": "1"}, {"name": "x", "expression": "2"}]},
            "spec",
            "Value error, variables names must be unique: x",
        ),
        (
            {"variables": [{"name": "has-dash", "expression": "1"}]},
            "spec.variables[0].name",
            "String should match pattern",
        ),
    ],
)
def test_spec_fields_are_checked(spec: dict[str, Any], field: str, message: str) -> None:
    issue = one_issue(document(**spec), whole=True)
    assert (issue.field, issue.policy) == (field, "test")
    assert issue.message.startswith(message), issue.message


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("1 +", "line 1 column 3: syntax error\n1 +\n  ^"),
        ("size(object) >", "syntax error"),
        ("frobnicate(object)", "line 1 column 1: unknown function 'frobnicate'"),
        ("object.frobnicate()", "line 1 column 1: unknown method 'frobnicate'"),
        ("[1].reduce(a, b, 0, a + b) == 1", "unknown method 'reduce'"),
        ("pod.metadata.name == 'x'", "undeclared reference to 'pod'"),
        ("variables.later == 1", "variables.later is not defined before this expression"),
        ("object.spec.containers.all(c, c.name == x)", "undeclared reference to 'x'"),
        ("object.spec.containers.all(c.name, true)", "first argument of all() must be a variable"),
        ("object.spec.containers.map(c, true, c)", "map() takes a variable and an expression"),
        ("has(object)", "has() takes a field selection"),
        ("dyn(1, 2) == 1", "dyn() takes one argument"),
        ("object.metadata.name.matches('(')", "invalid regular expression: missing ): ("),
        (".object == 1", "leading-dot names are not supported"),
    ],
)
def test_expressions_are_checked_at_load(expression: str, message: str) -> None:
    spec = {
        "variables": [{"name": "first", "expression": "1"}],
        "validations": [{"expression": expression}],
    }
    issue = one_issue(spec)
    assert issue.field == "spec.validations[0].expression"
    assert message in issue.message, issue.message


def test_a_variable_may_read_only_those_before_it() -> None:
    spec = {
        "variables": [
            {"name": "a", "expression": "variables.b"},
            {"name": "b", "expression": "1"},
        ]
    }
    issue = one_issue(spec)
    assert issue.field == "spec.variables[0].expression"
    assert "variables.b is not defined before this expression (known: none)" in issue.message


def test_macro_variables_may_shadow_nothing_else() -> None:
    spec = {"validations": [{"expression": "[1, 2].all(x, x > 0) && [3].exists(y, y == 3)"}]}
    assert load_sources({"a.yaml": json.dumps(document(**spec))}).evaluate(pod()).allowed


def test_params_must_be_json_data() -> None:
    text = json.dumps(document()).replace('"spec": {', '"spec": {"params": {"when": 2026-05-27}, ')
    [issue] = issues_of({"a.yaml": text})
    assert (issue.field, issue.message) == ("spec.params.when", "input was not a valid JSON value")


def test_policy_names_are_unique_across_files() -> None:
    [issue] = issues_of(
        {"a.yaml": json.dumps(document("same")), "b.yaml": json.dumps(document("same"))}
    )
    assert issue.origin == Origin("b.yaml", 1)
    assert issue.message == "duplicate policy name (first in a.yaml document 1)"


def test_a_document_must_be_a_mapping_and_empty_documents_are_skipped() -> None:
    text = f"---\n{json.dumps(document())}\n---\n---\n- a list\n"
    [issue] = issues_of({"a.yaml": text})
    assert (issue.origin, issue.message) == (Origin("a.yaml", 3), "a document must be a mapping")


def test_an_empty_set_is_an_error() -> None:
    assert [str(i) for i in issues_of({})] == ["no policy files found"]


# --- sources -------------------------------------------------------------------------------


def test_policies_apply_in_the_order_of_file_names_then_documents() -> None:
    sources = {
        "20-b.yaml": json.dumps(document("b2")),
        "10-a.yaml": json.dumps(document("a1")) + "\n---\n" + json.dumps(document("a2")),
    }
    assert load_sources(sources).names == ("a1", "a2", "b2")


def test_a_directory_gives_its_yaml_files_only(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(json.dumps(document("a")))
    (tmp_path / "b.yml").write_text(json.dumps(document("b")))
    (tmp_path / "README.md").write_text("not a policy")
    (tmp_path / ".hidden.yaml").write_text("not: read")
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "c.yaml").write_text(json.dumps(document("c")))
    assert sorted(read_directory(tmp_path)) == ["a.yaml", "b.yml"]
    assert load_directory(tmp_path).names == ("a", "b")


def test_a_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(PolicyLoadError, match=r"cannot read policies: .*nowhere"):
        load_directory(tmp_path / "nowhere")


def test_a_configmap_gives_its_yaml_keys() -> None:
    data = {"team.yaml": json.dumps(document("team")), "notes.txt": "ignored"}
    assert load_configmap(data).names == ("team",)
    with pytest.raises(PolicyLoadError, match="no policy files found"):
        load_configmap(None)


def test_the_default_and_example_policies_load(with_examples: Any) -> None:
    assert with_examples.names == (
        "sunk-annotations",
        "sunk-resource-requests",
        "sunk-termination-grace-period",
        "sunk-static-cpu-allocation",
        "account-per-namespace",
        "gpus-per-pod",
        "qos-from-priority-class",
    )


# --- the store -----------------------------------------------------------------------------


def deny_all(reason: str) -> str:
    return json.dumps(document("gate", validations=[{"expression": "false", "reason": reason}]))


def load_errors() -> float:
    return REGISTRY.get_sample_value("sunk_policy_load_errors_total") or 0.0


def test_a_broken_set_at_start_up_raises_and_is_counted() -> None:
    before = load_errors()
    with pytest.raises(PolicyLoadError, match="syntax error"):
        PolicyStore.from_configmap(
            {"a.yaml": json.dumps(document(validations=[{"expression": "(("}]))}
        )
    assert load_errors() == before + 1


def test_a_good_reload_replaces_the_set_and_a_bad_one_keeps_it() -> None:
    store = PolicyStore.from_configmap({"gate.yaml": deny_all("First")})
    assert store.evaluate(pod()).reason == "First"
    assert store.status().generation == 1 and store.status().error is None

    assert store.reload_configmap({"gate.yaml": deny_all("Second")})
    assert store.evaluate(pod()).reason == "Second"
    assert store.status().generation == 2

    before = load_errors()
    broken = {"gate.yaml": deny_all("Third").replace('"false"', '"1 +"')}
    assert not store.reload_configmap(broken)
    assert not store.reload_configmap(broken), "the same broken set is not reloaded"
    assert load_errors() == before + 1
    assert store.evaluate(pod()).reason == "Second"
    status = store.status()
    assert status.generation == 2 and status.policies == ("gate",)
    assert status.error is not None and status.error_at is not None
    assert status.error.issues[0].field == "spec.validations[0].expression"

    assert store.reload_configmap({"gate.yaml": deny_all("Fourth")})
    assert store.status().error is None
    assert store.evaluate(pod()).reason == "Fourth"


def test_the_store_keeps_the_last_evaluation_errors_for_the_dashboard() -> None:
    broken = json.dumps(document("broken", validations=[{"expression": "object.nothing == 1"}]))
    store = PolicyStore.from_configmap({"a.yaml": broken})
    for name in ("first", "second"):
        named = pod()
        named["metadata"]["name"] = name
        store.evaluate(named)
    assert [(e.pod, e.error.policy, e.error.field) for e in store.recent_errors()] == [
        ("default/second", "broken", "spec.validations[0].expression"),
        ("default/first", "broken", "spec.validations[0].expression"),
    ]
    assert store.recent_errors()[0].at >= store.recent_errors()[1].at


def test_reloads_keep_the_settings() -> None:
    store = PolicyStore.from_sources(
        {"a.yaml": deny_all("First")}, settings={"killWaitSeconds": 99}
    )
    store.reload({"a.yaml": deny_all("Second")})
    assert store.engine.settings["killWaitSeconds"] == 99


def test_a_store_started_without_a_set_says_why_until_a_reload_puts_one_in_force() -> None:
    before = load_errors()
    error = PolicyLoadError([PolicyIssue("invalid YAML: expected the node content",
                                         Origin("10.yaml", 1))])
    store = PolicyStore.without_a_set(error, settings={"killWaitSeconds": 99})
    assert load_errors() == before + 1
    why = store.not_in_force()
    assert why is not None and "no policy set is in force" in why
    assert "10.yaml document 1: invalid YAML" in why and "\n" not in why
    with pytest.raises(RuntimeError, match="no policy set is in force"):
        store.evaluate(pod())
    status = store.status()
    assert (status.generation, status.policies, status.error) == (0, (), error)
    assert not store.reload({"a.yaml": "spec: ["}), "still none"
    assert store.not_in_force() is not None and store.status().generation == 0
    assert store.reload({"a.yaml": deny_all("First")})
    assert store.not_in_force() is None and store.status().generation == 1
    assert store.engine.settings["killWaitSeconds"] == 99, "the settings it started with"
    assert store.evaluate(pod()).reason == "First"
    assert not store.reload({"a.yaml": "spec: ["}), "and then kept, as any set in force"
    assert store.evaluate(pod()).reason == "First"


def test_a_long_load_error_is_cut_short_for_the_pods_condition() -> None:
    error = PolicyLoadError([PolicyIssue("x" * 500)])
    why = PolicyStore.without_a_set(error).not_in_force()
    assert why is not None and len(why) < 400 and "…" in why


async def eventually(condition: Callable[[], bool]) -> None:
    """Wait for the watcher, which polls, to have acted."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the watcher did not act within 10 s")


async def test_the_watcher_reloads_changed_files_and_keeps_the_last_good_set(
    tmp_path: Path,
) -> None:
    path = tmp_path / "gate.yaml"
    path.write_text(deny_all("First"))
    store = PolicyStore.from_directory(tmp_path)
    watcher = asyncio.create_task(store.watch_directory(tmp_path, interval=0.01))
    try:
        path.write_text(deny_all("Second"))
        await eventually(lambda: store.status().generation == 2)
        assert store.evaluate(pod()).reason == "Second"

        path.write_text(textwrap.dedent(deny_all("Third")).replace("SchedulingPolicy", "Typo"))
        await eventually(lambda: store.status().error is not None)
        error = store.status().error
        assert error is not None
        assert str(error.issues[0]).startswith("gate.yaml document 1, policy gate, kind: ")
        assert store.evaluate(pod()).reason == "Second"

        (tmp_path / "more.yaml").write_text(json.dumps(document("more")))
        path.write_text(deny_all("Fourth"))
        await eventually(lambda: store.status().error is None)
        assert store.status().policies == ("gate", "more")
        assert store.evaluate(pod()).reason == "Fourth"

        path.unlink()
        (tmp_path / "more.yaml").unlink()
        await eventually(lambda: store.status().error is not None)
        assert store.evaluate(pod()).reason == "Fourth"
    finally:
        watcher.cancel()
        with pytest.raises(asyncio.CancelledError):
            await watcher


async def test_the_watcher_reports_a_vanished_directory(tmp_path: Path) -> None:
    directory = tmp_path / "policies"
    directory.mkdir()
    (directory / "gate.yaml").write_text(deny_all("First"))
    store = PolicyStore.from_directory(directory)
    watcher = asyncio.create_task(store.watch_directory(directory, interval=0.01))
    try:
        (directory / "gate.yaml").unlink()
        directory.rmdir()
        await eventually(lambda: store.status().error is not None)
        error = store.status().error
        assert error is not None and "cannot read policies" in str(error)
        assert store.evaluate(pod()).reason == "First"
    finally:
        watcher.cancel()
        with pytest.raises(asyncio.CancelledError):
            await watcher
