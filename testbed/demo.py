"""``python -m testbed demo``: the local cluster, sunk-scheduler and example Pods."""

from __future__ import annotations

import time

from testbed import cluster, procs
from testbed.build import say
from testbed.scheduler import DEMO_NAME, DEMO_PROCESS, REPO, start_demo_scheduler

EXAMPLES = REPO / "examples" / "pods.yaml"


def run(*, node_count: int, suite: str, kubernetes: str | None = None) -> None:
    tb = cluster.up(node_count=node_count, suite=suite, kubernetes=kubernetes)
    pid = tb.pids.get(DEMO_PROCESS)
    if pid is None or not procs.alive(pid):
        say(f"starting sunk-scheduler (name {DEMO_NAME!r}, cluster scope)")
        start_demo_scheduler(tb)
    say("creating the example Pods in namespace demo")
    tb.kubectl("apply", "-f", "-", input=tb.kubectl("create", "namespace", "demo",
                                                     "--dry-run=client", "-o", "yaml"))
    tb.kubectl("apply", "-f", str(EXAMPLES))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        wide = tb.kubectl("get", "pods", "-n", "demo", "-o", "wide")
        if sum(" Running " in line for line in wide.splitlines()) >= 3:
            break
        time.sleep(1)
    print(cluster.status())
    print(f"""
The demo Pods (kubectl with the test bed's kubeconfig, see `python -m testbed env`):

{tb.kubectl("get", "pods", "-n", "demo", "-o", "wide").rstrip()}

Where to look:
  dashboard         http://127.0.0.1:{tb.ports['demo_dashboard']}/
  Pods              python -m testbed kubectl get pods -n demo -o wide
  why one waits     python -m testbed kubectl describe pod -n demo rejected
  Slurm's side      python -m testbed slurm squeue -o "%i %j %T %N %b"
  scheduler log     {tb.log(DEMO_PROCESS)}
  metrics           http://127.0.0.1:{tb.ports['demo_metrics']}/metrics
Try: python -m testbed kubectl delete pod -n demo cpu-inference   (its job ends too)
     python -m testbed slurm scancel <job id>                     (its Pod goes too)
Stop everything: python -m testbed down""")
