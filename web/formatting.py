"""The templates' filters: numbers and times as the pages print them."""

from __future__ import annotations

import datetime
import json
from typing import Any


def duration(seconds: float | None) -> str:
    """Compact, as kubectl shows ages: 42s, 3m05s, 2h07m, 4d03h."""
    if seconds is None:
        return ""
    s = int(seconds)
    if seconds < 10:
        return f"{seconds:.1f}s"
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def mebibytes(mib: int) -> str:
    if mib == 0:
        return "0"
    if mib >= 1024:
        gib = mib / 1024
        return f"{gib:.0f}G" if gib >= 100 or gib == int(gib) else f"{gib:.1f}G"
    return f"{mib}M"


def clock(at: datetime.datetime | None) -> str:
    return "" if at is None else at.strftime("%Y-%m-%d %H:%M:%S UTC")


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)
