"""Who may call the hook API, and for what (pure).

Two credentials, both derived from the hook secret that only the scheduler and root on the Slurm
nodes hold:

- the **node secret** itself, in a root-only file on every Slurm node: the prolog (run by slurmd
  as root) presents it to lock a node. Root on a Slurm node can already cancel any job and drain
  any node, so it may call every hook;
- a **job credential**, ``sunk-job.<hex>``: an HMAC of the Pod a placeholder job is for (its uid,
  and the scheduler's name), handed to that job in its environment at submit time. The placeholder
  script runs as the Pod's Slurm user, so anything that user runs can read it: it is good for that
  Pod's jobs only, and only for the job hooks (started, terminating, drain, pod), never for a lock.

Rotation: the secret may list several tokens (one per line). The first mints job credentials;
every one is accepted, so running jobs keep working while the Slurm nodes move to the new one
(docs/security.md).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Sequence

JOB_PREFIX = "sunk-job."
_CONTEXT = b"sunk job credential v1\0"


class HookRefused(Exception):
    """A hook call that must be refused: ``status`` is the HTTP status, ``detail`` says why."""

    def __init__(self, status: int, detail: str, *, retry_after: int | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.retry_after = retry_after


def job_owner(scheduler: str, pod_uid: str) -> str:
    """What a job credential is bound to: one Pod of one scheduler."""
    return f"{scheduler}/{pod_uid}"


def _mac(token: str, owner: str) -> str:
    return hmac.new(token.encode(), _CONTEXT + owner.encode(), hashlib.sha256).hexdigest()


class HookKeys:
    """Checks hook credentials against the current secret(s), read through ``tokens()`` on every
    call so a rotated secret file takes effect without a restart."""

    def __init__(self, tokens: Callable[[], Sequence[str]]) -> None:
        self._tokens = tokens

    def configured(self) -> bool:
        return bool(self._tokens())

    def job_credential(self, owner: str) -> str:
        """The credential a new placeholder job gets (minted with the newest secret)."""
        tokens = self._tokens()
        if not tokens:
            raise ValueError("no hook secret configured: cannot mint a job credential")
        return JOB_PREFIX + _mac(tokens[0], owner)

    def credentials_of(self, scheduler: str) -> Callable[[str], str]:
        """A Pod's (or gang's) uid -> the credential its job gets, for jobs of ``scheduler``."""
        return lambda uid: self.job_credential(job_owner(scheduler, uid))

    def is_node_secret(self, presented: str) -> bool:
        # Compare against every token, without stopping early: timing says nothing.
        found = False
        for token in self._tokens():
            found |= hmac.compare_digest(presented.encode(), token.encode())
        return found

    def is_job_credential(self, presented: str, owner: str) -> bool:
        if not presented.startswith(JOB_PREFIX):
            return False
        found = False
        for token in self._tokens():
            found |= hmac.compare_digest(presented.encode(), (JOB_PREFIX + _mac(token, owner))
                                         .encode())
        return found


def bearer(header: str) -> str | None:
    """The token of an ``Authorization: Bearer ...`` header, or None."""
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()
