"""Results records: what a run is measured on, the command line, and the JSON files."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import types
from pathlib import Path

import pytest

from benchmarks import bed, results, scale
from benchmarks.results import Machine, Record, ResultsError
from release import project

# Not a module under benchmarks/: the report imports those for their renderers, and these
# tests must not depend on the real scenarios' renderers.
COMMAND = "python -m bench.example --scenario saturate --pods 400"
MACHINE = Machine(cores=2, cpu_model="AMD EPYC 7B13", memory_gib=23.5, python="3.11.7",
                  kernel="6.1.0-28-cloud-amd64")


def a_record(scenario: str = "saturate", **figures: object) -> Record:
    return Record(scenario=scenario,
                  command=COMMAND,
                  date="2026-11-23T21:54:47Z", machine=MACHINE,
                  versions={"sunk": "0.1.0", "commit": "d313bf9", "slurm": "24.11.5"},
                  bed={"nodes": 100},
                  figures=dict(figures) or {"sunk_per_s": 14.0, "cpu_ms": {"sunk": 15.6}})


# -- files -----------------------------------------------------------------------------------


def test_a_saved_record_loads_back_equal(tmp_path: Path) -> None:
    rec = a_record()
    rec["plots"] = [results.plot_entry("CPU", "docs/benchmarks/growth-cpu-per-pod.png")]
    path = results.save(rec, tmp_path / "run.json")
    assert path == tmp_path / "run.json"
    assert results.load(path) == rec


def test_the_file_is_pretty_sorted_json_with_a_trailing_newline(tmp_path: Path) -> None:
    path = results.save(a_record(zeta=1, alpha=2.5), tmp_path / "x.json")
    text = path.read_text()
    assert text.endswith("}\n") and not text.endswith("\n\n")
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"
    assert text.index('"alpha"') < text.index('"zeta"')
    assert text.index('"bed"') < text.index('"command"') < text.index('"figures"')
    # the same record gives the same bytes
    assert results.save(a_record(zeta=1, alpha=2.5), tmp_path / "y.json").read_bytes() == \
        path.read_bytes()


def test_the_default_path_is_the_repositorys_results_directory_whatever_the_cwd(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = Path(__file__).resolve().parents[3]
    assert (repo / "pyproject.toml").is_file()
    assert repo == results.REPO
    assert repo / "benchmarks" / "results" == results.RESULTS_DIR
    assert results.default_path("open-loop") == results.RESULTS_DIR / "open-loop.json"

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path / "results")
    path = results.save(a_record("gang"))
    assert path == tmp_path / "results" / "gang.json"
    assert results.load(path)["scenario"] == "gang"
    assert list(elsewhere.iterdir()) == []
    assert [p.name for p in (tmp_path / "results").iterdir()] == ["gang.json"]  # no temp left
    assert results.load_all() == {"gang": results.load(path)}


def test_load_all_keys_records_by_scenario(tmp_path: Path) -> None:
    results.save(a_record("saturate"), tmp_path / "saturate.json")
    results.save(a_record("scale"), tmp_path / "other-name.json")  # as --json FILE may
    (tmp_path / "notes.txt").write_text("not a record")
    found = results.load_all(tmp_path)
    assert sorted(found) == ["saturate", "scale"]
    assert found["scale"]["scenario"] == "scale"
    assert results.load_all(tmp_path / "absent") == {}


def test_two_files_of_one_scenario_are_an_error(tmp_path: Path) -> None:
    results.save(a_record("saturate"), tmp_path / "a.json")
    results.save(a_record("saturate"), tmp_path / "b.json")
    with pytest.raises(ResultsError, match="both scenario 'saturate'"):
        results.load_all(tmp_path)


@pytest.mark.parametrize("text, message", [
    ("{", "Expecting"),
    ("[]", "not a JSON object"),
    ('{"scenario": "x"}', "'command' missing"),
])
def test_a_file_that_is_not_a_record_is_refused(tmp_path: Path, text: str,
                                                message: str) -> None:
    (tmp_path / "bad.json").write_text(text)
    with pytest.raises(ResultsError, match=message):
        results.load(tmp_path / "bad.json")


def test_a_record_whose_machine_lacks_a_field_is_refused(tmp_path: Path) -> None:
    data = dict(a_record())
    data["machine"] = {"cores": 2}
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(ResultsError, match="lacks cpu_model"):
        results.load(tmp_path / "bad.json")


def test_figures_that_are_not_json_are_refused_and_nothing_is_written(tmp_path: Path) -> None:
    for figures in ({"rate": float("nan")}, {"when": object()}):
        rec = a_record(**figures)
        with pytest.raises(ResultsError, match="not JSON"):
            results.save(rec, tmp_path / "bad.json")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("scenario", ["", "../x", "a/b", "Saturate", "-x", "a b"])
def test_a_scenario_must_be_a_plain_name(scenario: str) -> None:
    with pytest.raises(ResultsError, match="scenario"):
        results.default_path(scenario)
    with pytest.raises(ResultsError, match="scenario"):
        results.record(scenario, figures={}, argv=[], module="benchmarks.x", date="d",
                       machine=MACHINE)


# -- the command line ------------------------------------------------------------------------


def test_the_command_is_rebuilt_with_shell_quoting() -> None:
    argv = ["--scenario", "saturate", "--pods", "400", "--label", "a b", "--note", "it's",
            "--json", "/tmp/x y.json", "--empty", ""]
    line = results.command(argv, module="benchmarks.scheduling")
    assert line == ("python -m benchmarks.scheduling --scenario saturate --pods 400 "
                    "--label 'a b' --note 'it'\"'\"'s' --json '/tmp/x y.json' --empty ''")
    assert shlex.split(line) == ["python", "-m", "benchmarks.scheduling", *argv]


def test_the_command_defaults_to_the_module_run_with_dash_m_and_its_arguments(
        monkeypatch: pytest.MonkeyPatch) -> None:
    main = types.ModuleType("__main__")
    main.__spec__ = types.SimpleNamespace(name="benchmarks.scheduling")  # type: ignore[assignment]
    monkeypatch.setitem(sys.modules, "__main__", main)
    monkeypatch.setattr(sys, "argv", ["/somewhere/benchmarks/scheduling.py", "--pods", "4"])
    assert results.command() == "python -m benchmarks.scheduling --pods 4"
    assert results.command(["--nodes", "8"]) == "python -m benchmarks.scheduling --nodes 8"


def test_a_script_run_by_path_is_named_by_its_module_in_the_repository(
        monkeypatch: pytest.MonkeyPatch) -> None:
    main = types.ModuleType("__main__")
    main.__spec__ = None
    monkeypatch.setitem(sys.modules, "__main__", main)
    monkeypatch.setattr(sys, "argv", [str(results.REPO / "benchmarks" / "gangs.py"), "-v"])
    assert results.command() == "python -m benchmarks.gangs -v"


# -- machine and versions --------------------------------------------------------------------


def test_machine_info_reads_cpu_model_and_memory(tmp_path: Path) -> None:
    (tmp_path / "cpuinfo").write_text("processor\t: 0\nmodel name\t: AMD EPYC 7B13\n"
                                      "processor\t: 1\nmodel name\t: AMD EPYC 7B13\n")
    (tmp_path / "meminfo").write_text("MemTotal:       24641396 kB\nMemFree: 1 kB\n")
    info = results.machine_info(tmp_path / "cpuinfo", tmp_path / "meminfo")
    assert info["cpu_model"] == "AMD EPYC 7B13"
    assert info["memory_gib"] == 23.5
    assert info["cores"] >= 1
    assert re.fullmatch(r"3\.\d+\.\d+.*", info["python"])
    assert info["kernel"]
    assert set(info) == set(Machine.__annotations__)


def test_machine_info_without_proc_still_names_a_cpu(tmp_path: Path) -> None:
    info = results.machine_info(tmp_path / "none", tmp_path / "none")
    assert info["memory_gib"] == 0
    assert isinstance(info["cpu_model"], str)


def test_the_machine_line_and_the_beds_helper_agree() -> None:
    assert results.describe_machine(MACHINE) == (
        "2 cores (AMD EPYC 7B13), 23.5 GiB, Python 3.11.7, kernel 6.1.0-28-cloud-amd64")
    assert bed.machine() == results.describe_machine(results.machine_info())


def test_versions_are_sunks_the_commits_and_the_callers() -> None:
    found = results.versions({"slurm": "24.11.5", "kubernetes": "1.35.0"})
    assert found["sunk"] == project.version()
    assert re.fullmatch(r"[0-9a-f]{7,}(\+dirty)?|unknown", found["commit"])
    assert found["slurm"] == "24.11.5" and found["kubernetes"] == "1.35.0"
    assert set(results.versions()) == {"sunk", "commit"}
    with pytest.raises(ResultsError, match="'commit'"):
        results.versions({"commit": "abc"})


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid",
                           "-c", "commit.gpgsign=false", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_the_commit_is_marked_dirty_by_tracked_changes_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _git(tmp_path, "init", "-q")
    (tmp_path / "a.txt").write_text("1\n")
    _git(tmp_path, "add", "a.txt")
    _git(tmp_path, "commit", "-q", "-m", "one")
    monkeypatch.setattr(results, "REPO", tmp_path)
    head = _git(tmp_path, "rev-parse", "--short", "HEAD")
    assert results.commit() == head
    (tmp_path / "results.json").write_text("{}\n")  # untracked: a record just written
    assert results.commit() == head
    (tmp_path / "a.txt").write_text("2\n")
    assert results.commit() == head + "+dirty"


def test_outside_a_checkout_the_commit_is_unknown(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(results, "REPO", tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert results.commit() == "unknown"


def test_a_record_carries_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(results, "commit", lambda: "abc1234")
    rec = results.record("scale", figures={"cpu_ms": {"100": 9.8}}, bed={"nodes": 100},
                         extra_versions={"slurm": "24.11.5"}, argv=["--jobs", "100"],
                         module="benchmarks.scale",
                         plots=[results.plot_entry(
                             "CPU", results.REPO / "docs/benchmarks/growth-cpu-per-pod.png")])
    assert rec["command"] == "python -m benchmarks.scale --jobs 100"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", rec["date"])
    assert rec["versions"] == {"sunk": project.version(), "commit": "abc1234",
                               "slurm": "24.11.5"}
    assert rec["bed"] == {"nodes": 100} and rec["figures"] == {"cpu_ms": {"100": 9.8}}
    assert rec["plots"] == [{"title": "CPU", "path": "docs/benchmarks/growth-cpu-per-pod.png"}]
    assert set(rec["machine"]) == set(Machine.__annotations__)
    assert "plots" not in results.record("scale", figures={}, argv=[], module="m")


def test_a_plot_outside_the_repository_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ResultsError, match="inside the repository"):
        results.plot_entry("CPU", tmp_path / "x.png")


def test_the_scale_probe_less_the_idle_cost() -> None:
    """What the scheduler spends with nothing changing, over the probe's time, is not the
    probe Pods' cost: at 11,000 jobs the job-state poll is most of a probe's CPU."""
    idle = {"cpu_share": 0.03}  # 30 ms a second
    probe = {"cpu_ms_per_pod": 8.0, "pods": 50, "seconds": 2.5}  # 75 ms of it idle
    assert scale.net_of_idle(probe, idle) == 6.5
    assert scale.net_of_idle({"cpu_ms_per_pod": 8.0}, idle) is None  # a record before timing
