"""``sunk-scheduler``: flags -> settings -> the scheduler and its servers, until SIGTERM."""

from __future__ import annotations

import sys

# httpx imports its command-line tool whenever rich, click and pygments are installed, and
# litestar's own CLI installs them: 80 modules and 3.6 MiB resident that the scheduler never
# uses. An entry of None makes that import fail, which httpx takes as "no CLI". First, before
# anything imports httpx.
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]

import asyncio
import contextlib
import functools
import logging
import os
import signal
from collections.abc import Callable, Coroutine
from typing import Any

import uvloop
from pydantic import ValidationError

from sunk import kube
from sunk.hooks.routes import MAX_BODY, create_hooks_app
from sunk.loops import leader, policywatch
from sunk.policy import PolicyLoadError, PolicyStore
from sunk.runtime import heap, metrics
from sunk.runtime.profiling import OnDemandProfiler
from sunk.runtime.servers import metrics_app, probes_app, serve, serve_hooks
from sunk.runtime.supervise import report_loop_error
from sunk.settings import Settings, from_args
from sunk.slurm.client import SlurmClient
from sunk.wiring import Parts, assemble
from web import create_app

log = logging.getLogger("sunk")


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(), stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)
    for noisy in ("httpx", "httpcore", "kr8s", "celpy", "uvicorn"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _leader_label(settings: Settings, api: kube.Client) -> leader.PodLabel:
    """The label on our own Pod that the hook and dashboard Services select: the leader sets it
    (without leader election, the one replica does), so no other Pod with the app's labels is
    sent the prolog's secret. Outside a Pod (no POD_NAME) it does nothing."""
    return leader.PodLabel(api, namespace=settings.own_namespace(),
                           pod=os.environ.get("POD_NAME"), key=settings.annotation("leader"))


#: The leader elector and the leader label on our own Pod (with --leader-elect).
_Election = tuple[leader.LeaderElector, leader.PodLabel]
#: What keeps the policies up to date: a watch of their directory or of their ConfigMap.
_PolicyWatch = Callable[[], Coroutine[Any, Any, None]]


def _election(settings: Settings, api: kube.Client) -> _Election | None:
    """The leader elector and the leader label on our own Pod, with --leader-elect."""
    if not settings.leader_elect:
        return None
    namespace = settings.leader_elect_resource_namespace or settings.own_namespace()
    name = settings.leader_elect_resource_name or settings.scheduler_name
    timing = leader.Timing(settings.leader_elect_lease_duration,
                           settings.leader_elect_renew_deadline,
                           settings.leader_elect_retry_period)
    elector = leader.LeaderElector(leader.KubeLeases(api, namespace=namespace, name=name),
                                   identity=leader.default_identity(), timing=timing,
                                   describe=f"lease {namespace}/{name}")
    return elector, _leader_label(settings, api)


def _policy_settings(settings: Settings) -> dict[str, Any]:
    """The ``settings`` every policy's expressions may read."""
    return {"killWaitSeconds": int(settings.slurm_kill_wait),
            "annotationPrefix": settings.annotation_prefix}


async def _configmap_policies(api: kube.Client, ref: str, own_namespace: str,
                              policy_settings: dict[str, Any],
                              ) -> tuple[PolicyStore, _PolicyWatch]:
    """The policies of the ConfigMap ``ref`` (--policies-configmap), and the watch that
    reloads them as it changes."""
    namespace, name = policywatch.configmap_ref(ref, own_namespace)
    policies = await policywatch.load(api, namespace, name, policy_settings)
    return policies, policywatch.ConfigMapPolicies(api, namespace, name, policies).run


def _readiness(election: _Election | None, parts: Parts) -> tuple[bool, str]:
    """Ready: leading (or a healthy standby), caches synced, and both the API server
    and Slurm answering; else what is missing, one line each."""
    if election is not None and not election[0].leading:
        return election[0].standby_status()
    if not parts.ready.is_set():
        return False, "starting: caches not synced yet"
    missing = []
    if problem := parts.cluster.health.kube_problem():
        missing.append(f"API server: {problem}")
    if problem := parts.cluster.health.slurm_problem():
        missing.append(f"Slurm: {problem}")
    return (False, "\n".join(missing)) if missing else (True, "ok")


def _start_upkeep(tasks: asyncio.TaskGroup, settings: Settings,
                  ready: Callable[[], tuple[bool, str]]) -> None:
    """What every replica runs, a standby too: probes, metrics and the heap's upkeep."""
    tasks.create_task(serve(probes_app(ready), settings.health_probe_bind_address))
    tasks.create_task(serve(metrics_app(), settings.metrics_bind_address))
    metrics.watch_gc()
    tasks.create_task(metrics.watch_loop_lag())
    heap.collect_young_less_often()
    tasks.create_task(heap.FreezeSurvivors().run())


async def _lead(tasks: asyncio.TaskGroup, election: _Election | None,
                sole: leader.PodLabel) -> None:
    """Become the leader (waiting for the Lease, with leader election) and label our Pod so."""
    if election is None:
        await sole.set(True)
        return
    # A standby serves probes and metrics only; the leader does everything else.
    # A label left by an earlier run of this Pod must not route hooks here.
    elector, label = election
    await label.set(False)
    await elector.acquire()
    await label.set(True)
    tasks.create_task(_hold(elector))


def _start_leading(tasks: asyncio.TaskGroup, settings: Settings, parts: Parts,
                   watch_policies: _PolicyWatch) -> None:
    """What only the leader runs: the loops, the hook API, the policies' watch, the dashboard."""
    tasks.create_task(parts.scheduler.run())
    if parts.syncer is not None:
        tasks.create_task(parts.syncer.run())
    tasks.create_task(serve_hooks(
        create_hooks_app(parts.hooks, keys=parts.keys, locks=parts.syncer),
        settings.hooks_api_bind_address, max_body=MAX_BODY))
    tasks.create_task(watch_policies())
    tasks.create_task(serve(create_app(parts.dashboard, **settings.dashboard_auth()),
                            settings.dashboard_bind_address))
    tasks.create_task(parts.dashboard.record_trends())


async def _step_down(parts: Parts | None, election: _Election | None,
                     sole: leader.PodLabel) -> None:
    """Stop taking work, and hand the lead over (or take our Pod's label off)."""
    if parts is not None:
        parts.scheduler.queue.close()
    if election is None:
        await sole.set(False)
    elif election[0].leading:
        # Graceful stop: everything above has stopped, so a successor cannot overlap us.
        await election[1].set(False)
        await election[0].release()


async def run(settings: Settings) -> None:
    policy_settings = _policy_settings(settings)
    if settings.policies_configmap is None:
        try:
            policies = PolicyStore.from_directory(settings.policies_dir, settings=policy_settings)
        except PolicyLoadError as error:  # the watch puts a set in force once one loads
            policies = PolicyStore.without_a_set(error, policy_settings)
    api = await kube.connect_waiting(settings.kubeconfig)
    slurm = SlurmClient(settings.slurm_api_base, token=settings.slurm_token,
                        user=settings.slurm_user, version=settings.slurm_api_version)
    election = _election(settings, api)
    sole = _leader_label(settings, api)  # without leader election: this replica leads
    parts: Parts | None = None
    try:
        watch_policies: _PolicyWatch
        if settings.policies_configmap is not None:
            policies, watch_policies = await _configmap_policies(
                api, settings.policies_configmap, settings.own_namespace(), policy_settings)
        else:
            watch_policies = functools.partial(policies.watch_directory, settings.policies_dir)
        parts = built = assemble(settings, api, slurm, policies)
        async with asyncio.TaskGroup() as tasks:
            _start_upkeep(tasks, settings, functools.partial(_readiness, election, built))
            await _lead(tasks, election, sole)
            _start_leading(tasks, settings, built, watch_policies)
    except* leader.LeadershipLost as lost:
        raise leader.LeadershipLost(str(lost.exceptions[0])) from None
    finally:
        await _step_down(parts, election, sole)
        await slurm.aclose()
        await kube.close(api)


async def _hold(elector: leader.LeaderElector) -> None:
    """Keep the Lease; when it is lost, stop everything at once (the TaskGroup cancels)."""
    await elector.hold()
    raise leader.LeadershipLost(elector.lost_reason)


def main(argv: list[str] | None = None) -> int:
    try:
        settings = from_args(argv)
    except ValidationError as exc:
        for err in exc.errors():
            where = ".".join(str(x) for x in err["loc"])
            print(f"sunk-scheduler: error: --{where.replace('_', '-')}: {err['msg']}",
                  file=sys.stderr)
        return 2
    _setup_logging(settings.log_level)

    async def guarded() -> None:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        loop.set_exception_handler(report_loop_error)
        OnDemandProfiler().install(loop)
        with contextlib.suppress(asyncio.CancelledError):
            await run(settings)

    try:
        # uvloop: the scheduler is bound by the CPU cost of its HTTP calls; uvloop's event
        # loop makes each one cheaper.
        uvloop.run(guarded())
    except PolicyLoadError as exc:
        print(f"sunk-scheduler: error: the policy set does not load:\n{exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"sunk-scheduler: error: {exc}", file=sys.stderr)
        return 1
    except leader.LeadershipLost as exc:
        # As kube-scheduler does: exit, and let the restart rejoin as a candidate.
        print(f"sunk-scheduler: error: {exc}; exiting", file=sys.stderr)
        return 1
    log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
