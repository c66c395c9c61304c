"""python -m benchmarks.report: generated sections of docs/benchmarks.md from results records."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import benchmarks
from benchmarks import report, results
from benchmarks.report import ReportError
from benchmarks.results import Record
from tests.unit.benchmarks.test_results import COMMAND, a_record

HEADER = (
    f"- Command: `{COMMAND}` (2026-11-23T21:54:47Z, sunk 0.1.0 at commit d313bf9)\n"
    "- Machine: 2 cores (AMD EPYC 7B13), 23.5 GiB, Python 3.11.7, kernel 6.1.0-28-cloud-amd64; "
    "test bed: nodes 100, slurm 24.11.5"
)

# Prose with what a careless rewrite would lose: trailing spaces, a tab, no blank line before a
# marker, non-ASCII, a marker shown in a code block, and no newline at the very end.
DOC = (
    "# Benchmarks  \n"
    "\n"
    "Prose\twith a tab, µs and ±10%.\n"
    "```\n"
    "<!-- generated: saturate -->\n"
    "```\n"
    "<!-- generated: saturate -->\n"
    "old saturate text\n"
    "<!-- end generated: saturate -->\n"
    "Between   \n"
    "\n"
    "<!-- generated: scale -->\n"
    "<!-- end generated: scale -->\n"
    "The end, no newline"
)


@pytest.fixture(autouse=True)
def renderers() -> Iterator[None]:
    """Each test starts with no registered renderer and leaves none behind."""
    saved = dict(report.RENDERERS)
    report.RENDERERS.clear()
    yield
    report.RENDERERS.clear()
    report.RENDERERS.update(saved)


def records(*names: str) -> dict[str, Record]:
    found = {}
    for name in names:
        rec = a_record(name, sunk_per_s=14.0)
        found[name] = rec
    return found


def section(name: str, body: str) -> str:
    return f"<!-- generated: {name} -->\n\n{body}\n\n<!-- end generated: {name} -->\n"


# -- rewriting -------------------------------------------------------------------------------


def test_only_the_text_between_markers_is_replaced() -> None:
    out = report.rewrite(DOC, records("saturate", "scale"))
    table = "| figure | value |\n|---|---|\n| sunk_per_s | 14.0 |"
    expected = (
        "# Benchmarks  \n"
        "\n"
        "Prose\twith a tab, µs and ±10%.\n"
        "```\n"
        "<!-- generated: saturate -->\n"
        "```\n"
        + section("saturate", HEADER + "\n\n" + table)
        + "Between   \n"
        "\n"
        + section("scale", HEADER + "\n\n" + table)
        + "The end, no newline"
    )
    assert out.text == expected
    assert out.missing == [] and out.unplaced == []
    # a second run changes nothing
    assert report.rewrite(out.text, records("saturate", "scale")).text == out.text


def test_crlf_prose_stays_crlf() -> None:
    doc = DOC.replace("\n", "\r\n")
    out = report.rewrite(doc, records("saturate", "scale")).text
    assert "\n" not in out.replace("\r\n", "")
    assert out.startswith("# Benchmarks  \r\n\r\nProse\twith a tab, µs and ±10%.\r\n")
    assert out.endswith("<!-- end generated: scale -->\r\nThe end, no newline")


def test_a_section_without_a_record_is_left_as_it_was() -> None:
    out = report.rewrite(DOC, records("scale"))
    assert out.missing == ["saturate"]
    assert "<!-- generated: saturate -->\nold saturate text\n<!-- end generated: saturate -->\n" \
        in out.text
    assert "| sunk_per_s | 14.0 |" in out.text  # scale's


def test_a_record_without_a_section_is_reported() -> None:
    out = report.rewrite(DOC, records("saturate", "scale", "open-loop"))
    assert out.unplaced == ["open-loop"]


@pytest.mark.parametrize("doc, message", [
    ("<!-- generated: a -->\ntext\n", "'a' is not ended"),
    ("text\n<!-- end generated: a -->\n", "not started"),
    ("<!-- generated: a -->\n<!-- generated: b -->\n", "inside section 'a'"),
    ("<!-- generated: a -->\n<!-- end generated: b -->\n", "inside section 'a'"),
    ("<!-- generated: a -->\n<!-- end generated: a -->\n"
     "<!-- generated: a -->\n<!-- end generated: a -->\n", "a second section 'a'"),
    ("<!-- generated:a -->\n", "not a marker"),
    ("<!-- generated: a --> \n", "not a marker"),
    ("<!-- end generated a -->\n", "not a marker"),
])
def test_markers_that_do_not_pair_up_are_errors(doc: str, message: str) -> None:
    with pytest.raises(ReportError, match=message):
        report.rewrite(doc, records("a", "b"))


# -- rendering -------------------------------------------------------------------------------


def test_the_default_renderer_flattens_nested_figures() -> None:
    rec = a_record("x", rate=14.04, cpu_ms={"sunk": 15.6123, "kube": {"etcd": 12345.6}},
                   pods=400, sizes=[2, 4, 16], runs=[{"p99": 0.5}, {"p99": 0.00012345}],
                   target_met=False, note="a | b")
    assert report.default_renderer(rec) == textwrap.dedent("""\
        | figure | value |
        |---|---|
        | rate | 14.0 |
        | cpu_ms.sunk | 15.6 |
        | cpu_ms.kube.etcd | 12,300 |
        | pods | 400 |
        | sizes | 2, 4, 16 |
        | runs.0.p99 | 0.500 |
        | runs.1.p99 | 0.000123 |
        | target_met | no |
        | note | a \\| b |""")
    empty = a_record("x")
    empty["figures"] = {}
    assert report.default_renderer(empty) == "No figures."


@pytest.mark.parametrize("value, text", [
    (14.0, "14.0"), (0.652, "0.652"), (0.6549, "0.655"), (1.0, "1.00"), (123.456, "123"),
    (999.7, "1,000"), (12345.6, "12,300"), (-2.5, "-2.50"), (0.0, "0"), (1.5e-7, "1.50e-07"),
    (10000, "10,000"), (True, "yes"), (None, "-"), ("text", "text"),
])
def test_figures_are_formatted_to_three_significant_digits(value: object, text: str) -> None:
    assert report.fmt(value) == text


def test_a_registered_renderer_writes_the_figures_under_the_header() -> None:
    def saturate(rec: Record) -> str:
        return f"\n**{rec['figures']['sunk_per_s']:.1f} Pods/s**\n\n"

    report.register("saturate", saturate)
    out = report.rewrite(DOC, records("saturate", "scale")).text
    assert section("saturate", HEADER + "\n\n**14.0 Pods/s**") in out
    assert section("scale", HEADER + "\n\n| figure | value |\n|---|---|\n"
                   "| sunk_per_s | 14.0 |") in out  # the others keep the default


def test_a_scenario_has_one_renderer() -> None:
    def one(rec: Record) -> str:
        return "one"

    def two(rec: Record) -> str:
        return "two"

    assert report.register("saturate", one) is one
    report.register("saturate", one)  # the same again (a module imported twice) is fine
    with pytest.raises(ReportError, match="already has a renderer"):
        report.register("saturate", two)
    with pytest.raises(ReportError, match="cannot be a marker"):
        report.register("Not A Name", two)


def test_a_failing_renderer_names_its_scenario() -> None:
    def broken(rec: Record) -> str:
        return str(rec["figures"]["absent"])

    report.register("saturate", broken)
    with pytest.raises(ReportError, match="'saturate': its renderer failed: KeyError"):
        report.rewrite(DOC, records("saturate"))


def test_the_command_is_a_code_span_whatever_its_backticks() -> None:
    assert report.code_span("python -m x") == "`python -m x`"
    assert report.code_span("echo `a`") == "`` echo `a` ``"
    assert report.code_span("a ``b`` c") == "```a ``b`` c```"


def test_plots_are_linked_relative_to_the_document() -> None:
    rec = a_record()
    rec["plots"] = [results.plot_entry("Scheduler CPU per Pod",
                                       "docs/benchmarks/growth-cpu-per-pod.png")]
    doc = results.REPO / "docs" / "benchmarks.md"
    body = report.render(rec, doc)
    assert body.endswith("\n\n![Scheduler CPU per Pod](benchmarks/growth-cpu-per-pod.png)")
    assert body.startswith(HEADER + "\n\n| figure | value |")
    assert report.render(rec, results.REPO / "README.md").endswith(
        "(docs/benchmarks/growth-cpu-per-pod.png)")


# -- the command -----------------------------------------------------------------------------


def write_doc_and_records(tmp_path: Path, *names: str) -> tuple[Path, Path]:
    doc = tmp_path / "benchmarks.md"
    doc.write_bytes(DOC.encode())
    store = tmp_path / "results"
    for rec in records(*names).values():
        results.save(rec, store / f"{rec['scenario']}.json")
    return doc, store


def test_main_rewrites_the_document_and_check_then_passes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc, store = write_doc_and_records(tmp_path, "saturate", "scale")
    args = ["--results", str(store), "--doc", str(doc)]
    assert report.main([*args, "--check"]) == 1
    assert doc.read_bytes() == DOC.encode()  # --check writes nothing
    assert "differs from its records" in capsys.readouterr().err
    assert report.main(args) == 0
    assert doc.read_text() == report.rewrite(DOC, records("saturate", "scale")).text
    assert report.main([*args, "--check"]) == 0
    assert "up to date" in capsys.readouterr().err


def test_main_warns_of_a_section_without_a_record_and_a_record_without_a_section(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc, store = write_doc_and_records(tmp_path, "scale", "open-loop")
    assert report.main(["--results", str(store), "--doc", str(doc)]) == 0
    err = capsys.readouterr().err
    assert "section 'saturate': no record" in err
    assert "record 'open-loop' has no section" in err
    assert "old saturate text" in doc.read_text()


def test_main_refuses_a_broken_document_and_leaves_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc, store = write_doc_and_records(tmp_path, "saturate")
    broken = DOC.replace("<!-- end generated: scale -->\n", "")
    doc.write_text(broken)
    assert report.main(["--results", str(store), "--doc", str(doc)]) == 2
    assert "'scale' is not ended" in capsys.readouterr().err
    assert doc.read_text() == broken


def fake_scenario_module(tmp_path: Path) -> Path:
    """A directory holding ``fake_scenario.py``, which registers a renderer for "saturate";
    added to the benchmarks package's path, it is ``benchmarks.fake_scenario``."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "fake_scenario.py").write_text(textwrap.dedent("""\
        from benchmarks import report

        report.register("saturate", lambda rec: "from the scenario's module")
        """))
    return package


def records_naming_modules(tmp_path: Path) -> tuple[Path, Path]:
    """The document, and records: saturate's run by benchmarks.fake_scenario, scale's by a
    module that does not exist."""
    doc, store = write_doc_and_records(tmp_path, "saturate", "scale")
    for name, module in (("saturate", "benchmarks.fake_scenario --pods 4"),
                         ("scale", "benchmarks.no_such_module")):
        rec = results.load(store / f"{name}.json")
        rec["command"] = f"python -m {module}"
        results.save(rec, store / f"{name}.json")
    return doc, store


def test_main_imports_the_scenario_module_so_its_renderer_registers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    package = fake_scenario_module(tmp_path)
    monkeypatch.setattr(benchmarks, "__path__", [*benchmarks.__path__, str(package)])
    monkeypatch.delitem(sys.modules, "benchmarks.fake_scenario", raising=False)
    doc, store = records_naming_modules(tmp_path)
    try:
        assert report.main(["--results", str(store), "--doc", str(doc)]) == 0
    finally:
        sys.modules.pop("benchmarks.fake_scenario", None)
    text = doc.read_text()
    assert "`python -m benchmarks.fake_scenario --pods 4`" in text
    assert "\n\nfrom the scenario's module\n\n<!-- end generated: saturate -->" in text
    assert "cannot import benchmarks.no_such_module" in capsys.readouterr().err


def test_python_dash_m_benchmarks_report_uses_the_registered_renderers(tmp_path: Path) -> None:
    """Run as ``python -m`` runs it (runpy, as ``__main__``): the scenario module registers
    into benchmarks.report, which must be the registry the command reads."""
    package = fake_scenario_module(tmp_path)
    doc, store = records_naming_modules(tmp_path)
    script = ("import runpy, sys, benchmarks; benchmarks.__path__.append(sys.argv.pop(1)); "
              "runpy.run_module('benchmarks.report', run_name='__main__', alter_sys=True)")
    argv = [sys.executable, "-c", script, str(package), "--results", str(store),
            "--doc", str(doc)]
    done = subprocess.run([*argv, "--check"], cwd=results.REPO, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 1, done.stderr
    assert "differs from its records" in done.stderr
    done = subprocess.run(argv, cwd=results.REPO, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "from the scenario's module" in doc.read_text()
