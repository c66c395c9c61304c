"""What Slurm's words mean (pure): hostlists, error numbers, pending reasons."""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from typing import Any

#: ASCII digits only (``\d`` takes any Unicode digit), and few of them: Python refuses to read
#: an integer of more than 4300 digits (ValueError), and no node index has 19.
_RANGE = re.compile(r"([0-9]{1,18})(?:-([0-9]{1,18}))?")
#: A hostlist longer than this is not expanded (a node name check needs no more).
MAX_HOSTS = 100_000


def expand_hostlist(text: str) -> list[str]:
    """``h100-[000-002,5],a1`` -> ``[h100-000, h100-001, h100-002, h100-5, a1]``.

    Slurm's hostlist syntax: comma-separated names, each with at most bracketed ranges of
    zero-padded numbers. Malformed input expands to what can be read, never raises; at most
    :data:`MAX_HOSTS` names come back (the product of several bracketed ranges is never built
    beyond that)."""
    hosts: list[str] = []
    for name in _split_top(text):
        expanded = [""]
        room = MAX_HOSTS - len(hosts)
        for literal, ranges in re.findall(r"([^\[]*)(?:\[([^\]]*)\])?", name):
            if not literal and not ranges:
                continue
            numbers = _ranges(ranges) if ranges else [""]
            expanded = list(itertools.islice(
                (p + literal + n for p in expanded for n in numbers), room))
        hosts += [h for h in expanded if h]
        if len(hosts) >= MAX_HOSTS:
            return hosts[:MAX_HOSTS]
    return hosts


def _split_top(text: str) -> list[str]:
    """Split on commas outside brackets."""
    parts, depth, current = [], 0, ""
    for ch in text.strip():
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth <= 0:
            parts.append(current)
            current, depth = "", 0
        else:
            current += ch
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def _ranges(text: str) -> list[str]:
    out: list[str] = []
    for part in text.split(","):
        m = _RANGE.fullmatch(part.strip())
        if m is None:
            continue
        first, last = m.group(1), m.group(2) or m.group(1)
        if int(last) - int(first) > MAX_HOSTS:
            continue
        width = len(first) if first.startswith("0") else 0
        out += [str(n).zfill(width) for n in range(int(first), int(last) + 1)]
        if len(out) >= MAX_HOSTS:
            return out[:MAX_HOSTS]
    return out


# -- errors -----------------------------------------------------------------------------------
#: slurmctld's job errors (slurm_errno.h, 2000-2999) that retrying cannot cure: the job as
#: described is refused (an unknown partition, account, QOS, node name, user; a request no node
#: can ever satisfy). Others in that range say "not now" and are retried.
_NOT_NOW = frozenset({
    2007,  # ESLURM_MAX_JOB_COUNT: the queue is full
    2013,  # ESLURM_NOT_TOP_PRIORITY
    2016,  # ESLURM_NODES_BUSY
    2019,  # ESLURM_WRITING_TO_FILE
    2020,  # ESLURM_TRANSITION_STATE_NO_UPDATE
    2027,  # ESLURM_IN_STANDBY_MODE
    2041,  # ESLURM_TAKEOVER_NO_HEARTBEAT
    2049,  # ESLURM_NEED_RESTART
    2055,  # ESLURM_RESERVATION_BUSY
    2059,  # ESLURM_PORTS_BUSY
    2061,  # ESLURM_PROLOG_RUNNING
    2090,  # ESLURM_INTERNAL
    2100,  # ESLURM_BURST_BUFFER_WAIT
    2105,  # ESLURM_SUBMISSIONS_DISABLED: an admin turns them back on
    2120,  # ESLURM_REBOOT_IN_PROGRESS
    2125,  # ESLURM_DEFER
    2131,  # ESLURM_IN_STANDBY_USE_BACKUP
})


def permanent_error(numbers: list[int]) -> bool:
    """Whether a refusal with these Slurm error numbers will be refused again, as it is.

    Only slurmctld's job errors and topology refusals count; anything else (communication,
    authentication, the database, slurmrestd itself, an unknown number) may pass."""
    return bool(numbers) and all(
        (2000 <= n < 3000 and n not in _NOT_NOW) or 7200 < n < 7300 for n in numbers)


# -- pending reasons --------------------------------------------------------------------------
#: Pending reasons after which the job starts only if a person acts (or never).
NEVER_STARTS = {
    "JobHeldAdmin": "held by an administrator, or by Slurm (for example a user it cannot run "
                    "as); `scontrol release` lets it go",
    "JobHeldUser": "held by its user; `scontrol release` lets it go",
    "launch_failed_requeued_held": "its launch failed (a prolog failure?) and Slurm requeued it "
                                   "held",
    "BadConstraints": "no node can ever satisfy its constraints",
    "PartitionConfig": "its request exceeds what the partition allows",
    "PartitionNodeLimit": "it asks for more nodes than the partition allows",
    "PartitionTimeLimit": "its time limit exceeds the partition's",
    "InvalidAccount": "its account is not valid",
    "InvalidQOS": "its QOS is not valid",
    "QOSJobLimit": "its QOS allows no such job",
    "AccountNotAllowed": "the partition does not allow its account",
    "QOSNotAllowed": "the partition does not allow its QOS",
    "DependencyNeverSatisfied": "a dependency can never be met",
}


def never_starts(reason: str) -> str | None:
    """Why a job pending for ``reason`` will not start by itself, or None if it may."""
    if reason in NEVER_STARTS:
        return NEVER_STARTS[reason]
    return None


# -- slurmrestd's node records ----------------------------------------------------------------
_GPU = re.compile(r"(?:^|,)gpu(?::[^:(,]+)?:(\d+)")


def number(value: Any) -> int:
    """slurmrestd's numbers: plain, or ``{"set": true, "infinite": false, "number": N}``."""
    if isinstance(value, Mapping):
        return int(value.get("number") or 0) if value.get("set", True) else 0
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def gpu_count(gres: Any) -> int:
    """GPUs in a Slurm GRES string: ``gpu:a100:8(S:0-1),gpu:h100:2`` -> 10; ``gres_used`` too
    (``gpu:a100:2(IDX:0,3)``). Anything but a string counts none."""
    if not isinstance(gres, str) or not gres or gres == "N/A":
        return 0
    return sum(int(n) for n in _GPU.findall(gres))
