"""The asyncio client: a connection to a broker, publishes and admin calls."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, Optional, Sequence, TypeVar

import grpc
import grpc.aio

from ._backoff import Backoff
from ._errors import (FailedMessage, HarbingerError, InvalidArgument, PublishError, Unavailable,
                      from_rpc_error)
from ._message import (Limits, Message, PublishResult, check, hard_limit, message_size)
from .v1 import harbinger_pb2 as pb
from .v1 import harbinger_pb2_grpc as pb_grpc

if TYPE_CHECKING:
    from ._producer import Producer
    from ._worker import Handler, Worker

log = logging.getLogger("harbinger")

KEEPALIVE_TIME = 30.0
"""Seconds a connection with an open call may stay quiet before the client pings the broker."""
KEEPALIVE_TIMEOUT = 20.0
"""Seconds the client waits for the ping's answer before it takes the connection for dead."""

T = TypeVar("T")


def _is_loopback(target: str) -> bool:
    host = target
    if host.startswith("["):
        host = host[1:host.find("]")]
    elif host.count(":") == 1:
        host = host.rsplit(":", 1)[0]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Client:
    """A connection to a Harbinger broker, for asyncio.

    ``target`` is host:port. The connection is made lazily and re-made after
    failures, so constructing a Client succeeds while the broker is down;
    calls wait for it (use ``asyncio.timeout`` to bound them). Use it as an
    async context manager, or call ``close``.

    ``token`` is sent with every call ("authorization: Bearer TOKEN"), for a
    broker started with -tokens; it is refused without TLS unless the broker
    is on this machine's loopback. ``tls=True`` connects over TLS with the
    system's roots, or with ``root_certificates`` (PEM) for a private CA;
    ``private_key`` and ``certificate_chain`` (PEM) answer a broker that asks
    for client certificates.

    One Client serves any number of publishes, producers and workers; it
    must be used from the event loop it was made in.
    """

    def __init__(
        self,
        target: str,
        *,
        token: Optional[str] = None,
        tls: bool = False,
        root_certificates: Optional[bytes] = None,
        private_key: Optional[bytes] = None,
        certificate_chain: Optional[bytes] = None,
        keepalive_time: float = KEEPALIVE_TIME,
        keepalive_timeout: float = KEEPALIVE_TIMEOUT,
        options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        tls = tls or root_certificates is not None or private_key is not None
        if token is not None and not tls and not _is_loopback(target):
            raise ValueError(
                f"harbinger: a token is sent only over TLS, and {target} is not this machine's loopback: pass tls=True")
        opts: list[tuple[str, Any]] = [
            # The broker bounds every answer by what it accepts; gRPC's default
            # of 4 MiB would refuse a delivery of a job a broker with a larger
            # max payload took.
            ("grpc.max_receive_message_length", -1),
            ("grpc.max_send_message_length", -1),
            # A worker waiting for jobs sends nothing: ping a quiet connection,
            # so that one that died without a word is noticed and re-made.
            ("grpc.keepalive_time_ms", int(keepalive_time * 1000)),
            ("grpc.keepalive_timeout_ms", int(keepalive_timeout * 1000)),
            ("grpc.http2.max_pings_without_data", 0),
            # Come back soon after a broker restarts (gRPC's default waits
            # from 1s up to 2 minutes between tries).
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.min_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 2000),
        ]
        opts.extend(options)
        if tls:
            creds = grpc.ssl_channel_credentials(root_certificates, private_key, certificate_chain)
            self._channel = grpc.aio.secure_channel(target, creds, options=opts)
        else:
            self._channel = grpc.aio.insecure_channel(target, options=opts)
        self.target = target
        self._metadata: Optional[tuple[tuple[str, str], ...]] = (
            (("authorization", f"Bearer {token}"),) if token is not None else None)
        self._broker = pb_grpc.BrokerStub(self._channel)  # type: ignore[no-untyped-call]
        self._admin = pb_grpc.AdminStub(self._channel)  # type: ignore[no-untyped-call]
        self._limits: Optional[Limits] = None
        self._closed = False
        # Workers' Consume streams: grpc.aio's close cancels only calls it
        # finds awaited directly by a task, so close cancels these itself.
        self._streams: set[grpc.aio.StreamStreamCall] = set()

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Closes the connection; producers and workers using it stop."""
        self._closed = True
        for call in list(self._streams):
            call.cancel()
        await self._channel.close()

    @property
    def closed(self) -> bool:
        return self._closed

    # -- calls ---------------------------------------------------------------

    async def _call(self, fn: Callable[..., Awaitable[T]], req: Any, *, retry: bool = False,
                    timeout: Optional[float] = None) -> T:
        """Calls fn(req), waiting for the broker while it is unreachable; with
        retry, an Unavailable answer (the broker restarting) is tried again with
        backoff as long as timeout allows."""
        bo = Backoff(1.0)
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            left = None if deadline is None else max(deadline - loop.time(), 0.0)
            try:
                return await fn(req, metadata=self._metadata, wait_for_ready=True, timeout=left)
            except grpc.aio.AioRpcError as e:
                err = from_rpc_error(e)
                if not retry or not isinstance(err, Unavailable) or self._closed:
                    raise err from None
                wait = bo.next()
                if deadline is not None and loop.time() + wait >= deadline:
                    raise err from None
                await asyncio.sleep(wait)

    async def limits(self, *, refresh: bool = False, timeout: Optional[float] = None) -> Limits:
        """The broker's size limits (GetLimits), asked once and kept."""
        if self._limits is None or refresh:
            try:
                self._limits = Limits.from_proto(
                    await self._call(self._broker.GetLimits, pb.GetLimitsRequest(), timeout=timeout))
            except HarbingerError as e:
                if e.code != grpc.StatusCode.UNIMPLEMENTED:
                    raise
                self._limits = Limits(0, 0, 0, 0, 0, 0)  # a broker older than GetLimits
        return self._limits

    # -- publish -------------------------------------------------------------

    async def publish(self, msg: Message, *, timeout: Optional[float] = None) -> str:
        """Publishes one message and returns its id (for a duplicate of a unique
        job, the id of the job that holds the key). Raises the broker's reason,
        as a HarbingerError, when it was not stored."""
        r = (await self.publish_each([msg], timeout=timeout))[0]
        if r.error is not None:
            raise r.error
        return r.id

    async def publish_many(self, msgs: Iterable[Message], *, timeout: Optional[float] = None) -> list[str]:
        """Publishes messages in as few requests as fit, and returns their ids in
        order. When any was not stored, raises PublishError, which says which
        were stored (with their ids) and why each other one was not: publish
        only those again."""
        msgs = list(msgs)
        results = await self.publish_each(msgs, timeout=timeout)
        failed = [FailedMessage(i, r.error) for i, r in enumerate(results) if r.error is not None]
        if failed:
            raise PublishError(len(msgs), failed, {i: r.id for i, r in enumerate(results) if r.error is None})
        return [r.id for r in results]

    async def publish_each(self, msgs: Iterable[Message], *, timeout: Optional[float] = None) -> list[PublishResult]:
        """Publishes messages and returns one PublishResult per message, in order.

        A message the broker would refuse as it stands (a string that is not
        UTF-8, a payload or headers over the broker's limits, one too large
        for any request) is answered here with InvalidArgument, naming the
        message and the field, and not sent; the rest are. Messages larger
        together than one request may carry go in several requests; if one
        of them fails after an earlier one was answered, its messages and
        the later ones are answered with its error. While the broker is
        unreachable (restarting) it waits and tries again as long as timeout
        allows; a retry after a connection broke mid-call may store a batch
        twice, which at-least-once delivery allows.
        """
        msgs = list(msgs)
        if not msgs:
            return []
        limits = await self.limits(timeout=timeout)
        hard = hard_limit(limits)
        out: list[Optional[PublishResult]] = [None] * len(msgs)
        protos: dict[int, pb.Message] = {}
        sizes: dict[int, int] = {}
        for i, m in enumerate(msgs):
            err = check(m, limits)
            if err is None:
                p = m.to_proto()
                size = message_size(p)
                if size > hard:
                    err = InvalidArgument(
                        f"encodes to {size} bytes, more than one request may carry ({hard} bytes, under the broker's "
                        f"request limit); not sent: store the body elsewhere and publish a reference")
                else:
                    protos[i], sizes[i] = p, size
            if err is not None:
                out[i] = PublishResult(error=type(err)(f"harbinger: message {i}: {err.message}"))
        parts = _cut(list(protos), sizes, limits.max_batch or 256, hard)
        answered = False
        for k, part in enumerate(parts):
            req = pb.PublishRequest(messages=[protos[i] for i in part])
            try:
                resp = await self._call(self._broker.Publish, req, retry=True, timeout=timeout)
                if len(resp.results) != len(part):
                    raise Unavailable("harbinger: the broker answered a batch with the wrong number of results")
            except HarbingerError as e:
                if not answered:
                    raise
                # What the earlier requests stored stays stored: only this
                # request's messages and the later ones are to publish again.
                for rest in parts[k:]:
                    for i in rest:
                        out[i] = PublishResult(error=e)
                break
            answered = True
            for i, r in zip(part, resp.results):
                out[i] = PublishResult.from_proto(r)
        return [r if r is not None else PublishResult(error=Unavailable("harbinger: not sent")) for r in out]

    def producer(self, *, max_batch: int = 256, max_batch_bytes: int = 1 << 20, window: int = 16,
                 close_timeout: float = 5.0) -> "Producer":
        """A Producer publishing through this client over one stream, with up to
        ``window`` batches awaiting the broker's answer; use it as an async
        context manager or close it."""
        from ._producer import Producer
        return Producer(self, max_batch=max_batch, max_batch_bytes=max_batch_bytes, window=window,
                        close_timeout=close_timeout)

    def worker(self, queue: str, handler: "Handler", **config: Any) -> "Worker":
        """A Worker of queue running handler; see Worker for the settings."""
        from ._worker import Worker
        return Worker(self, queue, handler, **config)

    async def run_worker(self, queue: str, handler: "Handler", **config: Any) -> None:
        """Runs a Worker until it is stopped (Worker.stop, a signal it handles)
        or this task is cancelled; see Worker."""
        await self.worker(queue, handler, **config).run()

    # -- admin ---------------------------------------------------------------

    async def declare_queue(self, name: str, config: Optional[pb.QueueConfig] = None) -> pb.QueueInfo:
        """Creates a queue, or updates its config; unset fields take the broker's defaults."""
        return await self._call(self._admin.DeclareQueue, pb.DeclareQueueRequest(name=name, config=config))

    async def list_queues(self) -> list[pb.QueueInfo]:
        """Every queue, sorted by name."""
        return list((await self._call(self._admin.ListQueues, pb.ListQueuesRequest())).queues)

    async def queue(self, name: str) -> pb.QueueInfo:
        """One queue's config and counters; NotFound if there is none."""
        for q in await self.list_queues():
            if q.name == name:
                return q
        from ._errors import NotFound
        raise NotFound(f"queue {name!r} not found")

    async def purge_queue(self, name: str) -> int:
        """Drops a queue's ready jobs and says how many."""
        return int((await self._call(self._admin.PurgeQueue, pb.PurgeQueueRequest(name=name))).purged)

    async def delete_queue(self, name: str, *, force: bool = False) -> pb.DeleteQueueResponse:
        """Removes a queue; refused (FailedPrecondition) while it holds a job unless force."""
        return await self._call(self._admin.DeleteQueue, pb.DeleteQueueRequest(name=name, force=force))

    async def pause_queue(self, name: str) -> pb.QueueInfo:
        """Stops deliveries from a queue until resume_queue; publishes are still taken."""
        return await self._call(self._admin.PauseQueue, pb.PauseQueueRequest(name=name, paused=True))

    async def resume_queue(self, name: str) -> pb.QueueInfo:
        return await self._call(self._admin.PauseQueue, pb.PauseQueueRequest(name=name, paused=False))

    async def get_job(self, queue: str, id: str) -> pb.JobInfo:
        """Where a job stands (waiting, delayed, running, dead) and what the broker knows of it."""
        return await self._call(self._admin.GetJob, pb.GetJobRequest(queue=queue, id=id))

    async def cancel_job(self, queue: str, id: str) -> str:
        """Ends a job and says where it stood: "waiting" or "delayed" (removed) or
        "running" (its worker is told to stop it; it is not retried)."""
        return str((await self._call(self._admin.CancelJob, pb.CancelJobRequest(queue=queue, id=id))).state)

    async def list_jobs(self, queue: str, limit: int = 0) -> pb.ListJobsResponse:
        """A queue's waiting jobs in the order they would run, and its running jobs."""
        return await self._call(self._admin.ListJobs, pb.ListJobsRequest(queue=queue, limit=max(limit, 0)))

    async def list_dead_letters(self, queue: str, limit: int = 0) -> list[pb.DeadLetter]:
        """Up to limit of a queue's dead letters (0: the broker's default), oldest first."""
        resp = await self._call(self._admin.ListDeadLetters, pb.ListDeadLettersRequest(queue=queue, limit=max(limit, 0)))
        return list(resp.dead_letters)

    async def requeue_dead_letters(self, queue: str, ids: Sequence[str] = ()) -> int:
        """Moves dead letters back to their queue (all when ids is empty); says how many."""
        return int((await self._call(self._admin.RequeueDeadLetters,
                                     pb.RequeueDeadLettersRequest(queue=queue, ids=list(ids)))).requeued)

    async def delete_dead_letters(self, queue: str, ids: Sequence[str] = ()) -> int:
        """Drops dead letters for good (all when ids is empty); says how many."""
        return int((await self._call(self._admin.DeleteDeadLetters,
                                     pb.DeleteDeadLettersRequest(queue=queue, ids=list(ids)))).deleted)

    async def list_keys(self, queue: str, limit: int = 0) -> list[pb.KeyStats]:
        """What the predictor learned of a queue's keys, busiest first."""
        return list((await self._call(self._admin.ListKeys, pb.ListKeysRequest(queue=queue, limit=max(limit, 0)))).keys)

    async def list_groups(self, queue: str, limit: int = 0) -> pb.ListGroupsResponse:
        """A queue's groups under its limits and fair shares: running, limit,
        waiting, share of the worker time in the last minute, throttled.
        FailedPrecondition when the queue declares none."""
        return await self._call(self._admin.ListGroups, pb.ListGroupsRequest(queue=queue, limit=max(limit, 0)))

    async def declare_schedule(self, schedule: pb.Schedule) -> pb.Schedule:
        """Creates or replaces a periodic job (cron or every)."""
        return await self._call(self._admin.DeclareSchedule, schedule)

    async def list_schedules(self) -> list[pb.Schedule]:
        """Every schedule, by name, in as many calls as their payloads take."""
        out: list[pb.Schedule] = []
        req = pb.ListSchedulesRequest()
        while True:
            resp = await self._call(self._admin.ListSchedules, req)
            out.extend(resp.schedules)
            if not resp.next or resp.next == req.after:
                return out
            req = pb.ListSchedulesRequest(after=resp.next)

    async def pause_schedule(self, name: str, paused: bool = True) -> pb.Schedule:
        """Stops (or, with paused False, restarts) a schedule's ticks."""
        return await self._call(self._admin.PauseSchedule, pb.PauseScheduleRequest(name=name, paused=paused))

    async def delete_schedule(self, name: str) -> None:
        await self._call(self._admin.DeleteSchedule, pb.DeleteScheduleRequest(name=name))


def _cut(idx: list[int], sizes: dict[int, int], count: int, target: int) -> list[list[int]]:
    """Splits the messages at idx, in order, into requests of at most count
    messages and target bytes (a message alone may be larger)."""
    parts: list[list[int]] = []
    cur: list[int] = []
    total = 0
    for i in idx:
        if cur and (len(cur) == count or total + sizes[i] > target):
            parts.append(cur)
            cur, total = [], 0
        cur.append(i)
        total += sizes[i]
    if cur:
        parts.append(cur)
    return parts
