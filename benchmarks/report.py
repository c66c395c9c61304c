"""``python -m benchmarks.report``: docs/benchmarks.md's generated sections, from the results
records under ``benchmarks/results/`` (:mod:`benchmarks.results`).

    python -m benchmarks.report [--results DIR] [--doc docs/benchmarks.md] [--check]

A generated section is the lines between two markers, each alone on its line::

    <!-- generated: saturate -->
    (replaced by what the record of scenario "saturate" renders to)
    <!-- end generated: saturate -->

Everything outside the markers is kept byte for byte. A section whose scenario has no record
is left as it is (with a warning); a record no section names is reported. ``--check`` writes
nothing and exits 1 if the document differs from what it would write.

A section starts with the record's command, date, machine, test bed and versions, whatever the
scenario; then its figures, rendered by the function the scenario registered
(``register("saturate", render)``: a record in, markdown out), or else by
:func:`default_renderer` (a table of every figure); then the record's plots, as images.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import math
import os
import re
import shlex
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import results
from benchmarks.results import Record, ResultsError

DOC = results.REPO / "docs" / "benchmarks.md"

Renderer = Callable[[Record], str]

#: Scenario name to the function that renders its figures as markdown.
RENDERERS: dict[str, Renderer] = {}

START = re.compile(r"<!-- generated: ([a-z0-9][a-z0-9._-]*) -->")
END = re.compile(r"<!-- end generated: ([a-z0-9][a-z0-9._-]*) -->")
#: A line that looks like a marker, well formed or not (a typo must not pass as prose).
MARKERISH = re.compile(r"<!--\s*(end\s+)?generated\b")
#: A fenced code block's first or last line: markers shown inside one are prose.
FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")


class ReportError(Exception):
    """A document whose markers do not pair up, or a record that cannot be rendered."""


def register(scenario: str, render: Renderer) -> Renderer:
    """Render ``scenario``'s figures with ``render`` (returned, so this works as a plain call
    at a module's top level). A scenario has one renderer: registering another is an error."""
    if not results.SCENARIO.fullmatch(scenario):
        raise ReportError(f"scenario {scenario!r} cannot be a marker")
    known = RENDERERS.get(scenario)
    if known is not None and known is not render:
        raise ReportError(f"scenario {scenario!r} already has a renderer: {known!r}")
    RENDERERS[scenario] = render
    return render


# -- formatting ------------------------------------------------------------------------------


def fmt(value: Any) -> str:
    """A figure as text: floats to 3 significant digits (``14.0``, ``0.652``, ``12,300``),
    integers with thousands separators, lists comma-separated."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return _fmt_float(value)
    if value is None:
        return "-"
    if isinstance(value, list | tuple):
        return ", ".join(fmt(v) for v in value)
    return str(value)


def _fmt_float(x: float) -> str:
    if not math.isfinite(x):
        return str(x)
    if x == 0:
        return "0"
    rounded = float(f"{x:.3g}")
    exponent = math.floor(math.log10(abs(rounded)))
    if exponent >= 3:
        return f"{rounded:,.0f}"
    if exponent < -4:
        return f"{x:.2e}"
    return f"{rounded:.{2 - exponent}f}"


def flatten(figures: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``{"a": {"b": 1}}`` as ``("a.b", 1)``; a list of objects as ``a.0.b``, ``a.1.b``; other
    values (numbers, text, lists of them) as they are."""
    for key, value in figures.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from flatten(value, f"{name}.")
        elif isinstance(value, list) and any(isinstance(v, Mapping | list) for v in value):
            yield from flatten({str(i): v for i, v in enumerate(value)}, f"{name}.")
        else:
            yield name, value


def _cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def code_span(text: str) -> str:
    """``text`` as a markdown code span, whatever backticks it holds."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def default_renderer(rec: Record) -> str:
    """Every figure in a two-column table, nested names joined with dots."""
    rows = list(flatten(rec["figures"]))
    if not rows:
        return "No figures."
    return "\n".join(["| figure | value |", "|---|---|",
                      *(f"| {_cell(name)} | {_cell(fmt(value))} |" for name, value in rows)])


def header(rec: Record) -> str:
    """The two lines every section starts with: the command, its date and the code measured;
    the machine, the test bed and the other versions."""
    versions = dict(rec["versions"])
    own = f"sunk {versions.pop('sunk', '?')} at commit {versions.pop('commit', '?')}"
    bed = [f"{name} {fmt(value)}" for name, value in flatten(rec["bed"])]
    bed += [f"{k} {v}" for k, v in sorted(versions.items())]
    machine = results.describe_machine(rec["machine"])
    return "\n".join([f"- Command: {code_span(rec['command'])} ({rec['date']}, {own})",
                      f"- Machine: {machine}" + (f"; test bed: {', '.join(bed)}" if bed else "")])


def images(rec: Record, doc: Path) -> str:
    """The record's plots as markdown images, linked relative to ``doc``, in one paragraph."""
    def link(path: str) -> str:
        return Path(os.path.relpath(results.REPO / path, doc.parent)).as_posix()

    return "\n".join(f"![{p['title']}]({link(p['path'])})" for p in rec.get("plots", []))


def render(rec: Record, doc: Path = DOC) -> str:
    """A generated section's body (without the markers): header, figures, plots."""
    renderer = RENDERERS.get(rec["scenario"], default_renderer)
    try:
        figures = renderer(rec).strip("\n")
    except Exception as exc:
        raise ReportError(f"scenario {rec['scenario']!r}: its renderer failed: "
                          f"{type(exc).__name__}: {exc}") from exc
    parts = [header(rec), figures, images(rec, doc)]
    return "\n\n".join(p for p in parts if p)


# -- the document ----------------------------------------------------------------------------


