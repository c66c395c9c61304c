"""Load policy sets from YAML (a directory, or a ConfigMap's ``data``) and keep one in force.

A policy set is a mapping of source names (file names or ConfigMap keys) to YAML text, each
holding one or more documents. Policies apply in the order of their source names, then of the
documents within a source, which is the order in which mappings override one another.

``PolicyStore`` holds the set in force. A reload that fails leaves it in force and keeps the
problems for logs, metrics and the dashboard; at start-up a broken set raises PolicyLoadError.
No Kubernetes here: the scheduler watches the ConfigMap and calls ``reload`` with its data.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml
from pydantic import ValidationError

from sunk.policy import metrics
from sunk.policy.decision import Decision, EvaluationError
from sunk.policy.engine import PolicyEngine, pod_name
from sunk.policy.model import Origin, PolicyDocument, PolicyIssue, PolicyLoadError

_log = logging.getLogger(__name__)

DEFAULT_DIRECTORY: Final = Path("policies")
RECENT_ERRORS: Final = 100
POLICY_SUFFIXES: Final = (".yaml", ".yml")


def read_directory(path: Path | str) -> dict[str, str]:
    """The text of each ``*.yaml``/``*.yml`` file directly in ``path``, by file name.

    Subdirectories and hidden entries are skipped: a mounted ConfigMap keeps its real files in
    hidden ``..data`` directories behind symlinks, and ``policies/examples`` is not a default.
    """
    directory = Path(path)
    sources: dict[str, str] = {}
    for entry in sorted(directory.iterdir()):
        if entry.name.startswith(".") or entry.suffix not in POLICY_SUFFIXES:
            continue
        if entry.is_file():
            sources[entry.name] = entry.read_text(encoding="utf-8")
    return sources


def parse_sources(sources: Mapping[str, str]) -> list[tuple[Origin, PolicyDocument]]:
    """Every policy document in ``sources``, in policy order; raises PolicyLoadError."""
    documents, issues = _parse(sources)
    if issues:
        raise PolicyLoadError(issues)
    return documents


def load_sources(
    sources: Mapping[str, str], settings: Mapping[str, Any] | None = None
) -> PolicyEngine:
    """Parse, check and compile a policy set; raises PolicyLoadError listing every problem."""
    if not sources:
        raise PolicyLoadError([PolicyIssue("no policy files found")])
    documents, issues = _parse(sources)
    try:
        engine = PolicyEngine.compile(documents, settings)
    except PolicyLoadError as error:
        issues.extend(error.issues)
    if issues:
        raise PolicyLoadError(sorted(issues, key=_position))
    return engine


def load_directory(
    path: Path | str = DEFAULT_DIRECTORY, settings: Mapping[str, Any] | None = None
) -> PolicyEngine:
    """The policy set of a directory (see ``read_directory``); raises PolicyLoadError."""
    return load_sources(_read(path), settings)


def load_configmap(
    data: Mapping[str, str] | None, settings: Mapping[str, Any] | None = None
) -> PolicyEngine:
    """The policy set in a ConfigMap's ``data`` (.yaml and .yml keys); raises PolicyLoadError."""
    return load_sources(_policy_keys(data), settings)


@dataclass(frozen=True, slots=True)
class RecentError:
    """An expression that failed on a Pod: what the dashboard lists under the policy set."""

    at: float
    pod: str
    error: EvaluationError


@dataclass(frozen=True, slots=True)
class PolicyStatus:
    """What the dashboard shows: the set in force, and the last reload's problems, if it failed."""

    generation: int
    policies: tuple[str, ...]
    loaded_at: float
    error: PolicyLoadError | None
    error_at: float | None


