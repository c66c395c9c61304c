"""Follow one Pod through the code, from its watch event to its Binding:
``python -m benchmarks.podpath``.

The Pod's life runs once against the unit tests' HTTP stand-ins of the API server and
slurmrestd (no sleep, no other Pod): the watch event, the reconcile that submits its job, the
placeholder's "started" call, the reconcile that binds it. Every call between two functions of
the product (``sunk/``) is recorded. Printed:

- the modules the Pod passes through, in the order first entered;
- the climbs back up: calls from a module to one on a higher floor of the import graph (a
  module's floor is one above the highest floor of what it imports), that is, a call that
  goes against the imports, through a callback or an object handed down; each with the
  caller and the callee.

Fewer modules and fewer climbs: a newcomer follows a Pod with fewer files open.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import grimp

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ROOT / "sunk"


def floors(package: str = "sunk") -> dict[str, int]:
    """Module -> its floor: 1 for a module that imports nothing of the package, else one above
    the highest floor of what it imports (an import back into a loop of imports, such as one
    made only for type checking, is not counted)."""
    graph = grimp.build_graph(package)
    visiting: set[str] = set()

    @functools.cache
    def floor(module: str) -> int:
        visiting.add(module)
        below = [floor(m) for m in graph.find_modules_directly_imported_by(module)
                 if (m.startswith(package + ".") or m == package) and m not in visiting]
        visiting.discard(module)
        return 1 + max(below, default=0)

    return {m: floor(m) for m in graph.modules}


def package_of(module: str) -> str:
    """The room of a module when each package right under ``sunk`` is one room."""
    return ".".join(module.split(".")[:2])


def package_floors(package: str = "sunk") -> dict[str, int]:
    """Each package right under ``package`` (or top-level module) -> its floor in the graph of
    packages, where a package imports what any of its modules imports."""
    graph = grimp.build_graph(package)
    room = package_of
    imports: dict[str, set[str]] = {}
    for module in graph.modules:
        below = imports.setdefault(room(module), set())
        below.update(room(m) for m in graph.find_modules_directly_imported_by(module)
                     if m.startswith(package) and room(m) != room(module))

    @functools.cache
    def floor(name: str) -> int:
        return 1 + max((floor(m) for m in imports.get(name, ())), default=0)

    return {name: floor(name) for name in imports}


def module_of(path: str) -> str | None:
    """The dotted name of a file under ``sunk/``, or None for any other file."""
    try:
        relative = Path(path).resolve().relative_to(ROOT)
    except ValueError:
        return None
    if relative.parts[0] != "sunk" or relative.suffix != ".py":
        return None
    parts = list(relative.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@dataclass
class Trip:
    """The calls seen: modules in the order first entered, and the climbs back up."""

    floor: dict[str, int]
    #: module -> the room it counts in (itself, or its package).
    room: Callable[[str], str] = lambda module: module
    entered: list[str] = field(default_factory=list)
    climbs: list[tuple[str, str]] = field(default_factory=list)

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        callee = module_of(frame.f_code.co_filename)
        if callee is None:
            return
        callee = self.room(callee)
        if callee not in self.entered:
            self.entered.append(callee)
        caller_frame = frame.f_back
        caller = module_of(caller_frame.f_code.co_filename) if caller_frame else None
        caller = self.room(caller) if caller is not None else None
        if caller is None or caller == callee:
            return
        if self.floor.get(callee, 0) > self.floor.get(caller, 0):
            self.climbs.append((f"{caller}:{caller_frame.f_code.co_name}",  # type: ignore[union-attr]
                                f"{callee}:{frame.f_code.co_name}"))


def imported(*candidates: str) -> Any:
    """The first of ``module:name`` whose module is a file of this tree (the same trip can be
    taken on an older layout of the modules)."""
    for candidate in candidates:
        module, _, name = candidate.partition(":")
        path = ROOT / module.replace(".", "/")
        if path.with_suffix(".py").is_file() or (path / "__init__.py").is_file():
            return getattr(importlib.import_module(module), name)
    raise ModuleNotFoundError(", ".join(candidates))


async def one_pod_life(watch: Callable[[Trip], None], trip: Trip) -> None:
    """A Pod from its watch event to its Binding, calls recorded only around the product's
    steps (not the stand-ins being set up)."""
    from tests.unit.core import stand_ins as s

    policy_store = imported("sunk.policy:PolicyStore")
    scheduler_class = imported("sunk.loops.scheduler:Scheduler", "sunk.scheduler:Scheduler")
    answers_class = imported("sunk.hooks.answers:HookAnswers", "sunk.hookanswers:HookAnswers")
    policies = policy_store.from_directory(
        s.POLICIES, settings={"killWaitSeconds": 30, "annotationPrefix": s.PREFIX})
    async with s.bed() as bed:
        scheduler = scheduler_class(bed.cluster, bed.watch, bed.executor, policies)
        connect = getattr(importlib.import_module("sunk.wiring"), "connect_scheduler", None)
        if connect is not None:  # wired in one place (older layouts: in the constructor)
            connect(scheduler)
        hooks = answers_class(bed.cluster, bed.watch, bed.executor, wake=scheduler.wake)
        s.put(bed.cluster.namespace_informer, s.namespace())
        s.put(bed.cluster.node_informer, s.node())
        s.put(bed.cluster.slurmd_informer, s.slurmd())
        bed.slurm.routes[("POST", f"{s.SLURM}/job/submit")] = s.answer(200, {"job_id": 41})
        bed.slurm.jobs[41] = s.raw_job(41, s.who(), state="RUNNING", nodes="slurm-1",
                                       started=True)
        pod = s.pod()
        keys = ROOT / "sunk/plans/keys.py"  # typed queue keys, where the layout has them
        key = imported("sunk.plans.keys:PodKey")("ns", "p") if keys.is_file() else "ns/p"
        try:
            watch(trip)
            bed.add_pod(pod)                      # the watch event
            await scheduler.reconcile(key)        # submits the job
            await bed.settle()
            await hooks.job_started(41, "slurm-1")  # the placeholder's "started" call
            await scheduler.reconcile(key)        # binds the Pod
            await bed.settle()
        finally:
            sys.setprofile(None)
        bound = bed.kube.calls("POST", "/api/v1/namespaces/ns/pods/p/binding")
        if len(bound) != 1:
            raise SystemExit(f"the Pod was not bound once: {len(bound)} bindings")
        scheduler.queue.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--climbs", action="store_true", help="list every climb back up")
    parser.add_argument("--packages", action="store_true",
                        help="count each package right under sunk/ as one room")
    args = parser.parse_args(argv)
    trip = Trip(package_floors(), package_of) if args.packages else Trip(floors())
    asyncio.run(one_pod_life(lambda t: sys.setprofile(t.profile), trip))
    print(f"{'packages' if args.packages else 'modules'} passed: {len(trip.entered)}")
    for module in trip.entered:
        print(f"  floor {trip.floor.get(module, 0):2d}  {module}")
    distinct = sorted(set(trip.climbs))
    print(f"climbs back up: {len(trip.climbs)} calls ({len(distinct)} distinct caller -> callee)")
    if args.climbs:
        for caller, callee in distinct:
            print(f"  {caller} -> {callee}")


if __name__ == "__main__":
    main()
