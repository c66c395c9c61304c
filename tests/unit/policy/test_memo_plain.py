"""Which Pods the policies read as they are (plain JSON), the fast path."""

from __future__ import annotations

from sunk.policy.engine import without_managed_fields
from sunk.policy.memo import KeyMaker

from .pods import realistic_pod


def test_a_long_digit_run_inside_a_string_keeps_the_pod_plain() -> None:
    """Nineteen digits in a row inside a string (an image digest, a nanosecond timestamp) are not
    an integer beyond 64 bits: the Pod is still plain."""
    pod = realistic_pod()
    pod["metadata"]["annotations"]["example.com/created-ns"] = "1780000000000000000"
    assert KeyMaker.is_plain(without_managed_fields(pod), None)
