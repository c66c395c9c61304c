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


def _election(settings: Settings, api: kube.Client,
              ) -> tuple[leader.LeaderElector, leader.PodLabel] | None:
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


async def run(settings: Settings) -> None:
    policy_settings = {"killWaitSeconds": int(settings.slurm_kill_wait),
                       "annotationPrefix": settings.annotation_prefix}
    if settings.policies_configmap is None:
        policies = PolicyStore.from_directory(settings.policies_dir, settings=policy_settings)
    api = await kube.connect_waiting(settings.kubeconfig)
    slurm = SlurmClient(settings.slurm_api_base, token=settings.slurm_token,
                        user=settings.slurm_user, version=settings.slurm_api_version)
    election = _election(settings, api)
    sole = _leader_label(settings, api)  # without leader election: this replica leads
    parts: Parts | None = None
    try:
        if settings.policies_configmap is not None:
            namespace, name = policywatch.configmap_ref(settings.policies_configmap,
                                                        settings.own_namespace())
            policies = await policywatch.load(api, namespace, name, policy_settings)
            watch_policies = policywatch.ConfigMapPolicies(api, namespace, name, policies).run
        else:
            watch_policies = functools.partial(policies.watch_directory, settings.policies_dir)
        parts = built = assemble(settings, api, slurm, policies)

        def ready() -> tuple[bool, str]:
            """Ready: leading (or a healthy standby), caches synced, and both the API server
            and Slurm answering; else what is missing, one line each."""
            if election is not None and not election[0].leading:
                return election[0].standby_status()
            if not built.ready.is_set():
                return False, "starting: caches not synced yet"
            missing = []
            if problem := built.cluster.health.kube_problem():
                missing.append(f"API server: {problem}")
            if problem := built.cluster.health.slurm_problem():
                missing.append(f"Slurm: {problem}")
            return (False, "\n".join(missing)) if missing else (True, "ok")

        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(serve(probes_app(ready), settings.health_probe_bind_address))
            tasks.create_task(serve(metrics_app(), settings.metrics_bind_address))
            metrics.watch_gc()
            tasks.create_task(metrics.watch_loop_lag())
            heap.collect_young_less_often()
            tasks.create_task(heap.FreezeSurvivors().run())
            if election is not None:
                # A standby serves probes and metrics only; the leader does everything else.
                # A label left by an earlier run of this Pod must not route hooks here.
                await election[1].set(False)
                await election[0].acquire()
                await election[1].set(True)
                tasks.create_task(_hold(election[0]))
            else:
                await sole.set(True)
            tasks.create_task(built.scheduler.run())
            if built.syncer is not None:
                tasks.create_task(built.syncer.run())
            tasks.create_task(serve_hooks(
                create_hooks_app(built.hooks, keys=built.keys, locks=built.syncer),
                settings.hooks_api_bind_address, max_body=MAX_BODY))
            tasks.create_task(watch_policies())
            tasks.create_task(serve(create_app(built.dashboard, **settings.dashboard_auth()),
                                    settings.dashboard_bind_address))
            tasks.create_task(built.dashboard.record_trends())
    except* leader.LeadershipLost as lost:
        raise leader.LeadershipLost(str(lost.exceptions[0])) from None
    finally:
        if parts is not None:
            parts.scheduler.queue.close()
        if election is None:
            await sole.set(False)
        elif election[0].leading:
            # Graceful stop: everything above has stopped, so a successor cannot overlap us.
            await election[1].set(False)
            await election[0].release()
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
