"""``sunk-scheduler``: flags -> settings -> the scheduler and its servers, until SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys

from pydantic import ValidationError

from sunk import kube
from sunk.hooks import create_hooks_app
from sunk.policy import PolicyLoadError, PolicyStore
from sunk.scheduler import Scheduler
from sunk.servers import metrics_app, probes_app, serve
from sunk.settings import Settings, from_args
from sunk.slurm import SlurmClient
from sunk.syncer import Syncer
from sunk.web import auth_from_env, create_app

log = logging.getLogger("sunk")


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(), stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)
    for noisy in ("httpx", "httpcore", "kr8s", "celpy", "uvicorn"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


async def run(settings: Settings) -> None:
    policies = PolicyStore.from_directory(
        settings.policies_dir,
        settings={"killWaitSeconds": int(settings.slurm_kill_wait),
                  "annotationPrefix": settings.annotation_prefix})
    api = await kube.connect(settings.kubeconfig)
    slurm = SlurmClient(settings.slurm_api_base, token=settings.slurm_token,
                        user=settings.slurm_user, version=settings.slurm_api_version)
    scheduler = Scheduler(settings, api, slurm, policies)
    syncer = Syncer(scheduler) if "syncer" in settings.components else None

    def ready() -> tuple[bool, str]:
        if not scheduler.ready.is_set():
            return False, "starting: caches not synced yet"
        if not scheduler.state.slurm_healthy:
            return False, f"slurmrestd: {scheduler.state.slurm_error}"
        return True, "ok"

    try:
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(scheduler.run())
            tasks.create_task(serve(probes_app(ready), settings.health_probe_bind_address))
            tasks.create_task(serve(metrics_app(), settings.metrics_bind_address))
            if syncer is not None:
                tasks.create_task(syncer.run())
            tasks.create_task(serve(
                create_hooks_app(scheduler, token=settings.hook_token, locks=syncer),
                settings.hooks_api_bind_address))
            tasks.create_task(policies.watch_directory(settings.policies_dir))
            tasks.create_task(serve(create_app(scheduler, **auth_from_env()),
                                    settings.dashboard_bind_address))
    finally:
        scheduler.queue.close()
        await slurm.aclose()
        await kube.close(api)


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
        with contextlib.suppress(asyncio.CancelledError):
            await run(settings)

    try:
        asyncio.run(guarded())
    except PolicyLoadError as exc:
        print(f"sunk-scheduler: error: the policy set does not load:\n{exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"sunk-scheduler: error: {exc}", file=sys.stderr)
        return 1
    log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
