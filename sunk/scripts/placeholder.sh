#!/bin/sh
# The batch script of the placeholder job sunk submits for each Pod. Shipped with sunk and
# installed on every Slurm node (by the Helm chart; by the test bed through a bind mount).
#
# 1. Tell the scheduler the job really runs: the prolog is done and this script started.
#    It appends ": started" to the job's extra, which the scheduler polls. The batch script
#    does not see SLURM_JOB_EXTRA, so sunk passes the original value as SUNK_JOB_EXTRA.
# 2. Hold the allocation while the Pod runs.
set -u
scontrol update jobid="$SLURM_JOB_ID" extra="${SUNK_JOB_EXTRA:?not set by sunk}: started" || {
    echo "sunk placeholder: could not mark job $SLURM_JOB_ID started" >&2
    exit 1
}
trap 'exit 0' TERM INT
sleep infinity &
wait
