from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
NACK_ACTION_DEAD_LETTER: NackAction
NACK_ACTION_REQUEUE: NackAction
NACK_ACTION_REQUEUE_AFTER: NackAction
NACK_ACTION_RETRY: NackAction
NACK_ACTION_UNSPECIFIED: NackAction

class Ack(_message.Message):
    __slots__ = ["credit", "duration", "id"]
    CREDIT_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    credit: int
    duration: _duration_pb2.Duration
    id: str
    def __init__(self, id: _Optional[str] = ..., duration: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., credit: _Optional[int] = ...) -> None: ...

class AttachRequest(_message.Message):
    __slots__ = ["handlers", "queue"]
    HANDLERS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    handlers: int
    queue: str
    def __init__(self, queue: _Optional[str] = ..., handlers: _Optional[int] = ...) -> None: ...

class AttachResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class CancelJobRequest(_message.Message):
    __slots__ = ["id", "queue"]
    ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    id: str
    queue: str
    def __init__(self, queue: _Optional[str] = ..., id: _Optional[str] = ...) -> None: ...

class CancelJobResponse(_message.Message):
    __slots__ = ["state"]
    STATE_FIELD_NUMBER: _ClassVar[int]
    state: str
    def __init__(self, state: _Optional[str] = ...) -> None: ...

class CancelNotice(_message.Message):
    __slots__ = ["id"]
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class ConsumeBatch(_message.Message):
    __slots__ = ["acks", "extends", "nacks"]
    ACKS_FIELD_NUMBER: _ClassVar[int]
    EXTENDS_FIELD_NUMBER: _ClassVar[int]
    NACKS_FIELD_NUMBER: _ClassVar[int]
    acks: _containers.RepeatedCompositeFieldContainer[Ack]
    extends: _containers.RepeatedCompositeFieldContainer[Extend]
    nacks: _containers.RepeatedCompositeFieldContainer[Nack]
    def __init__(self, acks: _Optional[_Iterable[_Union[Ack, _Mapping]]] = ..., nacks: _Optional[_Iterable[_Union[Nack, _Mapping]]] = ..., extends: _Optional[_Iterable[_Union[Extend, _Mapping]]] = ...) -> None: ...

class ConsumeRequest(_message.Message):
    __slots__ = ["ack", "batch", "credit", "extend", "nack", "subscribe"]
    ACK_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    CREDIT_FIELD_NUMBER: _ClassVar[int]
    EXTEND_FIELD_NUMBER: _ClassVar[int]
    NACK_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBE_FIELD_NUMBER: _ClassVar[int]
    ack: Ack
    batch: ConsumeBatch
    credit: Credit
    extend: Extend
    nack: Nack
    subscribe: Subscribe
    def __init__(self, subscribe: _Optional[_Union[Subscribe, _Mapping]] = ..., credit: _Optional[_Union[Credit, _Mapping]] = ..., ack: _Optional[_Union[Ack, _Mapping]] = ..., nack: _Optional[_Union[Nack, _Mapping]] = ..., extend: _Optional[_Union[Extend, _Mapping]] = ..., batch: _Optional[_Union[ConsumeBatch, _Mapping]] = ...) -> None: ...

class ConsumeResponse(_message.Message):
    __slots__ = ["cancel", "deliveries", "delivery", "error"]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    cancel: CancelNotice
    deliveries: DeliveryBatch
    delivery: Delivery
    error: RequestError
    def __init__(self, delivery: _Optional[_Union[Delivery, _Mapping]] = ..., error: _Optional[_Union[RequestError, _Mapping]] = ..., cancel: _Optional[_Union[CancelNotice, _Mapping]] = ..., deliveries: _Optional[_Union[DeliveryBatch, _Mapping]] = ...) -> None: ...

