"""What the compiler records that an expression reads of ``object`` and ``namespaceObject``."""

from __future__ import annotations

import pytest

from sunk.policy.cel import compile_expression
from sunk.policy.cel.reads import minimal

NAMES = {"object", "namespaceObject", "params", "variables", "settings", "x"}


def reads(text: str) -> set[tuple[str, tuple[str, ...]]]:
    return set(compile_expression(text, names=NAMES, variables={"v"}).reads)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("object.spec.containers", {("object", ("spec", "containers"))}),
        ("object", {("object", ())}),
        ("size(object)", {("object", ())}),
        ("object.metadata.annotations['a/b']", {("object", ("metadata", "annotations", "a/b"))}),
        ("object['spec'].x", {("object", ("spec", "x"))}),
        ("object.metadata.annotations[x]", {("object", ("metadata", "annotations"))}),
        ("object.metadata.annotations[params.k].y", {("object", ("metadata", "annotations"))}),
        ("object.spec.containers[0].name", {("object", ("spec", "containers"))}),
        ("object.a[1u]", {("object", ("a",))}),
        ("has(object.a.b)", {("object", ("a", "b"))}),
        ("has(object.a['k'].b)", {("object", ("a", "k", "b"))}),
        ("object.spec.containers.all(c, c.x > 1)", {("object", ("spec", "containers"))}),
        (
            "object.spec.containers.exists(c, c.name == object.metadata.name)",
            {("object", ("spec", "containers")), ("object", ("metadata", "name"))},
        ),
        (
            "object.a.map(c, c).filter(d, d == namespaceObject.metadata.labels.team)",
            {("object", ("a",)), ("namespaceObject", ("metadata", "labels", "team"))},
        ),
        ("object.metadata.annotations.prefixed('x/')", {("object", ("metadata", "annotations"))}),
        (
            "object.metadata.name.startsWith(object.metadata.namespace)",
            {("object", ("metadata", "name")), ("object", ("metadata", "namespace"))},
        ),
        ("x.all(object, object > 1)", set()),
        ("x.all(object, object.a > 1) && object.b", {("object", ("b",))}),
        (
            "object.items.all(object, object.a) || object.c",
            {("object", ("items",)), ("object", ("c",))},
        ),
        ("x.all(y, y.exists(object, object.z) && object.w)", {("object", ("w",))}),
        ("x.all(object, namespaceObject.a)", {("namespaceObject", ("a",))}),
        (
            "object.a ? object.b.c : namespaceObject",
            {("object", ("a",)), ("object", ("b", "c")), ("namespaceObject", ())},
        ),
        ("[1, object.a]", {("object", ("a",))}),
        ("{'k': object.b, object.c: 1}", {("object", ("b",)), ("object", ("c",))}),
        ("-object.x + 1", {("object", ("x",))}),
        ("!object.x", {("object", ("x",))}),
        ("object.a in ['x']", {("object", ("a",))}),
        ("'k' in object.metadata.labels", {("object", ("metadata", "labels"))}),
        ("(object).a", {("object", ("a",))}),
        ("dyn(object.a).b", {("object", ("a", "b"))}),
        ("dyn(object).a", {("object", ("a",))}),
        ("object.a.size()", {("object", ("a",))}),
        ("type(object.a) == string", {("object", ("a",))}),
        ("variables.v + params.p + settings.s", set()),
        ("'object' + 'namespaceObject'", set()),
    ],
)
def test_reads(text: str, expected: set[tuple[str, tuple[str, ...]]]) -> None:
    assert reads(text) == expected


def test_minimal_drops_paths_under_another() -> None:
    found = {
        ("object", ("metadata", "labels")),
        ("object", ("metadata", "labels", "team")),
        ("object", ("metadata", "name")),
        ("object", ("metadatax",)),
        ("namespaceObject", ("metadata", "labels", "a")),
    }
    assert minimal(found) == {
        "namespaceObject": (("metadata", "labels", "a"),),
        "object": (("metadata", "labels"), ("metadata", "name"), ("metadatax",)),
    }
    assert minimal(found | {("object", ())}) == {
        "namespaceObject": (("metadata", "labels", "a"),),
        "object": ((),),
    }
