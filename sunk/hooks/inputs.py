"""What the hook API takes as input, and the messages for what it refuses (pure).

The checks are those the API has always made (it was served by Litestar: bodies checked as
pydantic models, path and query by msgspec), by the same libraries: the same inputs are
accepted, converted the same way, and refused with the same messages, so a Slurm script or a
person reading a 400 sees no change. Bodies are lenient as pydantic is: ``"job_id": "12"`` or
``12.0`` is job 12, ``"strict": "yes"`` or ``1`` is true.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

import msgspec
import pydantic

MAX_WAIT = 30.0
NODE_PATTERN = r"^[A-Za-z0-9._-]{1,256}$"
MAX_JOB_ID = 2**32 - 1

#: A path's job id, a path's node name, a query's ``wait``.
JobId = Annotated[int, msgspec.Meta(ge=1, le=MAX_JOB_ID)]
Node = Annotated[str, msgspec.Meta(pattern=NODE_PATTERN)]
Wait = Annotated[float, msgspec.Meta(ge=0, le=MAX_WAIT)]

#: One refused input: ``message``, and ``key`` (which input) and ``source`` when known.
ErrorMessage = dict[str, str]


class JobNodeRequest(pydantic.BaseModel):
    """Sent by the placeholder job: which Slurm node it runs on."""

    node: str = pydantic.Field(min_length=1, max_length=256, pattern=NODE_PATTERN)


class LockRequestBody(pydantic.BaseModel):
    """Sent by the prolog: the job that is about to start on the node; ``strict`` for a
    placeholder job of sunk's (no other workload may stay)."""

    job_id: int = pydantic.Field(ge=1, le=MAX_JOB_ID)
    strict: bool = False


_Body = TypeVar("_Body", JobNodeRequest, LockRequestBody)


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
    return _validated(JobNodeRequest, data)


def lock_request(data: object) -> LockRequestBody | list[ErrorMessage]:
    return _validated(LockRequestBody, data)


def _validated(model: type[_Body], data: object) -> _Body | list[ErrorMessage]:
    """``data`` as ``model``, or pydantic's messages, each with the field it is about."""
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as exc:
        return [{"message": error["msg"], "key": str(error["loc"][0])} if error["loc"]
                else {"message": error["msg"]} for error in exc.errors()]