class PolicyStore:
    """The policy set in force, replaced by each good reload and kept through bad ones.

    A scheduler started while its set does not load (a broken ConfigMap edit, then a restart)
    has no set in force (:meth:`without_a_set`): it runs, keeps Pods and jobs in step and
    serves the hooks, and new Pods wait, saying why (:meth:`not_in_force`), until a reload
    puts a set in force. Crashing instead would stop the hooks Slurm's jobs wait on."""

    def __init__(self, engine: PolicyEngine | None, sources: Mapping[str, str] | None = None,
                 settings: Mapping[str, Any] | None = None) -> None:
        self._engine = engine
        self._settings = engine.settings if engine is not None else settings
        self._sources = dict(sources) if sources is not None else None
        self._generation = 1 if engine is not None else 0
        self._loaded_at = time.time()
        self._error: PolicyLoadError | None = None
        self._error_at: float | None = None
        self._recent: deque[RecentError] = deque(maxlen=RECENT_ERRORS)
        if engine is not None:
            metrics.RELOADS.inc()

    @classmethod
    def from_sources(
        cls, sources: Mapping[str, str], settings: Mapping[str, Any] | None = None
    ) -> PolicyStore:
        """Start-up: a broken set raises PolicyLoadError, which names every problem."""
        try:
            engine = load_sources(sources, settings)
        except PolicyLoadError:
            metrics.LOAD_ERRORS.inc()
            raise
        return cls(engine, sources)

    @classmethod
    def from_directory(
        cls, path: Path | str = DEFAULT_DIRECTORY, settings: Mapping[str, Any] | None = None
    ) -> PolicyStore:
        """Start-up from a directory; raises PolicyLoadError."""
        try:
            sources = _read(path)
        except PolicyLoadError:
            metrics.LOAD_ERRORS.inc()
            raise
        return cls.from_sources(sources, settings)

    @classmethod
    def from_configmap(
        cls, data: Mapping[str, str] | None, settings: Mapping[str, Any] | None = None
    ) -> PolicyStore:
        """Start-up from a ConfigMap's ``data``; raises PolicyLoadError."""
        return cls.from_sources(_policy_keys(data), settings)

    @classmethod
    def without_a_set(
        cls, error: PolicyLoadError, settings: Mapping[str, Any] | None = None
    ) -> PolicyStore:
        """Start-up with a set that does not load: nothing in force until a reload loads one."""
        store = cls(None, None, settings)
        store._fail(error)
        return store

    def not_in_force(self) -> str | None:
        """Why no policy set is in force (a Pod cannot be judged, so it waits), or None."""
        if self._engine is not None:
            return None
        problem = " ".join(line.strip() for line in str(self._error or "not loaded").splitlines())
        if len(problem) > 300:
            problem = problem[:299] + "…"
        return f"no policy set is in force ({problem}); new Pods wait until one loads"

    @property
    def engine(self) -> PolicyEngine:
        """The engine in force; take it once per Pod so a reload cannot change it mid-way.
        Raises RuntimeError while none is (:meth:`not_in_force`)."""
        if self._engine is None:
            raise RuntimeError(self.not_in_force())
        return self._engine

    def evaluate(
        self, pod: Mapping[str, Any], namespace: Mapping[str, Any] | None = None
    ) -> Decision:
        """The decision of the policy set in force for ``pod``; never raises while one is
        (ask :meth:`not_in_force` first)."""
        decision = self.engine.evaluate(pod, namespace)
        if decision.errors:
            now, name = time.time(), pod_name(pod)
            self._recent.extend(RecentError(now, name, error) for error in decision.errors)
        return decision

    def recent_errors(self) -> list[RecentError]:
        """The last evaluation errors (at most RECENT_ERRORS), newest first."""
        return list(reversed(self._recent))

    def status(self) -> PolicyStatus:
        return PolicyStatus(
            generation=self._generation,
            policies=self._engine.names if self._engine is not None else (),
            loaded_at=self._loaded_at,
            error=self._error,
            error_at=self._error_at,
        )

    def reload(self, sources: Mapping[str, str]) -> bool:
        """Put ``sources`` in force if they load; otherwise keep the current set.

        Returns whether ``sources`` are now in force. The same sources are not loaded twice,
        so a watcher can call this on every poll and a broken set is reported once.
        """
        sources = dict(sources)
        if sources == self._sources:
            return self._error is None
        self._sources = sources
        try:
            engine = load_sources(sources, self._settings)
        except PolicyLoadError as error:
            self._fail(error)
            return False
        self._engine = engine
        self._generation += 1
        self._loaded_at = time.time()
        self._error = None
        self._error_at = None
        metrics.RELOADS.inc()
        _log.info("policy set %d in force: %s", self._generation, ", ".join(engine.names))
        return True

    def reload_configmap(self, data: Mapping[str, str] | None) -> bool:
        """Reload from a ConfigMap's ``data``; see ``reload``."""
        return self.reload(_policy_keys(data))

    async def watch_directory(
        self, path: Path | str = DEFAULT_DIRECTORY, *, interval: float = 2.0
    ) -> None:
        """Reload whenever a policy file in ``path`` changes; runs until cancelled.

        Polling is enough for files that change a few times a day, works on every file system
        and sees the symlink swap by which the kubelet updates a mounted ConfigMap.
        """
        while True:
            await asyncio.sleep(interval)
            try:
                sources = await asyncio.to_thread(_read, path)
            except PolicyLoadError as error:
                if self._sources is not None:
                    self._sources = None
                    self._fail(error)
                continue
            self.reload(sources)

    def _fail(self, error: PolicyLoadError) -> None:
        self._error = error
        self._error_at = time.time()
        metrics.LOAD_ERRORS.inc()
        if self._engine is None:
            _log.error("policy set not loaded, none in force (new Pods wait): %s", error)
        else:
            _log.error("policy set not loaded, set %d stays in force: %s", self._generation,
                       error)


