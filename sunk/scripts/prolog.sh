#!/bin/sh
# Slurm Prolog shipped with sunk. Installed on every Slurm node (by the Helm chart; by the test
# bed through a read-only bind mount of this folder).
#
# Before any job starts on this node, Kubernetes work that Slurm does not know about must be
# gone. The prolog asks the scheduler's syncer to lock the node (taint the Node, evict Pods that
# do not tolerate the lock) and blocks until it is locked. A placeholder job of sunk's (its
# SLURM_JOB_EXTRA names a Pod) asks for a strict lock. An error or a timeout fails the prolog,
# so Slurm drains the node: a job never starts on a node still shared with unknown work.
#
# Needs SUNK_HOOK_URL from $SUNK_HOOKS_ENV (default /etc/slurm/sunk-hooks.env; SUNK_LOCK_TIMEOUT,
# seconds, default 300, may be set there too) and the node secret from $SUNK_HOOK_TOKEN_FILE
# (default /etc/slurm/sunk-hooks.token), a file only root may read: the prolog runs as root,
# jobs do not, and the secret may lock any node (docs/security.md).
set -u
HOOKS_ENV=${SUNK_HOOKS_ENV:-/etc/slurm/sunk-hooks.env}
# shellcheck disable=SC1090
[ -r "$HOOKS_ENV" ] && . "$HOOKS_ENV"
TOKEN_FILE=${SUNK_HOOK_TOKEN_FILE:-/etc/slurm/sunk-hooks.token}
if [ -z "${SUNK_HOOK_TOKEN:-}" ] && [ -r "$TOKEN_FILE" ]; then
    # The first line is the current secret (more lines: older ones, still accepted).
    SUNK_HOOK_TOKEN=$(head -n 1 "$TOKEN_FILE")
fi
NODE=${SLURMD_NODENAME:-$(hostname)}
JOB=${SLURM_JOB_ID:?}
TIMEOUT=${SUNK_LOCK_TIMEOUT:-300}
case "${SLURM_JOB_EXTRA:-}" in
    sunk-pod=*|sunk-gang=*) STRICT=true ;;
    *) STRICT=false ;;
esac

log() { echo "sunk prolog, job $JOB on $NODE: $*" >&2; }

deadline=$(( $(date +%s) + TIMEOUT ))
while :; do
    left=$(( deadline - $(date +%s) ))
    if [ "$left" -le 0 ]; then
        log "the node was not locked within ${TIMEOUT}s; failing (Slurm drains the node)"
        exit 1
    fi
    [ "$left" -gt 20 ] && left=20
    answer=$(curl -sS --max-time $(( left + 10 )) -X POST \
        -H "Authorization: Bearer ${SUNK_HOOK_TOKEN:-}" -H "Content-Type: application/json" \
        --data "{\"job_id\": $JOB, \"strict\": $STRICT}" -w '\n%{http_code}' \
        "${SUNK_HOOK_URL:-http://127.0.0.1:8000}/hooks/v1/nodes/$NODE/lock?wait=$left" \
        2>&1) || answer="$answer
000"
    case "$answer" in
        *'"locked":true'*200) exit 0 ;;
        *200) ;;  # still pending: ask again (the call itself waited)
        *401|*403) log "the hook API refused our token: $answer"; exit 1 ;;
        *410) log "Slurm no longer has this job (it will not run): $answer"; exit 0 ;;
        *404|*409) log "the scheduler refused the lock: $answer"; exit 1 ;;
        *) sleep 1 ;;  # unreachable or busy: retry until the deadline
    esac
done