@dataclass
class Outcome:
    text: str
    #: Sections with no record, left as they were.
    missing: list[str]
    #: Records with no section.
    unplaced: list[str]
    #: Plots that records name and that do not exist.
    absent_plots: list[str]


def _marker(line: str) -> tuple[str, str] | None:
    """("start" | "end", scenario) for a marker line; None for prose; ReportError for a line
    that looks like a marker and is not one."""
    bare = line.rstrip("\r\n")
    if m := START.fullmatch(bare):
        return "start", m.group(1)
    if m := END.fullmatch(bare):
        return "end", m.group(1)
    if MARKERISH.match(bare):
        raise ReportError(f"not a marker: {bare!r} (write '<!-- generated: NAME -->' or "
                          "'<!-- end generated: NAME -->' alone on the line)")
    return None


def rewrite(text: str, records: Mapping[str, Record], doc: Path = DOC) -> Outcome:
    """``text`` with each generated section's body replaced by its record's rendering."""
    newline = "\r\n" if "\r\n" in text else "\n"
    out: list[str] = []
    missing: list[str] = []
    seen: set[str] = set()
    current: str | None = None
    kept: list[str] = []
    fence: str | None = None  # the fence of the code block the line is in, outside sections
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        if current is None and (fence is not None or FENCE.match(line)):
            out.append(line)
            fence = _fence(line, fence)
            continue
        marker = _marker(line)
        if current is None:
            out.append(line)
            if marker is None:
                continue
            kind, name = marker
            if kind == "end":
                raise ReportError(f"line {number}: end of section {name!r}, which was not "
                                  "started")
            if name in seen:
                raise ReportError(f"line {number}: a second section {name!r}")
            seen.add(name)
            current, kept = name, []
            continue
        if marker is None:
            kept.append(line)
            continue
        kind, name = marker
        if kind == "start" or name != current:
            raise ReportError(f"line {number}: {line.strip()} inside section {current!r}")
        rec = records.get(current)
        if rec is None:
            missing.append(current)
            out.extend(kept)
        else:
            body = render(rec, doc)
            out.append(newline + body.replace("\n", newline) + newline + newline)
        out.append(line)
        current = None
    if current is not None:
        raise ReportError(f"section {current!r} is not ended "
                          f"('<!-- end generated: {current} -->')")
    absent = sorted({p["path"] for name in seen if name in records
                     for p in records[name].get("plots", [])
                     if not (results.REPO / p["path"]).is_file()})
    return Outcome("".join(out), missing, sorted(set(records) - seen), absent)


def _fence(line: str, fence: str | None) -> str | None:
    """The fence open after ``line``, given the one open before it (CommonMark: a block ends
    at a line of at least as many of the same character, and nothing else)."""
    m = FENCE.match(line)
    if fence is None:
        return m.group(1) if m else None
    closing = line.strip()
    if m and closing == m.group(1) and closing[0] == fence[0] and len(closing) >= len(fence):
        return None
    return fence


def load_renderers(records: Mapping[str, Record]) -> list[str]:
    """Import the module each record's command ran (``python -m benchmarks.X``), so that its
    renderer registers itself. Returns warnings for modules that could not be imported."""
    warnings: list[str] = []
    for name, rec in sorted(records.items()):
        module = _module_of(rec["command"])
        if module is None or module == "benchmarks.report":
            continue
        try:
            importlib.import_module(module)
        except Exception as exc:
            warnings.append(f"{name}: cannot import {module} for its renderer ({exc}); "
                            "its figures are shown as a plain table")
    return warnings


def _module_of(command: str) -> str | None:
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if len(words) >= 3 and words[1] == "-m" and words[2].startswith("benchmarks."):
        return words[2]
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.report", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", type=Path, default=None, metavar="DIR",
                   help="the records (default: benchmarks/results/)")
    p.add_argument("--doc", type=Path, default=DOC, metavar="FILE",
                   help="the document to rewrite (default: docs/benchmarks.md)")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 if the document differs from what it would be")
    args = p.parse_args(argv)

    def warn(message: str) -> None:
        print(f"report: warning: {message}", file=sys.stderr)

    try:
        records = results.load_all(args.results)
        for message in load_renderers(records):
            warn(message)
        before = args.doc.read_bytes().decode("utf-8")
        outcome = rewrite(before, records, args.doc.resolve())
    except (OSError, UnicodeDecodeError, ResultsError, ReportError) as exc:
        print(f"report: error: {exc}", file=sys.stderr)
        return 2
    for name in outcome.missing:
        warn(f"section {name!r}: no record in {args.results or results.RESULTS_DIR}; left as "
             "it was")
    for name in outcome.unplaced:
        warn(f"record {name!r} has no section in {args.doc}: add "
             f"'<!-- generated: {name} -->' and '<!-- end generated: {name} -->' lines")
    for path in outcome.absent_plots:
        warn(f"plot {path} does not exist")
    if outcome.text == before:
        print(f"report: {args.doc} is up to date", file=sys.stderr)
        return 0
    if args.check:
        diff = difflib.unified_diff(before.splitlines(keepends=True),
                                    outcome.text.splitlines(keepends=True),
                                    f"{args.doc} (now)", f"{args.doc} (generated)")
        sys.stderr.writelines(diff)
        print(f"report: {args.doc} differs from its records: run python -m benchmarks.report",
              file=sys.stderr)
        return 1
    args.doc.write_bytes(outcome.text.encode("utf-8"))
    print(f"report: {args.doc} rewritten", file=sys.stderr)
    return 0


if __name__ == "__main__":
    # Run as benchmarks.report, not __main__: the scenario modules register their renderers
    # into benchmarks.report's RENDERERS.
    from benchmarks import report

    sys.exit(report.main())
