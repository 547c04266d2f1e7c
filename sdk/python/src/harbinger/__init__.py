"""Harbinger for Python: publish jobs, run workers that tell the broker how long
jobs take, and manage queues, over the broker's gRPC API.

``Client`` is for asyncio; ``SyncClient`` wraps it for code that is not async.
The wire types (QueueConfig, Schedule, the admin answers) are in
``harbinger.pb``; ``harbinger.duration`` turns seconds into their Duration
fields.
"""

from ._client import Client
from ._errors import (Aborted, AlreadyExists, Cancelled, DataLoss, DeadLetter, DeadlineExceeded,
                      FailedMessage, FailedPrecondition, HarbingerError, Internal, InvalidArgument, NotFound,
                      OutOfRange, PermissionDenied, ProducerClosed, PublishError, ResourceExhausted, Unauthenticated,
                      Unavailable, Unimplemented, Unknown, error_for)
from ._message import Job, Limits, Message, PublishResult, Seconds, duration
from ._producer import Producer
from ._sync import SyncClient
from ._worker import Handler, RequestError, Worker
from .v1 import harbinger_pb2 as pb

__version__ = "0.1.0"

__all__ = [
    "Aborted", "AlreadyExists", "Cancelled", "Client", "DataLoss", "DeadLetter", "DeadlineExceeded",
    "FailedMessage", "FailedPrecondition", "Handler", "HarbingerError", "Internal", "InvalidArgument", "Job",
    "Limits", "Message", "NotFound", "OutOfRange", "PermissionDenied", "Producer", "ProducerClosed",
    "PublishError", "PublishResult", "RequestError", "ResourceExhausted", "Seconds", "SyncClient",
    "Unauthenticated", "Unavailable", "Unimplemented", "Unknown", "Worker", "duration", "error_for", "pb",
]