def _read(path: Path | str) -> dict[str, str]:
    try:
        return read_directory(path)
    except (OSError, UnicodeDecodeError) as error:
        raise PolicyLoadError([PolicyIssue(f"cannot read policies: {error}", None)]) from error


def _parse(
    sources: Mapping[str, str],
) -> tuple[list[tuple[Origin, PolicyDocument]], list[PolicyIssue]]:
    documents: list[tuple[Origin, PolicyDocument]] = []
    issues: list[PolicyIssue] = []
    for source in sorted(sources):
        for origin, raw in _documents(source, sources[source], issues):
            name = _name_of(raw)
            if not isinstance(raw, dict):
                issues.append(PolicyIssue("a document must be a mapping", origin, name))
                continue
            try:
                documents.append((origin, PolicyDocument.model_validate(raw)))
            except ValidationError as error:
                issues.extend(
                    PolicyIssue(detail["msg"], origin, name, _field(detail["loc"]))
                    for detail in error.errors(include_url=False)
                )
    return documents, issues


def _position(issue: PolicyIssue) -> tuple[str, int]:
    return (issue.origin.source, issue.origin.document) if issue.origin else ("", 0)


def _policy_keys(data: Mapping[str, str] | None) -> dict[str, str]:
    return {key: text for key, text in (data or {}).items() if key.endswith(POLICY_SUFFIXES)}


def _documents(source: str, text: str, issues: list[PolicyIssue]) -> Iterator[tuple[Origin, Any]]:
    """The non-empty YAML documents of one source; a syntax error is an issue for the rest."""
    number = 0
    try:
        for raw in yaml.safe_load_all(text):
            number += 1
            if raw is not None:
                yield Origin(source, number), raw
    except yaml.YAMLError as error:
        issues.append(PolicyIssue(f"invalid YAML: {error}", Origin(source, number + 1)))


def _name_of(raw: Any) -> str | None:
    try:
        name = raw["metadata"]["name"]
    except (KeyError, TypeError):
        return None
    return name if isinstance(name, str) else None


def _field(location: tuple[int | str, ...]) -> str:
    """A pydantic error location as a field path: ``spec.validations[2].reason``."""
    path = ""
    for part in location:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path
