"""What a producer publishes, what a publish answers, and what a worker is handed."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Mapping, Optional, Union

from google.protobuf import duration_pb2, timestamp_pb2

from ._errors import HarbingerError, InvalidArgument, error_for, Internal
from ._text import bad_utf8_at
from .v1 import harbinger_pb2 as pb

Seconds = Union[float, int, timedelta]
"""A duration: seconds as a number, or a timedelta."""


def seconds(d: Seconds) -> float:
    """d in seconds."""
    return d.total_seconds() if isinstance(d, timedelta) else float(d)


def duration(d: Seconds) -> duration_pb2.Duration:
    """d as a protobuf Duration, for the fields of QueueConfig and Schedule."""
    ns = round(seconds(d) * 1e9)
    out = duration_pb2.Duration()
    out.seconds, out.nanos = int(ns // 1_000_000_000), int(ns % 1_000_000_000)
    if out.seconds < 0 and out.nanos > 0:  # protobuf wants both of one sign
        out.seconds += 1
        out.nanos -= 1_000_000_000
    return out


def duration_ns(ns: int) -> duration_pb2.Duration:
    out = duration_pb2.Duration()
    out.seconds, out.nanos = divmod(ns, 1_000_000_000)
    return out


def from_duration(d: duration_pb2.Duration) -> float:
    return float(d.seconds + d.nanos / 1e9)


def timestamp(t: datetime) -> timestamp_pb2.Timestamp:
    if t.tzinfo is None:
        raise ValueError("harbinger: a naive datetime is ambiguous; give one with a time zone")
    out = timestamp_pb2.Timestamp()
    out.FromDatetime(t.astimezone(timezone.utc).replace(tzinfo=None))
    return out


@dataclass
class Message:
    """A job to publish.

    ``producer`` and ``job_type`` are part of the predictor's key: who sends
    the job and what kind of job it is. ``size_hint`` feeds its size bucket
    (0: the payload's size). ``ttl``, ``max_attempts``, ``retry_base`` and
    ``retry_max`` left unset take the queue's. ``run_at`` (a datetime with a
    time zone) or ``delay`` (on the broker's clock) keep the job invisible
    until then. ``unique_key`` makes the publish idempotent for
    ``unique_for``: another publish with the key inside the window stores
    nothing and is answered with the first job's id as a duplicate.
    """

    queue: str
    payload: bytes = b""
    producer: str = ""
    job_type: str = ""
    size_hint: int = 0
    headers: Mapping[str, str] = field(default_factory=dict)
    ttl: Optional[Seconds] = None
    max_attempts: int = 0
    run_at: Optional[datetime] = None
    delay: Optional[Seconds] = None
    retry_base: Optional[Seconds] = None
    retry_max: Optional[Seconds] = None
    unique_key: str = ""
    unique_for: Optional[Seconds] = None

    def to_proto(self) -> pb.Message:
        m = pb.Message(
            queue=self.queue, producer=self.producer, job_type=self.job_type,
            size_hint=self.size_hint, payload=bytes(self.payload), max_attempts=max(self.max_attempts, 0),
            headers=dict(self.headers), unique_key=self.unique_key,
        )
        if self.ttl is not None:
            m.ttl.CopyFrom(duration(self.ttl))
        if self.run_at is not None:
            m.run_at.CopyFrom(timestamp(self.run_at))
        if self.delay is not None:
            m.delay.CopyFrom(duration(self.delay))
        if self.retry_base is not None:
            m.retry_base.CopyFrom(duration(self.retry_base))
        if self.retry_max is not None:
            m.retry_max.CopyFrom(duration(self.retry_max))
        if self.unique_for is not None:
            m.unique_for.CopyFrom(duration(self.unique_for))
        return m


@dataclass(frozen=True)
class Limits:
    """The broker's size limits (GetLimits), all in bytes but the counts."""

    max_payload_bytes: int
    max_header_bytes: int
    max_request_bytes: int
    max_batch: int
    max_delivery_bytes: int
    max_credit: int
    max_consume_batch: int = 0
    """Most deliveries in one response, and acks and nacks in one request, on a
    Consume stream; 0 from a broker that sends and reads no batches."""

    @classmethod
    def from_proto(cls, p: pb.Limits) -> "Limits":
        return cls(p.max_payload_bytes, p.max_header_bytes, p.max_request_bytes, p.max_batch,
                   p.max_delivery_bytes, p.max_credit, p.max_consume_batch)


FALLBACK_REQUEST_BYTES = 4 << 20
"""The request limit assumed of a broker too old to answer GetLimits: gRPC's default."""

REQUEST_SLACK = 16 << 10
"""Kept free below the broker's request limit for a request's framing."""


def hard_limit(limits: Optional[Limits]) -> int:
    """The most encoded bytes one message may take, given the broker's limits."""
    req = limits.max_request_bytes if limits and limits.max_request_bytes else FALLBACK_REQUEST_BYTES
    return max(req - REQUEST_SLACK, req // 2)


def _varint_len(n: int) -> int:
    size = 1
    while n >= 0x80:
        n >>= 7
        size += 1
    return size


def message_size(m: pb.Message) -> int:
    """The bytes m adds to a PublishRequest."""
    n = int(m.ByteSize())
    return 1 + _varint_len(n) + n


def check(msg: Message, limits: Optional[Limits]) -> Optional[HarbingerError]:
    """Why the broker would refuse msg as it stands, found before sending it, or None.

    The text names the field; the caller adds which message it is.
    """
    strings = [("queue", msg.queue), ("producer", msg.producer), ("job_type", msg.job_type),
               ("unique_key", msg.unique_key)]
    for k, v in msg.headers.items():
        strings.append((f"header name {k!r}", k))
        strings.append((f"header {k!r}", v))
    for name, v in strings:
        if not isinstance(v, str):
            return InvalidArgument(f"field {name} is {type(v).__name__}, not str; not sent")
        i = bad_utf8_at(v)
        if i >= 0:
            return InvalidArgument(
                f"field {name} is not valid UTF-8 (a lone surrogate, U+{ord(v[i]):04X}, at index {i}); not sent")
    if not msg.queue:
        return InvalidArgument("field queue is empty; not sent")
    if not isinstance(msg.payload, (bytes, bytearray, memoryview)):
        return InvalidArgument(f"field payload is {type(msg.payload).__name__}, not bytes; encode it first; not sent")
    if msg.unique_key and msg.unique_for is None:
        return InvalidArgument("field unique_for is unset: a unique key needs a window; not sent")
    if limits is not None:
        if limits.max_payload_bytes and len(msg.payload) > limits.max_payload_bytes:
            return InvalidArgument(
                f"field payload is {len(msg.payload)} bytes, over the broker's limit of {limits.max_payload_bytes}; not sent")
        if limits.max_header_bytes and msg.headers:
            n = sum(len(k.encode()) + len(v.encode()) for k, v in msg.headers.items())
            if n > limits.max_header_bytes:
                return InvalidArgument(
                    f"field headers are {n} bytes, over the broker's limit of {limits.max_header_bytes}; not sent")
    return None


@dataclass(frozen=True)
class PublishResult:
    """One message's answer: its id when stored (for a duplicate of a unique job,
    the id of the job that holds the key), or why it was not stored."""

    id: str = ""
    duplicate: bool = False
    error: Optional[HarbingerError] = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @classmethod
    def from_proto(cls, r: pb.PublishResult) -> "PublishResult":
        if r.id and r.code == 0:
            return cls(id=r.id, duplicate=r.duplicate)
        if r.code == 0:  # no id and no reason: the broker broke the contract
            return cls(error=Internal("harbinger: the broker answered a message with neither an id nor a reason"))
        return cls(error=error_for(r.code, r.error))


@dataclass(frozen=True)
class Job:
    """One job handed to a worker's handler.

    ``lease`` is how long the worker has before the broker redelivers it
    (the worker renews it while the handler runs); ``predicted`` is the
    broker's guess of how long it takes, in seconds.
    """

    id: str
    queue: str
    producer: str
    job_type: str
    size_hint: int
    payload: bytes
    headers: Mapping[str, str]
    attempt: int
    published_at: datetime
    lease: float
    tier: int
    predicted: float

    @classmethod
    def from_proto(cls, d: pb.Delivery) -> "Job":
        return cls(
            id=d.id, queue=d.queue, producer=d.producer, job_type=d.job_type, size_hint=d.size_hint,
            payload=d.payload, headers=dict(d.headers), attempt=d.attempt,
            published_at=d.published_at.ToDatetime().replace(tzinfo=timezone.utc),
            lease=from_duration(d.lease), tier=d.tier, predicted=d.predicted_ms / 1000.0,
        )
