"""The engine's memo: one evaluation for Pods that read the same to every policy.

Pods made from one template (a Deployment, a batch Job) differ mostly in fields no policy reads:
name, uid, resourceVersion, creationTimestamp. The compiler records the paths each expression
reads under ``object`` and ``namespaceObject`` (:mod:`sunk.policy.cel.reads`); params and
settings are fixed for an engine. A Pod's key is what walking each path finds (the value at its
end, or where and why the walk stopped), JSON-encoded and hashed; two Pods with one key give
the same decision, so the engine evaluates the first and reuses its decision for the others.

The key is computed only for input the evaluator would read exactly as JSON says: plain JSON
values (no NaN or infinity, which JSON writes as null; only string keys; no sets, tuples or
other types the encoder would turn into JSON of another type), integers that fit 64 bits and
nesting of at most :data:`MAX_DEPTH` levels. For anything else (which converting to CEL values
may refuse) there is no key, and the engine evaluates the Pod without the memo.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Final

import msgspec

from sunk.policy.cel.reads import Path

MAX_ENTRIES: Final = 1024
"""Decisions kept per engine (least recently used first out)."""

MAX_DEPTH: Final = 64
"""Deeper input is not memoised: converting it to CEL values could exhaust the stack."""

_encode: Final = msgspec.json.Encoder().encode
_decode: Final = msgspec.json.Decoder().decode

# Walk results: the value found, a missing key (at which step) or a value that is not a map.
_FOUND: Final = 0
_MISSING: Final = 1
_NOT_A_MAP: Final = 2

# Bytes that matter to the checks: digits (a run of 19 may be an integer beyond 64 bits) and
# brackets (the nesting depth); everything else, including the insides of strings, is dropped.
_ALL: Final = bytes(range(256))
_DIGIT_RUN: Final = b"0" * 19
_ONLY_DIGITS: Final = bytes.maketrans(_ALL, bytes(48 if 48 <= b <= 57 else 46 for b in _ALL))
_BRACKETS: Final = bytes.maketrans(b"{}", b"[]")
_NOT_BRACKETS: Final = bytes(b for b in _ALL if b not in b"[]{}")


class Memo:
    """Decisions by key, at most ``size`` of them, least recently used evicted first."""

    def __init__(self, size: int = MAX_ENTRIES) -> None:
        self.size = size
        self._entries: OrderedDict[bytes, Any] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: bytes) -> Any:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    def put(self, key: bytes, value: Any) -> None:
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)


class KeyMaker:
    """The memo key of a Pod and its Namespace, for one engine's read paths."""

    def __init__(self, paths: Mapping[str, tuple[Path, ...]]) -> None:
        self.object_paths = paths.get("object", ())
        self.namespace_paths = paths.get("namespaceObject", ())

    def key(self, pod: Any, namespace: Any) -> bytes | None:
        """The key, or None if the input is not plain JSON that the evaluator reads as such.

        ``pod`` is the Pod as the policies see it (without managedFields) and ``namespace``
        the Namespace or None.
        """
        try:
            if not self.is_plain(pod, namespace):
                return None
            found = [walk(pod, path) for path in self.object_paths]
            found += [walk(namespace, path) for path in self.namespace_paths]
            return hashlib.blake2b(_encode(found), digest_size=16).digest()
        except (TypeError, ValueError, OverflowError, RecursionError, msgspec.MsgspecError):
            return None

    @staticmethod
    def is_plain(pod: Any, namespace: Any) -> bool:
        """Whether the Pod and Namespace are plain JSON data that policies can read as they are
        (see :mod:`sunk.policy.cel.native`), with no integer beyond 64 bits."""
        try:
            return _plain(_encode([pod, namespace]), [pod, namespace])
        except (TypeError, ValueError, OverflowError, RecursionError, msgspec.MsgspecError):
            return False


def walk(value: Any, path: Path) -> list[Any]:
    """What following ``path`` from ``value`` finds, as the evaluator's field selections do."""
    for step, name in enumerate(path):
        if not isinstance(value, dict):
            return [_NOT_A_MAP, step, value]
        if name not in value:
            return [_MISSING, step]
        value = value[name]
    return [_FOUND, value]


def _plain(encoded: bytes, value: Any) -> bool:
    """Whether ``value`` (encoded as ``encoded``) is JSON data, read back as it is."""
    if _DIGIT_RUN in encoded.translate(_ONLY_DIGITS) and _DIGIT_RUN in _outside_strings(
        encoded
    ).translate(_ONLY_DIGITS):
        return False  # perhaps an integer beyond 64 bits
    # Fewer brackets than the limit (strings' included) cannot nest deeper: most Pods.
    few = encoded.count(b"[") + encoded.count(b"{") <= MAX_DEPTH
    if not few and _depth(encoded) > MAX_DEPTH:
        return False
    # Equal after a round trip: no NaN, no non-string key, no set, tuple, Decimal or datetime.
    return bool(_decode(encoded) == value)


def _outside_strings(encoded: bytes) -> bytes:
    """JSON text without the contents of its strings."""
    # Escaped backslashes, then escaped quotes, go; every quote left opens or closes a string.
    text = encoded.replace(b"\\\\", b"").replace(b'\\"', b"")
    return b"".join(text.split(b'"')[::2])


def _depth(encoded: bytes) -> int:
    """The nesting depth of JSON text (strings' contents do not count)."""
    brackets = _outside_strings(encoded).translate(_BRACKETS, _NOT_BRACKETS)
    depth = 0
    while brackets:
        shorter = brackets.replace(b"[]", b"")  # the innermost level, in one pass
        if len(shorter) == len(brackets):
            return MAX_DEPTH + 1  # not balanced: cannot happen for the encoder's output
        brackets = shorter
        depth += 1
        if depth > MAX_DEPTH:
            break
    return depth
