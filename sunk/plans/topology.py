"""Slurm's ``topology/block`` configuration from a Kubernetes Node label naming each node's block.

A block is a set of nodes with a fast interconnect between them (an NVLink domain, a rack): with
``TopologyPlugin=topology/block`` in slurm.conf and one ``BlockName=<name> Nodes=<nodes>`` line
per block in ``topology.conf``, Slurm places a multi-node job inside one block when it can. The
block each node belongs to comes from its Node's :data:`BLOCK_LABEL`.

Pure: plain data in, text out.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

#: The Node label whose value names the block (rack, NVLink domain) the node belongs to.
BLOCK_LABEL = "sunk.coreweave.com/block"

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def block_name(value: str) -> str:
    """A label value as a Slurm block name: anything outside ``[A-Za-z0-9_-]`` becomes ``_``."""
    return _UNSAFE.sub("_", value) or "_"


def blocks(nodes: Iterable[tuple[str, str | None]]) -> dict[str, list[str]]:
    """Block name -> its Slurm nodes, from ``(Slurm node name, block label value or None)``.

    Blocks in the order their first node comes, nodes in the order given (a node named twice
    counts once, in its first block). Nodes without the label are left out: with topology/block
    Slurm runs no job on a node outside every block. Two values that sanitize to the same name
    (``rack.1`` and ``rack_1``) stay two blocks: the later gets a suffix from a hash of its value.
    """
    members: dict[str, list[str]] = {}
    placed: set[str] = set()
    for node, value in nodes:
        if value is None or node in placed:
            continue
        placed.add(node)
        members.setdefault(value, []).append(node)
    named: dict[str, list[str]] = {}
    for value, block in members.items():
        name = block_name(value)
        while name in named:
            name = f"{name}-{hashlib.sha256(value.encode()).hexdigest()[:8]}"
        named[name] = block
    return named


def block_conf(nodes: Iterable[tuple[str, str | None]]) -> str:
    """``topology.conf`` lines for ``(Slurm node name, block label value or None)`` pairs: one
    ``BlockName=<name> Nodes=<a>,<b>,...`` line per label value (see :func:`blocks`). No
    hostlist compression: Slurm reads a line of any length.

    Slurm (24.11) refuses to start when a block has fewer nodes than the planning base block
    size (the first of ``BlockSizes``; without that line, one it derives): whoever writes the
    file also writes ``BlockSizes=`` no larger than the smallest block.
    """
    return "".join(f"BlockName={name} Nodes={','.join(block)}\n"
                   for name, block in blocks(nodes).items())


def topology_conf(nodes: Iterable[tuple[str, str | None]]) -> str:
    """The whole ``topology.conf``: :func:`block_conf`, then ``BlockSizes`` as the smallest
    block's size (slurmctld refuses to start with a block smaller than the base block size)."""
    pairs = list(nodes)
    sizes = [len(b) for b in blocks(pairs).values()]
    return block_conf(pairs) + (f"BlockSizes={min(sizes)}\n" if sizes else "")