class CountedPublish(_message.Message):
    __slots__ = ["counted", "job"]
    COUNTED_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    counted: _duration_pb2.Duration
    job: PredictRequest
    def __init__(self, job: _Optional[_Union[PredictRequest, _Mapping]] = ..., counted: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class Credit(_message.Message):
    __slots__ = ["n"]
    N_FIELD_NUMBER: _ClassVar[int]
    n: int
    def __init__(self, n: _Optional[int] = ...) -> None: ...

class DeadLetter(_message.Message):
    __slots__ = ["attempts", "dead_at", "headers", "id", "job_type", "payload", "producer", "queue", "reason"]
    class HeadersEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    DEAD_AT_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    JOB_TYPE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    attempts: int
    dead_at: _timestamp_pb2.Timestamp
    headers: _containers.ScalarMap[str, str]
    id: str
    job_type: str
    payload: bytes
    producer: str
    queue: str
    reason: str
    def __init__(self, id: _Optional[str] = ..., queue: _Optional[str] = ..., producer: _Optional[str] = ..., job_type: _Optional[str] = ..., payload: _Optional[bytes] = ..., headers: _Optional[_Mapping[str, str]] = ..., attempts: _Optional[int] = ..., reason: _Optional[str] = ..., dead_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class DeclareQueueRequest(_message.Message):
    __slots__ = ["config", "name"]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    config: QueueConfig
    name: str
    def __init__(self, name: _Optional[str] = ..., config: _Optional[_Union[QueueConfig, _Mapping]] = ...) -> None: ...

class DelayedJob(_message.Message):
    __slots__ = ["attempts", "due", "id", "job_type", "max_attempts", "producer", "published_at", "retry"]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    DUE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    JOB_TYPE_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    PUBLISHED_AT_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    attempts: int
    due: _timestamp_pb2.Timestamp
    id: str
    job_type: str
    max_attempts: int
    producer: str
    published_at: _timestamp_pb2.Timestamp
    retry: bool
    def __init__(self, id: _Optional[str] = ..., producer: _Optional[str] = ..., job_type: _Optional[str] = ..., retry: bool = ..., attempts: _Optional[int] = ..., max_attempts: _Optional[int] = ..., published_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., due: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class DeleteDeadLettersRequest(_message.Message):
    __slots__ = ["ids", "queue"]
    IDS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[str]
    queue: str
    def __init__(self, queue: _Optional[str] = ..., ids: _Optional[_Iterable[str]] = ...) -> None: ...

class DeleteDeadLettersResponse(_message.Message):
    __slots__ = ["deleted"]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: int
    def __init__(self, deleted: _Optional[int] = ...) -> None: ...

class DeleteQueueRequest(_message.Message):
    __slots__ = ["force", "name"]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    force: bool
    name: str
    def __init__(self, name: _Optional[str] = ..., force: bool = ...) -> None: ...

class DeleteQueueResponse(_message.Message):
    __slots__ = ["consumers", "dead", "delayed", "running", "waiting"]
    CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    DEAD_FIELD_NUMBER: _ClassVar[int]
    DELAYED_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    consumers: int
    dead: int
    delayed: int
    running: int
    waiting: int
    def __init__(self, waiting: _Optional[int] = ..., delayed: _Optional[int] = ..., running: _Optional[int] = ..., dead: _Optional[int] = ..., consumers: _Optional[int] = ...) -> None: ...

class DeleteScheduleRequest(_message.Message):
    __slots__ = ["name"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteScheduleResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class Delivery(_message.Message):
    __slots__ = ["attempt", "headers", "id", "job_type", "lease", "payload", "predicted_ms", "producer", "published_at", "queue", "size_hint", "tier"]
    class HeadersEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    JOB_TYPE_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_MS_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    PUBLISHED_AT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    SIZE_HINT_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    headers: _containers.ScalarMap[str, str]
    id: str
    job_type: str
    lease: _duration_pb2.Duration
    payload: bytes
    predicted_ms: float
    producer: str
    published_at: _timestamp_pb2.Timestamp
    queue: str
    size_hint: int
    tier: int
    def __init__(self, id: _Optional[str] = ..., queue: _Optional[str] = ..., producer: _Optional[str] = ..., job_type: _Optional[str] = ..., size_hint: _Optional[int] = ..., payload: _Optional[bytes] = ..., headers: _Optional[_Mapping[str, str]] = ..., attempt: _Optional[int] = ..., published_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., lease: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., tier: _Optional[int] = ..., predicted_ms: _Optional[float] = ...) -> None: ...

class DeliveryBatch(_message.Message):
    __slots__ = ["deliveries"]
    DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    deliveries: _containers.RepeatedCompositeFieldContainer[Delivery]
    def __init__(self, deliveries: _Optional[_Iterable[_Union[Delivery, _Mapping]]] = ...) -> None: ...

class DoneJob(_message.Message):
    __slots__ = ["attempts", "ended_at", "id", "job_type", "producer", "state", "took"]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    JOB_TYPE_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TOOK_FIELD_NUMBER: _ClassVar[int]
    attempts: int
    ended_at: _timestamp_pb2.Timestamp
    id: str
    job_type: str
    producer: str
    state: str
    took: _duration_pb2.Duration
    def __init__(self, id: _Optional[str] = ..., producer: _Optional[str] = ..., job_type: _Optional[str] = ..., state: _Optional[str] = ..., attempts: _Optional[int] = ..., ended_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., took: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ExportHistoryRequest(_message.Message):
    __slots__ = ["queue", "window"]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    queue: str
    window: _duration_pb2.Duration
    def __init__(self, queue: _Optional[str] = ..., window: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class Extend(_message.Message):
    __slots__ = ["id", "lease"]
    ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    id: str
    lease: _duration_pb2.Duration
    def __init__(self, id: _Optional[str] = ..., lease: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ["id", "queue"]
    ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    id: str
    queue: str
    def __init__(self, queue: _Optional[str] = ..., id: _Optional[str] = ...) -> None: ...

class GetLimitsRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class GroupStats(_message.Message):
    __slots__ = ["limit", "name", "running", "throttled", "waiting", "weight", "work_seconds", "work_share"]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    THROTTLED_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    WORK_SECONDS_FIELD_NUMBER: _ClassVar[int]
    WORK_SHARE_FIELD_NUMBER: _ClassVar[int]
    limit: int
    name: str
    running: int
    throttled: int
    waiting: int
    weight: int
    work_seconds: float
    work_share: float
    def __init__(self, name: _Optional[str] = ..., weight: _Optional[int] = ..., running: _Optional[int] = ..., waiting: _Optional[int] = ..., limit: _Optional[int] = ..., work_share: _Optional[float] = ..., work_seconds: _Optional[float] = ..., throttled: _Optional[int] = ...) -> None: ...

class HistoryChunk(_message.Message):
    __slots__ = ["data"]
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...

class JobInfo(_message.Message):
    __slots__ = ["attempts", "cancelled", "cold", "consumer", "dead_at", "due", "ended_at", "enqueued", "expires", "headers", "id", "job_type", "lease_deadline", "leased", "long", "max_attempts", "payload", "predicted_ms", "producer", "published_at", "queue", "reason", "state", "tier", "took"]
    class HeadersEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    COLD_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_FIELD_NUMBER: _ClassVar[int]
    DEAD_AT_FIELD_NUMBER: _ClassVar[int]
    DUE_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    ENQUEUED_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    JOB_TYPE_FIELD_NUMBER: _ClassVar[int]
    LEASED_FIELD_NUMBER: _ClassVar[int]
    LEASE_DEADLINE_FIELD_NUMBER: _ClassVar[int]
    LONG_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_MS_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    PUBLISHED_AT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    TOOK_FIELD_NUMBER: _ClassVar[int]
    attempts: int
    cancelled: bool
    cold: bool
    consumer: str
    dead_at: _timestamp_pb2.Timestamp
    due: _timestamp_pb2.Timestamp
    ended_at: _timestamp_pb2.Timestamp
    enqueued: _timestamp_pb2.Timestamp
    expires: _timestamp_pb2.Timestamp
    headers: _containers.ScalarMap[str, str]
    id: str
    job_type: str
    lease_deadline: _timestamp_pb2.Timestamp
    leased: _timestamp_pb2.Timestamp
    long: bool
    max_attempts: int
    payload: bytes
    predicted_ms: float
    producer: str
    published_at: _timestamp_pb2.Timestamp
    queue: str
    reason: str
    state: str
    tier: int
    took: _duration_pb2.Duration
    def __init__(self, id: _Optional[str] = ..., queue: _Optional[str] = ..., producer: _Optional[str] = ..., job_type: _Optional[str] = ..., state: _Optional[str] = ..., payload: _Optional[bytes] = ..., headers: _Optional[_Mapping[str, str]] = ..., attempts: _Optional[int] = ..., max_attempts: _Optional[int] = ..., published_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., tier: _Optional[int] = ..., predicted_ms: _Optional[float] = ..., long: bool = ..., cold: bool = ..., enqueued: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., expires: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., due: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., consumer: _Optional[str] = ..., leased: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., lease_deadline: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., reason: _Optional[str] = ..., dead_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., cancelled: bool = ..., ended_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., took: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class KeyStats(_message.Message):
    __slots__ = ["cold", "count", "ewma_ms", "job_type", "long", "mae_ms", "p50_ms", "p99_ms", "producer", "scored", "size_bucket", "spread_gated", "tier", "tier_accuracy"]
    COLD_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    EWMA_MS_FIELD_NUMBER: _ClassVar[int]
    JOB_TYPE_FIELD_NUMBER: _ClassVar[int]
    LONG_FIELD_NUMBER: _ClassVar[int]
    MAE_MS_FIELD_NUMBER: _ClassVar[int]
    P50_MS_FIELD_NUMBER: _ClassVar[int]
    P99_MS_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    SCORED_FIELD_NUMBER: _ClassVar[int]
    SIZE_BUCKET_FIELD_NUMBER: _ClassVar[int]
    SPREAD_GATED_FIELD_NUMBER: _ClassVar[int]
    TIER_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    cold: bool
    count: int
    ewma_ms: float
    job_type: str
    long: bool
    mae_ms: float
    p50_ms: float
    p99_ms: float
    producer: str
    scored: int
    size_bucket: int
    spread_gated: bool
    tier: int
    tier_accuracy: float
    def __init__(self, producer: _Optional[str] = ..., job_type: _Optional[str] = ..., size_bucket: _Optional[int] = ..., count: _Optional[int] = ..., ewma_ms: _Optional[float] = ..., p50_ms: _Optional[float] = ..., p99_ms: _Optional[float] = ..., tier: _Optional[int] = ..., cold: bool = ..., spread_gated: bool = ..., mae_ms: _Optional[float] = ..., tier_accuracy: _Optional[float] = ..., scored: _Optional[int] = ..., long: bool = ...) -> None: ...

class Limits(_message.Message):
    __slots__ = ["max_batch", "max_consume_batch", "max_credit", "max_delivery_bytes", "max_header_bytes", "max_payload_bytes", "max_request_bytes"]
    MAX_BATCH_FIELD_NUMBER: _ClassVar[int]
    MAX_CONSUME_BATCH_FIELD_NUMBER: _ClassVar[int]
    MAX_CREDIT_FIELD_NUMBER: _ClassVar[int]
    MAX_DELIVERY_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_HEADER_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_PAYLOAD_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_REQUEST_BYTES_FIELD_NUMBER: _ClassVar[int]
    max_batch: int
    max_consume_batch: int
    max_credit: int
    max_delivery_bytes: int
    max_header_bytes: int
    max_payload_bytes: int
    max_request_bytes: int
    def __init__(self, max_payload_bytes: _Optional[int] = ..., max_header_bytes: _Optional[int] = ..., max_request_bytes: _Optional[int] = ..., max_batch: _Optional[int] = ..., max_delivery_bytes: _Optional[int] = ..., max_credit: _Optional[int] = ..., max_consume_batch: _Optional[int] = ...) -> None: ...

class ListDeadLettersRequest(_message.Message):
    __slots__ = ["limit", "queue"]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    limit: int
    queue: str
    def __init__(self, queue: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class ListDeadLettersResponse(_message.Message):
    __slots__ = ["dead_letters"]
    DEAD_LETTERS_FIELD_NUMBER: _ClassVar[int]
    dead_letters: _containers.RepeatedCompositeFieldContainer[DeadLetter]
    def __init__(self, dead_letters: _Optional[_Iterable[_Union[DeadLetter, _Mapping]]] = ...) -> None: ...

class ListGroupsRequest(_message.Message):
    __slots__ = ["limit", "queue"]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    limit: int
    queue: str
    def __init__(self, queue: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class ListGroupsResponse(_message.Message):
    __slots__ = ["group_count", "groups", "reserved", "throttled"]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    GROUP_COUNT_FIELD_NUMBER: _ClassVar[int]
    RESERVED_FIELD_NUMBER: _ClassVar[int]
    THROTTLED_FIELD_NUMBER: _ClassVar[int]
    group_count: int
    groups: _containers.RepeatedCompositeFieldContainer[GroupStats]
    reserved: int
    throttled: int
    def __init__(self, groups: _Optional[_Iterable[_Union[GroupStats, _Mapping]]] = ..., group_count: _Optional[int] = ..., throttled: _Optional[int] = ..., reserved: _Optional[int] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ["limit", "offset", "queue"]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    limit: int
    offset: int
    queue: str
    def __init__(self, queue: _Optional[str] = ..., limit: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ["dead", "dead_total", "delayed", "delayed_total", "done", "done_total", "running", "running_total", "waiting", "waiting_total"]
    DEAD_FIELD_NUMBER: _ClassVar[int]
    DEAD_TOTAL_FIELD_NUMBER: _ClassVar[int]
    DELAYED_FIELD_NUMBER: _ClassVar[int]
    DELAYED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    DONE_TOTAL_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    RUNNING_TOTAL_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    WAITING_TOTAL_FIELD_NUMBER: _ClassVar[int]
    dead: _containers.RepeatedCompositeFieldContainer[DeadLetter]
    dead_total: int
    delayed: _containers.RepeatedCompositeFieldContainer[DelayedJob]
    delayed_total: int
    done: _containers.RepeatedCompositeFieldContainer[DoneJob]
    done_total: int
    running: _containers.RepeatedCompositeFieldContainer[RunningJob]
    running_total: int
    waiting: _containers.RepeatedCompositeFieldContainer[WaitingJob]
    waiting_total: int
    def __init__(self, waiting: _Optional[_Iterable[_Union[WaitingJob, _Mapping]]] = ..., running: _Optional[_Iterable[_Union[RunningJob, _Mapping]]] = ..., delayed: _Optional[_Iterable[_Union[DelayedJob, _Mapping]]] = ..., dead: _Optional[_Iterable[_Union[DeadLetter, _Mapping]]] = ..., done: _Optional[_Iterable[_Union[DoneJob, _Mapping]]] = ..., waiting_total: _Optional[int] = ..., running_total: _Optional[int] = ..., delayed_total: _Optional[int] = ..., dead_total: _Optional[int] = ..., done_total: _Optional[int] = ...) -> None: ...

class ListKeysRequest(_message.Message):
    __slots__ = ["limit", "queue"]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    limit: int
    queue: str
    def __init__(self, queue: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class ListKeysResponse(_message.Message):
    __slots__ = ["keys"]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedCompositeFieldContainer[KeyStats]
    def __init__(self, keys: _Optional[_Iterable[_Union[KeyStats, _Mapping]]] = ...) -> None: ...

class ListQueuesRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ListQueuesResponse(_message.Message):
    __slots__ = ["queues"]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[QueueInfo]
    def __init__(self, queues: _Optional[_Iterable[_Union[QueueInfo, _Mapping]]] = ...) -> None: ...

class ListSchedulesRequest(_message.Message):
    __slots__ = ["after"]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    after: str
    def __init__(self, after: _Optional[str] = ...) -> None: ...

class ListSchedulesResponse(_message.Message):
    __slots__ = ["next", "schedules"]
    NEXT_FIELD_NUMBER: _ClassVar[int]
    SCHEDULES_FIELD_NUMBER: _ClassVar[int]
    next: str
    schedules: _containers.RepeatedCompositeFieldContainer[Schedule]
    def __init__(self, schedules: _Optional[_Iterable[_Union[Schedule, _Mapping]]] = ..., next: _Optional[str] = ...) -> None: ...

class Message(_message.Message):
    __slots__ = ["delay", "headers", "job_type", "max_attempts", "payload", "producer", "queue", "retry_base", "retry_max", "run_at", "size_hint", "ttl", "unique_for", "unique_key"]
    class HeadersEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    DELAY_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    JOB_TYPE_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    RETRY_BASE_FIELD_NUMBER: _ClassVar[int]
    RETRY_MAX_FIELD_NUMBER: _ClassVar[int]
    RUN_AT_FIELD_NUMBER: _ClassVar[int]
    SIZE_HINT_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    UNIQUE_FOR_FIELD_NUMBER: _ClassVar[int]
    UNIQUE_KEY_FIELD_NUMBER: _ClassVar[int]
    delay: _duration_pb2.Duration
    headers: _containers.ScalarMap[str, str]
    job_type: str
    max_attempts: int
    payload: bytes
    producer: str
    queue: str
    retry_base: _duration_pb2.Duration
    retry_max: _duration_pb2.Duration
    run_at: _timestamp_pb2.Timestamp
    size_hint: int
    ttl: _duration_pb2.Duration
    unique_for: _duration_pb2.Duration
    unique_key: str
    def __init__(self, queue: _Optional[str] = ..., producer: _Optional[str] = ..., job_type: _Optional[str] = ..., size_hint: _Optional[int] = ..., payload: _Optional[bytes] = ..., ttl: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., max_attempts: _Optional[int] = ..., headers: _Optional[_Mapping[str, str]] = ..., run_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., delay: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., retry_base: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., retry_max: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., unique_key: _Optional[str] = ..., unique_for: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class Nack(_message.Message):
    __slots__ = ["action", "credit", "delay", "id", "reason"]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    CREDIT_FIELD_NUMBER: _ClassVar[int]
    DELAY_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    action: NackAction
    credit: int
    delay: _duration_pb2.Duration
    id: str
    reason: str
    def __init__(self, id: _Optional[str] = ..., action: _Optional[_Union[NackAction, str]] = ..., delay: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., reason: _Optional[str] = ..., credit: _Optional[int] = ...) -> None: ...

class ObserveRequest(_message.Message):
    __slots__ = ["dropped", "duration", "job_type", "producer", "queue", "size_hint", "stamp"]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    JOB_TYPE_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    SIZE_HINT_FIELD_NUMBER: _ClassVar[int]
    STAMP_FIELD_NUMBER: _ClassVar[int]
    dropped: bool
    duration: _duration_pb2.Duration
    job_type: str
    producer: str
    queue: str
    size_hint: int
    stamp: Stamp
    def __init__(self, queue: _Optional[str] = ..., producer: _Optional[str] = ..., job_type: _Optional[str] = ..., size_hint: _Optional[int] = ..., duration: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., stamp: _Optional[_Union[Stamp, _Mapping]] = ..., dropped: bool = ...) -> None: ...

class ObserveResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class PauseQueueRequest(_message.Message):
    __slots__ = ["name", "paused"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    name: str
    paused: bool
    def __init__(self, name: _Optional[str] = ..., paused: bool = ...) -> None: ...

class PauseScheduleRequest(_message.Message):
    __slots__ = ["name", "paused"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    name: str
    paused: bool
    def __init__(self, name: _Optional[str] = ..., paused: bool = ...) -> None: ...

class PredictRequest(_message.Message):
    __slots__ = ["job_type", "producer", "queue", "size_hint"]
    JOB_TYPE_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    SIZE_HINT_FIELD_NUMBER: _ClassVar[int]
    job_type: str
    producer: str
    queue: str
    size_hint: int
    def __init__(self, queue: _Optional[str] = ..., producer: _Optional[str] = ..., job_type: _Optional[str] = ..., size_hint: _Optional[int] = ...) -> None: ...

class PredictResponse(_message.Message):
    __slots__ = ["amqp_priority", "cold", "hold", "long", "predicted_ms", "spread_gated", "tier"]
    AMQP_PRIORITY_FIELD_NUMBER: _ClassVar[int]
    COLD_FIELD_NUMBER: _ClassVar[int]
    HOLD_FIELD_NUMBER: _ClassVar[int]
    LONG_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_MS_FIELD_NUMBER: _ClassVar[int]
    SPREAD_GATED_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    amqp_priority: int
    cold: bool
    hold: _duration_pb2.Duration
    long: bool
    predicted_ms: float
    spread_gated: bool
    tier: int
    def __init__(self, tier: _Optional[int] = ..., amqp_priority: _Optional[int] = ..., predicted_ms: _Optional[float] = ..., cold: bool = ..., spread_gated: bool = ..., long: bool = ..., hold: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class PublishRequest(_message.Message):
    __slots__ = ["messages"]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    def __init__(self, messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ...) -> None: ...

class PublishResponse(_message.Message):
    __slots__ = ["results"]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[PublishResult]
    def __init__(self, results: _Optional[_Iterable[_Union[PublishResult, _Mapping]]] = ...) -> None: ...

class PublishResult(_message.Message):
    __slots__ = ["code", "duplicate", "error", "id"]
    CODE_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    code: int
    duplicate: bool
    error: str
    id: str
    def __init__(self, id: _Optional[str] = ..., code: _Optional[int] = ..., error: _Optional[str] = ..., duplicate: bool = ...) -> None: ...

class PurgeQueueRequest(_message.Message):
    __slots__ = ["name"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class PurgeQueueResponse(_message.Message):
    __slots__ = ["purged"]
    PURGED_FIELD_NUMBER: _ClassVar[int]
    purged: int
    def __init__(self, purged: _Optional[int] = ...) -> None: ...

class QueueConfig(_message.Message):
    __slots__ = ["aging", "aging_off", "credit", "default_ttl", "group_by", "group_weights", "keep_done", "lease", "limits", "max_attempts", "max_depth", "max_in_flight", "no_credit", "no_reserve", "policy", "rate_limits", "reserve", "reserve_above", "reserve_window", "retry_base", "retry_jitter", "retry_max", "shadow", "static_tiers", "tiers", "weights"]
    class GroupWeightsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class StaticTiersEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    AGING_FIELD_NUMBER: _ClassVar[int]
    AGING_OFF_FIELD_NUMBER: _ClassVar[int]
    CREDIT_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_TTL_FIELD_NUMBER: _ClassVar[int]
    GROUP_BY_FIELD_NUMBER: _ClassVar[int]
    GROUP_WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    KEEP_DONE_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    MAX_DEPTH_FIELD_NUMBER: _ClassVar[int]
    MAX_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    NO_CREDIT_FIELD_NUMBER: _ClassVar[int]
    NO_RESERVE_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMITS_FIELD_NUMBER: _ClassVar[int]
    RESERVE_ABOVE_FIELD_NUMBER: _ClassVar[int]
    RESERVE_FIELD_NUMBER: _ClassVar[int]
    RESERVE_WINDOW_FIELD_NUMBER: _ClassVar[int]
    RETRY_BASE_FIELD_NUMBER: _ClassVar[int]
    RETRY_JITTER_FIELD_NUMBER: _ClassVar[int]
    RETRY_MAX_FIELD_NUMBER: _ClassVar[int]
    SHADOW_FIELD_NUMBER: _ClassVar[int]
    STATIC_TIERS_FIELD_NUMBER: _ClassVar[int]
    TIERS_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    aging: _containers.RepeatedCompositeFieldContainer[_duration_pb2.Duration]
    aging_off: bool
    credit: _duration_pb2.Duration
    default_ttl: _duration_pb2.Duration
    group_by: str
    group_weights: _containers.ScalarMap[str, int]
    keep_done: int
    lease: _duration_pb2.Duration
    limits: _containers.RepeatedScalarFieldContainer[str]
    max_attempts: int
    max_depth: int
    max_in_flight: int
    no_credit: bool
    no_reserve: bool
    policy: str
    rate_limits: _containers.RepeatedScalarFieldContainer[str]
    reserve: int
    reserve_above: float
    reserve_window: _duration_pb2.Duration
    retry_base: _duration_pb2.Duration
    retry_jitter: float
    retry_max: _duration_pb2.Duration
    shadow: bool
    static_tiers: _containers.ScalarMap[str, int]
    tiers: int
    weights: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, policy: _Optional[str] = ..., tiers: _Optional[int] = ..., weights: _Optional[_Iterable[int]] = ..., aging: _Optional[_Iterable[_Union[_duration_pb2.Duration, _Mapping]]] = ..., aging_off: bool = ..., static_tiers: _Optional[_Mapping[str, int]] = ..., max_depth: _Optional[int] = ..., max_attempts: _Optional[int] = ..., lease: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., default_ttl: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., shadow: bool = ..., retry_base: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., retry_max: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., retry_jitter: _Optional[float] = ..., max_in_flight: _Optional[int] = ..., keep_done: _Optional[int] = ..., group_by: _Optional[str] = ..., group_weights: _Optional[_Mapping[str, int]] = ..., limits: _Optional[_Iterable[str]] = ..., rate_limits: _Optional[_Iterable[str]] = ..., reserve: _Optional[int] = ..., no_reserve: bool = ..., reserve_above: _Optional[float] = ..., reserve_window: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., credit: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., no_credit: bool = ...) -> None: ...

class QueueInfo(_message.Message):
    __slots__ = ["acked", "config", "consumers", "dead_letters", "delayed", "depth_per_tier", "in_flight", "name", "oldest_wait", "paused", "published", "ready", "run_p50", "run_p99", "wait_p50", "wait_p99"]
    ACKED_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERS_FIELD_NUMBER: _ClassVar[int]
    DELAYED_FIELD_NUMBER: _ClassVar[int]
    DEPTH_PER_TIER_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OLDEST_WAIT_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    PUBLISHED_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    RUN_P50_FIELD_NUMBER: _ClassVar[int]
    RUN_P99_FIELD_NUMBER: _ClassVar[int]
    WAIT_P50_FIELD_NUMBER: _ClassVar[int]
    WAIT_P99_FIELD_NUMBER: _ClassVar[int]
    acked: int
    config: QueueConfig
    consumers: int
    dead_letters: int
    delayed: int
    depth_per_tier: _containers.RepeatedScalarFieldContainer[int]
    in_flight: int
    name: str
    oldest_wait: _duration_pb2.Duration
    paused: bool
    published: int
    ready: int
    run_p50: _duration_pb2.Duration
    run_p99: _duration_pb2.Duration
    wait_p50: _duration_pb2.Duration
    wait_p99: _duration_pb2.Duration
    def __init__(self, name: _Optional[str] = ..., config: _Optional[_Union[QueueConfig, _Mapping]] = ..., depth_per_tier: _Optional[_Iterable[int]] = ..., ready: _Optional[int] = ..., in_flight: _Optional[int] = ..., dead_letters: _Optional[int] = ..., consumers: _Optional[int] = ..., published: _Optional[int] = ..., acked: _Optional[int] = ..., paused: bool = ..., delayed: _Optional[int] = ..., oldest_wait: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., run_p50: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., run_p99: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., wait_p50: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., wait_p99: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ReportError(_message.Message):
    __slots__ = ["code", "index", "message"]
    CODE_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    index: int
    message: str
    def __init__(self, index: _Optional[int] = ..., code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class ReportRequest(_message.Message):
    __slots__ = ["observations", "publishes"]
    OBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    PUBLISHES_FIELD_NUMBER: _ClassVar[int]
    observations: _containers.RepeatedCompositeFieldContainer[ObserveRequest]
    publishes: _containers.RepeatedCompositeFieldContainer[CountedPublish]
    def __init__(self, observations: _Optional[_Iterable[_Union[ObserveRequest, _Mapping]]] = ..., publishes: _Optional[_Iterable[_Union[CountedPublish, _Mapping]]] = ...) -> None: ...

class ReportResponse(_message.Message):
    __slots__ = ["answers", "observation_errors", "publish_errors"]
    ANSWERS_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_ERRORS_FIELD_NUMBER: _ClassVar[int]
    PUBLISH_ERRORS_FIELD_NUMBER: _ClassVar[int]
    answers: _containers.RepeatedCompositeFieldContainer[PredictResponse]
    observation_errors: _containers.RepeatedCompositeFieldContainer[ReportError]
    publish_errors: _containers.RepeatedCompositeFieldContainer[ReportError]
    def __init__(self, answers: _Optional[_Iterable[_Union[PredictResponse, _Mapping]]] = ..., observation_errors: _Optional[_Iterable[_Union[ReportError, _Mapping]]] = ..., publish_errors: _Optional[_Iterable[_Union[ReportError, _Mapping]]] = ...) -> None: ...

class RequestError(_message.Message):
    __slots__ = ["applied", "code", "id", "message", "request"]
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    applied: bool
    code: int
    id: str
    message: str
    request: str
    def __init__(self, id: _Optional[str] = ..., request: _Optional[str] = ..., code: _Optional[int] = ..., message: _Optional[str] = ..., applied: bool = ...) -> None: ...

class RequeueDeadLettersRequest(_message.Message):
    __slots__ = ["ids", "queue"]
    IDS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[str]
    queue: str
    def __init__(self, queue: _Optional[str] = ..., ids: _Optional[_Iterable[str]] = ...) -> None: ...

class RequeueDeadLettersResponse(_message.Message):
    __slots__ = ["requeued"]
    REQUEUED_FIELD_NUMBER: _ClassVar[int]
    requeued: int
    def __init__(self, requeued: _Optional[int] = ...) -> None: ...

class RunJobsNowRequest(_message.Message):
    __slots__ = ["ids", "queue"]
    IDS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[str]
    queue: str
    def __init__(self, queue: _Optional[str] = ..., ids: _Optional[_Iterable[str]] = ...) -> None: ...

class RunJobsNowResponse(_message.Message):
    __slots__ = ["moved"]
    MOVED_FIELD_NUMBER: _ClassVar[int]
    moved: int
    def __init__(self, moved: _Optional[int] = ...) -> None: ...

class RunningJob(_message.Message):
    __slots__ = ["attempt", "consumer", "id", "job_type", "lease_deadline", "leased", "predicted_ms", "producer", "running"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    JOB_TYPE_FIELD_NUMBER: _ClassVar[int]
    LEASED_FIELD_NUMBER: _ClassVar[int]
    LEASE_DEADLINE_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_MS_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    consumer: str
    id: str
    job_type: str
    lease_deadline: _timestamp_pb2.Timestamp
    leased: _timestamp_pb2.Timestamp
    predicted_ms: float
    producer: str
    running: _duration_pb2.Duration
    def __init__(self, id: _Optional[str] = ..., producer: _Optional[str] = ..., job_type: _Optional[str] = ..., consumer: _Optional[str] = ..., attempt: _Optional[int] = ..., predicted_ms: _Optional[float] = ..., leased: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., running: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., lease_deadline: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Schedule(_message.Message):
    __slots__ = ["catch_up", "cron", "every", "fired", "headers", "job_type", "last_tick", "name", "next_tick", "paused", "payload", "producer", "queue", "start", "time_zone"]
    class HeadersEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CATCH_UP_FIELD_NUMBER: _ClassVar[int]
    CRON_FIELD_NUMBER: _ClassVar[int]
    EVERY_FIELD_NUMBER: _ClassVar[int]
    FIRED_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    JOB_TYPE_FIELD_NUMBER: _ClassVar[int]
    LAST_TICK_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    NEXT_TICK_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    TIME_ZONE_FIELD_NUMBER: _ClassVar[int]
    catch_up: _duration_pb2.Duration
    cron: str
    every: _duration_pb2.Duration
    fired: int
    headers: _containers.ScalarMap[str, str]
    job_type: str
    last_tick: _timestamp_pb2.Timestamp
    name: str
    next_tick: _timestamp_pb2.Timestamp
    paused: bool
    payload: bytes
    producer: str
    queue: str
    start: _timestamp_pb2.Timestamp
    time_zone: str
    def __init__(self, name: _Optional[str] = ..., queue: _Optional[str] = ..., cron: _Optional[str] = ..., time_zone: _Optional[str] = ..., every: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., start: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., catch_up: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., paused: bool = ..., producer: _Optional[str] = ..., job_type: _Optional[str] = ..., payload: _Optional[bytes] = ..., headers: _Optional[_Mapping[str, str]] = ..., last_tick: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., next_tick: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., fired: _Optional[int] = ...) -> None: ...

class Stamp(_message.Message):
    __slots__ = ["cold", "predicted", "tier"]
    COLD_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    cold: bool
    predicted: _duration_pb2.Duration
    tier: int
    def __init__(self, predicted: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., tier: _Optional[int] = ..., cold: bool = ...) -> None: ...

class Subscribe(_message.Message):
    __slots__ = ["consumer_name", "max_batch", "prefetch", "queue"]
    CONSUMER_NAME_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_FIELD_NUMBER: _ClassVar[int]
    PREFETCH_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    consumer_name: str
    max_batch: int
    prefetch: int
    queue: str
    def __init__(self, queue: _Optional[str] = ..., prefetch: _Optional[int] = ..., consumer_name: _Optional[str] = ..., max_batch: _Optional[int] = ...) -> None: ...

class WaitingJob(_message.Message):
    __slots__ = ["attempts", "cold", "enqueued", "expires", "id", "job_type", "level", "long", "predicted_ms", "producer", "tier", "waited"]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    COLD_FIELD_NUMBER: _ClassVar[int]
    ENQUEUED_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    JOB_TYPE_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    LONG_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_MS_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    WAITED_FIELD_NUMBER: _ClassVar[int]
    attempts: int
    cold: bool
    enqueued: _timestamp_pb2.Timestamp
    expires: _timestamp_pb2.Timestamp
    id: str
    job_type: str
    level: int
    long: bool
    predicted_ms: float
    producer: str
    tier: int
    waited: _duration_pb2.Duration
    def __init__(self, id: _Optional[str] = ..., producer: _Optional[str] = ..., job_type: _Optional[str] = ..., tier: _Optional[int] = ..., level: _Optional[int] = ..., predicted_ms: _Optional[float] = ..., long: bool = ..., cold: bool = ..., attempts: _Optional[int] = ..., enqueued: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., waited: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., expires: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class NackAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
