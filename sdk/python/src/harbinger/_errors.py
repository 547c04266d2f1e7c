"""Errors by gRPC status code, and the errors of a partial publish."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import grpc

_BY_VALUE: dict[int, grpc.StatusCode] = {c.value[0]: c for c in grpc.StatusCode}


def status_code(value: int) -> grpc.StatusCode:
    """The gRPC status code numbered value (UNKNOWN for a number gRPC does not define)."""
    return _BY_VALUE.get(value, grpc.StatusCode.UNKNOWN)


class HarbingerError(Exception):
    """An answer of the broker, or of this SDK on its behalf, that is not a success.

    ``code`` is the gRPC status code; every code has a subclass below, so
    ``except harbinger.NotFound`` catches exactly that answer.
    """

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return f"{self.code.name}: {self.message}"


class Cancelled(HarbingerError):
    code = grpc.StatusCode.CANCELLED


class Unknown(HarbingerError):
    code = grpc.StatusCode.UNKNOWN


class InvalidArgument(HarbingerError):
    """A request or message the broker refuses as it stands; sending it again changes nothing."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceeded(HarbingerError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class NotFound(HarbingerError):
    """No such queue, job or schedule."""

    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(HarbingerError):
    code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDenied(HarbingerError):
    """The token lacks the scope for this queue."""

    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhausted(HarbingerError):
    """A full queue, too many queues, the broker's byte budget, or a request over its limit."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPrecondition(HarbingerError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class Aborted(HarbingerError):
    code = grpc.StatusCode.ABORTED


class OutOfRange(HarbingerError):
    code = grpc.StatusCode.OUT_OF_RANGE


class Unimplemented(HarbingerError):
    code = grpc.StatusCode.UNIMPLEMENTED


class Internal(HarbingerError):
    code = grpc.StatusCode.INTERNAL


class Unavailable(HarbingerError):
    """The broker cannot be reached, is shutting down, or its disk failed; retrying later may succeed."""

    code = grpc.StatusCode.UNAVAILABLE


class DataLoss(HarbingerError):
    code = grpc.StatusCode.DATA_LOSS


class Unauthenticated(HarbingerError):
    """No token, or one the broker does not know."""

    code = grpc.StatusCode.UNAUTHENTICATED


_CLASSES: dict[grpc.StatusCode, type[HarbingerError]] = {
    c.code: c
    for c in (
        Cancelled, Unknown, InvalidArgument, DeadlineExceeded, NotFound, AlreadyExists,
        PermissionDenied, ResourceExhausted, FailedPrecondition, Aborted, OutOfRange,
        Unimplemented, Internal, Unavailable, DataLoss, Unauthenticated,
    )
}


def error_for(code: grpc.StatusCode | int, message: str) -> HarbingerError:
    """The HarbingerError subclass for code, carrying message."""
    if isinstance(code, int):
        code = status_code(code)
    return _CLASSES.get(code, Unknown)(message)


def from_rpc_error(err: grpc.RpcError) -> HarbingerError:
    """A failed call's status as a HarbingerError."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = err.details() if hasattr(err, "details") else str(err)
    return error_for(code or grpc.StatusCode.UNKNOWN, details or "")


@dataclass(frozen=True)
class FailedMessage:
    """One message of a publish that was not stored, by its index in the call."""

    index: int
    error: HarbingerError


class PublishError(HarbingerError):
    """Some messages of a publish were not stored; every other message was.

    ``stored`` maps the index of each stored message to its id, ``failed``
    lists the others with the reason. Publish only the failed ones again,
    or the stored ones are duplicated. ``code`` is the failed messages'
    code when they share one, else UNKNOWN.
    """

    def __init__(self, total: int, failed: Sequence[FailedMessage], stored: dict[int, str]) -> None:
        self.total = total
        self.failed = list(failed)
        self.stored = dict(stored)
        show = 3
        parts = [f"harbinger: {len(self.failed)} of {total} messages not stored"]
        for i, f in enumerate(self.failed):
            if i == show:
                parts.append(f"and {len(self.failed) - show} more")
                break
            parts.append(f"message {f.index}: {f.error.message}")
        super().__init__("; ".join(parts))
        codes = {f.error.code for f in self.failed}
        self.code = codes.pop() if len(codes) == 1 else grpc.StatusCode.UNKNOWN

    @property
    def ids(self) -> list[str]:
        """The stored messages' ids, in call order."""
        return [self.stored[i] for i in sorted(self.stored)]

    def __str__(self) -> str:
        return self.message


class DeadLetter(Exception):
    """Raised by a handler, sends its job to the dead-letter list at once, without further attempts.

    Its text is the dead letter's reason.
    """


class ProducerClosed(HarbingerError):
    """Publishing through a Producer that was closed."""

    code = grpc.StatusCode.FAILED_PRECONDITION

    def __init__(self, message: str = "harbinger: producer closed") -> None:
        super().__init__(message)
