#!/bin/sh
# The batch script of the placeholder job sunk submits for each Pod. Shipped with sunk and
# installed on every Slurm node (by the Helm chart; by the test bed through a bind mount).
#
# 1. Tell the scheduler the job really runs: the prolog is done and this script started. It
#    appends ": started" to the job's extra, which the scheduler polls (the batch script does
#    not see SLURM_JOB_EXTRA, so sunk passes the original value as SUNK_JOB_EXTRA), then calls
#    the hook API so the Pod is bound without waiting for the next poll.
# 2. Hold the allocation while the Pod runs.
# 3. When Slurm ends the job (scancel, preemption, time limit), SIGTERM arrives: ask the
#    scheduler to delete the Pod and block until the Pod object is gone, so Slurm cannot give
#    the node to another job while the Pod still holds it. If the Pod is still there just
#    before KillWait, drain the node (naming the Pod); Slurm then kills the job at KillWait.
#
# Needs SUNK_HOOK_URL, from $SUNK_HOOKS_ENV (default /etc/slurm/sunk-hooks.env), and from sunk
# with the job: SUNK_JOB_TOKEN (this job's own credential: it may call the hooks of this job
# only; the node secret stays with root) and SUNK_KILL_WAIT.
set -u
HOOKS_ENV=${SUNK_HOOKS_ENV:-/etc/slurm/sunk-hooks.env}
# shellcheck disable=SC1090
[ -r "$HOOKS_ENV" ] && . "$HOOKS_ENV"
KILL_WAIT=${SUNK_KILL_WAIT:-30}
MARGIN=${SUNK_DRAIN_MARGIN:-3}
JOB=$SLURM_JOB_ID
NODE=${SLURMD_NODENAME:-$(hostname)}

log() { echo "sunk placeholder job $JOB: $*" >&2; }

# hook METHOD PATH [BODY] [MAX_SECONDS]: prints the body, then the HTTP status on its own line.
hook() {
    curl -sS --max-time "${4:-10}" -X "$1" \
        -H "Authorization: Bearer ${SUNK_JOB_TOKEN:-}" -H "X-Sunk-Pod-Uid: ${SUNK_POD_UID:-}" \
        -H "Content-Type: application/json" \
        ${3:+--data "$3"} -w '\n%{http_code}' "${SUNK_HOOK_URL:-http://127.0.0.1:8000}$2" \
        2>/dev/null || echo "000"
}

drain() {
    log "Pod $SUNK_POD_NAMESPACE/$SUNK_POD_NAME still there before KillWait: draining $NODE"
    case "$(hook POST "/hooks/v1/jobs/$JOB/drain" "{\"node\":\"$NODE\"}")" in
        *200) ;;
        *) scontrol update nodename="$NODE" state=drain \
               reason="sunk: Pod $SUNK_POD_NAMESPACE/$SUNK_POD_NAME still terminating at KillWait (job $JOB)" ;;
    esac
}

on_term() {
    trap '' TERM INT  # Slurm may signal again; the handshake runs once
    deadline=$(( $(date +%s) + KILL_WAIT - MARGIN ))
    log "ending: asking the scheduler to delete Pod $SUNK_POD_NAMESPACE/$SUNK_POD_NAME"
    hook POST "/hooks/v1/jobs/$JOB/terminating" "{\"node\":\"$NODE\"}" >/dev/null
    while :; do
        left=$(( deadline - $(date +%s) ))
        [ "$left" -gt 0 ] || break
        [ "$left" -gt 10 ] && left=10
        answer=$(hook GET "/hooks/v1/jobs/$JOB/pod?wait=$left" "" $(( left + 5 )))
        case "$answer" in
            *'"gone":true'*) log "Pod gone: releasing the node"; exit 0 ;;
            *404) log "the scheduler does not know this job: releasing the node"; exit 0 ;;
            *200) ;;
            *) sleep 1 ;;  # the scheduler is unreachable or busy: keep trying until KillWait
        esac
    done
    drain
    sleep "$(( MARGIN + 60 ))"  # Slurm kills the job at KillWait
    exit 1
}

# Before ": started" is written: the Pod may be bound as soon as it is, before the started
# hook answers, and a job preempted then must not let go of its node while its Pod runs
# (a shell without the trap dies of SIGTERM at once; with it, the trap runs once the command in
# the foreground ends).
trap on_term TERM INT
scontrol update jobid="$JOB" extra="${SUNK_JOB_EXTRA:?not set by sunk}: started" || {
    status=$?
    # Killed (by Slurm's SIGTERM, which missed this shell): it may have written ": started",
    # and the Pod may be bound already. The job is ending: the handshake runs.
    [ "$status" -gt 128 ] && on_term
    log "could not mark the job started (scontrol: $status)"
    exit 1
}
# The scheduler polls Slurm and would see it anyway; telling it binds the Pod sooner.
answer=$(hook POST "/hooks/v1/jobs/$JOB/started" "{\"node\":\"$NODE\"}" 5)
case "$answer" in
    *200) ;;
    *) log "the started hook answered: $answer (the scheduler's poll binds the Pod anyway)" ;;
esac
sleep infinity &
wait
# `wait` returns when a trapped signal arrives, and the trap does the rest (it exits). Here
# only if the sleep ended while this shell heard no signal: Slurm signals a job's processes one
# by one, from a look at them, and this shell can be missed (seen: a job cancelled just after
# it started, its sleep killed, the script ended 0 with no handshake and its node given away
# while its Pod ran). The job is ending all the same: the handshake runs.
on_term
