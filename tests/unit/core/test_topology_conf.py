"""topology.conf for Slurm's topology/block from the Node label naming each node's block."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from sunk.plans.topology import BLOCK_LABEL, block_conf, block_name, blocks, topology_conf


def parse(conf: str) -> dict[str, list[str]]:
    blocks: dict[str, list[str]] = {}
    for line in conf.splitlines():
        match = re.fullmatch(r"BlockName=(\S+) Nodes=(\S+)", line)
        assert match, line
        blocks[match[1]] = match[2].split(",")
    return blocks


def test_one_line_per_label_value_in_the_order_of_the_nodes() -> None:
    conf = block_conf([("h100-000", "block-0"), ("a100-001", "block-0"),
                       ("h100-002", "block-1"), ("a100-003", "block-0")])
    assert conf == ("BlockName=block-0 Nodes=h100-000,a100-001,a100-003\n"
                    "BlockName=block-1 Nodes=h100-002\n")


def test_nodes_without_the_label_are_left_out() -> None:
    assert parse(block_conf([("n1", None), ("n2", "r1"), ("n3", None)])) == {"r1": ["n2"]}
    assert block_conf([("n1", None)]) == ""
    assert block_conf([]) == ""


def test_names_are_sanitized() -> None:
    assert block_name("rack 7/row.b") == "rack_7_row_b"
    assert block_name("NVL72_a-1") == "NVL72_a-1"
    assert block_name("") == "_"
    assert parse(block_conf([("n1", "dc1.rack:4")])) == {"dc1_rack_4": ["n1"]}


def test_values_that_sanitize_alike_stay_apart() -> None:
    blocks = parse(block_conf([("n1", "rack.1"), ("n2", "rack_1"), ("n3", "rack.1")]))
    assert blocks["rack_1"] == ["n1", "n3"]
    (other,) = set(blocks) - {"rack_1"}
    assert other.startswith("rack_1-") and blocks[other] == ["n2"]


def test_a_node_named_twice_is_in_its_first_block_only() -> None:
    assert parse(block_conf([("n1", "a"), ("n1", "b"), ("n2", "b")])) == {
        "a": ["n1"], "b": ["n2"]}


def test_the_label_is_sunks() -> None:
    assert BLOCK_LABEL == "sunk.coreweave.com/block"


NODE = st.from_regex(r"[a-z][a-z0-9-]{0,11}", fullmatch=True)


@given(st.lists(st.tuples(NODE, st.none() | st.text(max_size=12)), max_size=30))
def test_every_labelled_node_once_in_a_block_of_its_own_value(
        nodes: list[tuple[str, str | None]]) -> None:
    blocks = parse(block_conf(nodes))
    first: dict[str, str] = {}  # a node's first label value
    for node, value in nodes:
        if value is not None:
            first.setdefault(node, value)
    listed = [node for block in blocks.values() for node in block]
    assert sorted(listed) == sorted(first)
    assert all(re.fullmatch(r"[A-Za-z0-9_-]+", name) for name in blocks)
    assert len(blocks) == len(set(first.values()))
    for block in blocks.values():
        assert len({first[node] for node in block}) == 1


def test_blocks_are_what_the_lines_say() -> None:
    pairs = [("n1", "r.1"), ("n2", None), ("n3", "r2"), ("n4", "r.1")]
    assert blocks(pairs) == {"r_1": ["n1", "n4"], "r2": ["n3"]}
    assert parse(block_conf(pairs)) == blocks(pairs)


def test_the_whole_file_ends_with_the_smallest_blocks_size() -> None:
    text = topology_conf([("a", "r1"), ("b", "r1"), ("c", "r1"), ("d", "r2"), ("e", "r2"),
                          ("f", None)])
    assert text == "BlockName=r1 Nodes=a,b,c\nBlockName=r2 Nodes=d,e\nBlockSizes=2\n"
    assert topology_conf([("a", None)]) == "", "no block: nothing for Slurm to read"
