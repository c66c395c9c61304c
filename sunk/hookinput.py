"""What the hook API takes as input, and the messages for what it refuses (pure).

The checks are those the API has always made (it was served by Litestar, bodies checked as
pydantic models, path and query by msgspec): the same inputs are accepted, converted the same
way, and refused with the same messages, so a Slurm script or a person reading a 400 sees no
change. Bodies are lenient as pydantic was: ``"job_id": "12"`` or ``12.0`` is job 12,
``"strict": "yes"`` or ``1`` is true. Path and query parameters are checked by msgspec.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Final

import msgspec

MAX_WAIT = 30.0
NODE_PATTERN = r"^[A-Za-z0-9._-]{1,256}$"
MAX_JOB_ID = 2**32 - 1

#: A path's job id, a path's node name, a query's ``wait``.
JobId = Annotated[int, msgspec.Meta(ge=1, le=MAX_JOB_ID)]
Node = Annotated[str, msgspec.Meta(pattern=NODE_PATTERN)]
Wait = Annotated[float, msgspec.Meta(ge=0, le=MAX_WAIT)]

#: One refused input: ``message``, and ``key`` (which input) and ``source`` when known.
ErrorMessage = dict[str, str]


class JobNodeRequest(msgspec.Struct, frozen=True):
    """Sent by the placeholder job: which Slurm node it runs on."""

    node: str


class LockRequestBody(msgspec.Struct, frozen=True):
    """Sent by the prolog: the job that is about to start on the node; ``strict`` for a
    placeholder job of sunk's (no other workload may stay)."""

    job_id: int
    strict: bool = False


class LockStatus(msgspec.Struct, frozen=True):
    node: str
    state: str  # false | pending | locked | locked_strict
    locked: bool


class PodStatus(msgspec.Struct, frozen=True):
    pod: str  # namespace/name of the job's Pod
    gone: bool  # whether the Pod object no longer exists


def check(value: object, kind: Any, key: str) -> tuple[Any, ErrorMessage | None]:
    """``value`` as ``kind`` (JobId, Node, Wait; a query's text converted), or msgspec's message
    without its location."""
    try:
        return msgspec.convert(value, kind, strict=False), None
    except msgspec.ValidationError as exc:
        return None, {"message": str(exc).split(" - ", 1)[0], "key": key}


def job_node_request(data: object) -> JobNodeRequest | list[ErrorMessage]:
    if not isinstance(data, dict):
        return [{"message": "Input should be a valid dictionary or instance of JobNodeRequest"}]
    if "node" not in data:
        return [{"message": "Field required", "key": "node"}]
    node = data["node"]
    if not isinstance(node, str):
        message = "Input should be a valid string"
    elif not node:
        message = "String should have at least 1 character"
    elif len(node) > 256:
        message = "String should have at most 256 characters"
    elif _NODE_BODY.fullmatch(node) is None:
        message = f"String should match pattern '{NODE_PATTERN}'"
    else:
        return JobNodeRequest(node)
    return [{"message": message, "key": "node"}]


def lock_request(data: object) -> LockRequestBody | list[ErrorMessage]:
    if not isinstance(data, dict):
        return [{"message": "Input should be a valid dictionary or instance of LockRequestBody"}]
    errors: list[ErrorMessage] = []
    job_id = 0
    if "job_id" not in data:
        errors.append({"message": "Field required", "key": "job_id"})
    else:
        try:
            job_id = _lenient_int(data["job_id"])
            if job_id < 1:
                raise _Refused("Input should be greater than or equal to 1")
            if job_id > MAX_JOB_ID:
                raise _Refused(f"Input should be less than or equal to {MAX_JOB_ID}")
        except _Refused as refused:
            errors.append({"message": refused.message, "key": "job_id"})
    strict = False
    if "strict" in data:
        try:
            strict = _lenient_bool(data["strict"])
        except _Refused as refused:
            errors.append({"message": refused.message, "key": "strict"})
    return errors or LockRequestBody(job_id, strict)


class _Refused(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# pydantic's rules (its lax mode, which it used for the bodies), written out.
_NODE_BODY = re.compile(r"[A-Za-z0-9._-]{1,256}")
#: An integer in text: sign, digits (single underscores between them), and ``.0...``.
_INT_TEXT = re.compile(r"[+-]?([0-9]+(?:_[0-9]+)*)(?:\.0+)?")
#: What pydantic strips around an integer in text (Unicode's White_Space).
_SPACE: Final = ("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
                 "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
_MAX_DIGITS = 4300
_BOOL_TEXT = {"0": False, "off": False, "f": False, "false": False, "n": False, "no": False,
              "1": True, "on": True, "t": True, "true": True, "y": True, "yes": True}
_NOT_INT = "Input should be a valid integer, unable to parse string as an integer"
_TOO_BIG = "Unable to parse input string as an integer, exceeded maximum size"
_NOT_BOOL = "Input should be a valid boolean, unable to interpret input"


def _lenient_int(value: object) -> int:
    if isinstance(value, bool | int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _Refused("Input should be a finite number")
        if not value.is_integer():
            raise _Refused("Input should be a valid integer, got a number with a fractional "
                           "part")
        if abs(value) >= 2.0**63:
            raise _Refused(_TOO_BIG)
        return int(value)
    if isinstance(value, str):
        text = value.strip(_SPACE)
        match = _INT_TEXT.fullmatch(text)
        if match is None:
            raise _Refused(_NOT_INT)
        digits = match.group(1).replace("_", "").lstrip("0")
        if len(digits) > _MAX_DIGITS:
            raise _Refused(_TOO_BIG)
        number = int(digits or "0")
        return -number if text.startswith("-") else number
    raise _Refused("Input should be a valid integer")


def _lenient_bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        if value in (0, 1):
            return bool(value)
        if -(2**63) <= value < 2**63:  # what pydantic reads as an integer
            raise _Refused(_NOT_BOOL)
    elif isinstance(value, float):
        if value in (0.0, 1.0):
            return bool(value)
        if value.is_integer() and abs(value) < 2.0**63:
            raise _Refused(_NOT_BOOL)
    elif isinstance(value, str):
        answer = _BOOL_TEXT.get(value.lower())
        if answer is None:
            raise _Refused(_NOT_BOOL)
        return answer
    raise _Refused("Input should be a valid boolean")
