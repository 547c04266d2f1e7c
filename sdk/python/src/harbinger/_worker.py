"""The worker: runs a handler for each job of a queue and settles it with the broker."""

from __future__ import annotations

import asyncio
import collections
import logging
import signal
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Deque, Optional, Sequence, Union

import grpc
import grpc.aio

from ._backoff import Backoff
from ._errors import DeadLetter, HarbingerError, InvalidArgument, Unavailable, from_rpc_error, status_code
from ._message import Job, duration, duration_ns
from ._text import bad_utf8_at, clean
from .v1 import harbinger_pb2 as pb

if TYPE_CHECKING:
    from ._client import Client

log = logging.getLogger("harbinger")

Handler = Callable[[Job], Awaitable[None]]
"""``async def handler(job: Job) -> None``: returning acks the job, raising nacks it."""

DRAIN_GRACE = 0.75
"""Seconds a stopping worker waits for the broker to read its last answers and end the stream."""

# Answers that retrying cannot change: the worker stops with them.
_FATAL = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.PERMISSION_DENIED,
          grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.UNIMPLEMENTED}


@dataclass(frozen=True)
class RequestError:
    """The broker's answer to one ack, nack or extend it did not apply exactly as sent.

    Only that job is affected. ``applied`` is true when the request took
    effect in an adjusted form (an ack whose duration was not learned still
    settled the job).
    """

    id: str
    request: str
    code: grpc.StatusCode
    message: str
    applied: bool

    def __str__(self) -> str:
        what = "applied with a change" if self.applied else "refused"
        return f"harbinger: {self.request} of {self.id} {what}: {self.message}"


def _default_request_error(err: RequestError) -> None:
    log.warning("%s", err)


class _Held:
    """A delivery the session holds: waiting for a handler, or running."""

    __slots__ = ("job", "task", "stop_reason", "settling", "renew", "until")

    def __init__(self, job: Job) -> None:
        self.job = job
        self.task: Optional["asyncio.Task[None]"] = None
        # Why the worker cancelled its handler: "cancelled" (the broker's
        # CancelNotice), "stopping" or "lost" (the stream broke); None while
        # nobody did.
        self.stop_reason: Optional[str] = None
        self.settling = False
        self.renew: Optional[asyncio.TimerHandle] = None
        self.until: Optional[float] = None  # no lease renewal after it (the job's timeout)


class Worker:
    """Consumes a queue, running ``handler`` for each job.

    A handler that returns acks its job with the time it took, measured
    around the call on a monotonic clock, so the broker learns how long each
    kind of job runs. One that raises nacks it, with the exception's text as
    the reason (cut to 512 bytes on a character boundary): the broker retries
    it after its retry policy's backoff (the job's or the queue's), or after
    ``retry_backoff(attempt)`` seconds when that is given, and dead-letters
    it once it has had its attempts. Raising ``DeadLetter`` dead-letters it
    at once.

    Settings: ``concurrency`` handlers run at once (default 1); ``prefetch``
    deliveries may be held at once, counting those running (default and
    minimum: concurrency); ``name`` shows in admin views; ``timeout``
    (seconds) cancels a handler that runs longer, and its job is retried
    with "timed out after ..." as the reason; ``lease_extend`` (seconds) is
    how often a held job's lease is renewed (default half the lease, 0 for
    never); ``max_reconnect_delay`` caps the backoff between reconnects;
    ``stop_timeout`` is how long ``stop`` lets running handlers finish
    before it cancels them and returns their jobs to the queue;
    ``on_request_error`` is told of acks, nacks and extends the broker
    refused or applied in part (default: a log line).

    With ``prefetch`` above 1, against a broker that sends and reads batches
    (``Limits.max_consume_batch``), the broker may send several deliveries in
    one response when several are free to run; it still picks each job only
    when the worker has room for it. With ``concurrency`` above 1, the acks
    and nacks of handlers that finish close together go in one request; none
    waits for another to come.

    When the broker cancels a running job (Client.cancel_job), its handler
    is cancelled (asyncio.CancelledError is raised in it) and the job is
    dropped; one cancelled while it waits never runs. When the broker goes
    away, the worker reconnects with backoff, and the jobs it held are
    redelivered by the broker.
    """

    def __init__(
        self,
        client: "Client",
        queue: str,
        handler: Handler,
        *,
        concurrency: int = 1,
        prefetch: int = 0,
        name: str = "",
        timeout: Optional[float] = None,
        lease_extend: Optional[float] = None,
        retry_backoff: Optional[Callable[[int], float]] = None,
        max_reconnect_delay: float = 5.0,
        stop_timeout: float = 10.0,
        on_request_error: Optional[Callable[[RequestError], None]] = None,
    ) -> None:
        for what, v in (("queue", queue), ("name", name)):
            if bad_utf8_at(v) >= 0:
                raise InvalidArgument(f"harbinger: the worker's {what} {v!r} is not valid UTF-8")
        if not queue:
            raise InvalidArgument("harbinger: a worker needs a queue")
        if timeout is not None and timeout <= 0:
            raise InvalidArgument(f"harbinger: the worker's timeout {timeout} is not positive (None is no bound)")
        self._client = client
        self.queue = queue
        self._handler = handler
        self.concurrency = max(concurrency, 1)
        self.prefetch = max(prefetch, self.concurrency)
        self.name = name
        self.timeout = timeout
        self.lease_extend = lease_extend
        self.retry_backoff = retry_backoff
        self.max_reconnect_delay = max_reconnect_delay if max_reconnect_delay > 0 else 5.0
        self.stop_timeout = stop_timeout
        self.on_request_error = on_request_error or _default_request_error
        self._stop: Optional[asyncio.Event] = None
        self._stop_requested = False

    def stop(self) -> None:
        """Stops the worker: no new job starts, running handlers get stop_timeout
        seconds to finish (then they are cancelled and their jobs returned to
        the queue), and ``run`` returns. Safe to call from a signal handler
        installed with ``handle_signals``."""
        self._stop_requested = True
        if self._stop is not None:
            self._stop.set()

    def handle_signals(self, *signals: int) -> None:
        """Makes SIGTERM and SIGINT (or the given signals) stop the worker gracefully."""
        loop = asyncio.get_running_loop()
        for sig in signals or (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop)

    async def run(self) -> None:
        """Consumes the queue until ``stop`` (or this task is cancelled, in which
        case the broker takes back the jobs held when the stream closes).
        Raises what retrying cannot fix: an invalid queue, a queue deleted
        under it (NotFound), a token refused."""
        self._stop = asyncio.Event()
        if self._stop_requested:
            self._stop.set()
        bo = Backoff(self.max_reconnect_delay)
        while not self._stop.is_set():
            got, err = await self._session()
            if self._stop.is_set():
                return
            if self._client.closed:
                raise Unavailable(f"harbinger: client closed: {err}")
            if err is not None and err.code in _FATAL:
                raise err
            if got:
                bo.reset()
            delay = bo.next()
            log.warning("harbinger: worker of %s reconnecting in %.2fs: %s", self.queue, delay, err)
            try:
                await asyncio.wait_for(self._stop.wait(), delay)
            except asyncio.TimeoutError:
                pass

    async def _unless_stopped(self, fut: "asyncio.Future[Any]") -> bool:
        """Waits for fut unless the worker stops first, and then cancels it;
        reports whether fut is done."""
        assert self._stop is not None
        stopping = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({fut, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
            done = fut.done()
            if not done:
                fut.cancel()  # a task ends cancelled only later
        return done

    async def _session(self) -> tuple[bool, Optional[HarbingerError]]:
        c = self._client
        assert self._stop is not None
        # The broker's limits say whether it sends and reads batches; asked
        # again for every stream, since a broker that restarted may have
        # changed. Waiting for the broker, stopping gives up at once.
        asking = asyncio.ensure_future(c.limits(refresh=True))
        if not await self._unless_stopped(asking):
            return False, None
        try:
            max_consume_batch = asking.result().max_consume_batch
        except HarbingerError as e:
            return False, e
        call = c._broker.Consume(metadata=c._metadata, wait_for_ready=True)
        c._streams.add(call)
        s = _Session(self, call, max_consume_batch)
        try:
            opening = asyncio.ensure_future(call.wait_for_connection())
            if not await self._unless_stopped(opening):
                call.cancel()
                return False, None
            opening.result()
            sub = pb.Subscribe(queue=self.queue, prefetch=self.prefetch, consumer_name=self.name)
            if max_consume_batch > 1:
                # Several deliveries to a response when the worker has room
                # for them; a broker without batches would ignore it.
                sub.max_batch = min(self.prefetch, max_consume_batch)
            await s.send(pb.ConsumeRequest(subscribe=sub))
            reader = asyncio.ensure_future(s.read())
            stopping = asyncio.ensure_future(self._stop.wait())
            await asyncio.wait({reader, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not reader.done():
                stopping.cancel()
                await s.drain(self.stop_timeout)
                try:
                    await call.done_writing()
                except (grpc.aio.AioRpcError, grpc.aio.UsageError):
                    pass
                # The broker ends the stream once it has read our last answers.
                try:
                    await asyncio.wait_for(asyncio.shield(reader), DRAIN_GRACE)
                except (asyncio.TimeoutError, Exception):
                    pass
                return s.got, None
            stopping.cancel()
            err = reader.result()
            await s.abandon()
            return s.got, err
        except grpc.aio.AioRpcError as e:
            await s.abandon()
            return s.got, from_rpc_error(e)
        except asyncio.CancelledError:
            call.cancel()
            for h in list(s.held.values()):
                if h.task is not None and not h.settling:
                    h.stop_reason = "lost"
                    h.task.cancel()
            task = asyncio.current_task()
            if c.closed and task is not None and task.cancelling() == 0:
                # Closing the client cancels its calls, which grpc.aio
                # raises as a cancellation of this task; nobody cancelled
                # the task itself, so run() says the client closed.
                return s.got, Unavailable("harbinger: the client's channel was closed")
            raise
        finally:
            call.cancel()
            c._streams.discard(call)
            s.forget()


Settle = Union[pb.Ack, pb.Nack]
"""How a job ends: its ack or its nack."""


class _Gather:
    """Acks and nacks of handlers that finish close together, waiting to go
    out in one request."""

    __slots__ = ("limit", "items", "sending")

    def __init__(self, limit: int) -> None:
        self.limit = limit  # most items in one request (Limits.max_consume_batch)
        self.items: list[Settle] = []
        self.sending = False  # a handler is sending what is gathered


class _Session:
    """One Consume stream and the jobs held on it."""

    def __init__(self, w: Worker, call: grpc.aio.StreamStreamCall, max_consume_batch: int = 0) -> None:
        self.w = w
        self.call = call
        # What the broker may still send, as this side counts it: the
        # prefetch, less each delivery, plus the credit of each ack and nack.
        # The broker's count is never above it, so a broker that sends more
        # has broken the protocol.
        self.credit = w.prefetch
        # Acks and nacks gathered into one request when several handlers run
        # and the broker reads batches; None sends each alone.
        self.gather = _Gather(max_consume_batch) if max_consume_batch > 1 and w.concurrency > 1 else None
        self.held: dict[str, _Held] = {}
        self.waiting: Deque[_Held] = collections.deque()
        self.running = 0
        self.got = False
        self.stopping = False
        self.lost = False
        self.lock = asyncio.Lock()  # one write at a time
        self.idle = asyncio.Event()
        self.idle.set()
        self.loop = asyncio.get_running_loop()

    async def send(self, req: pb.ConsumeRequest) -> None:
        async with self.lock:
            await self.call.write(req)

    async def try_send(self, req: pb.ConsumeRequest) -> None:
        """Sends req; if the stream is gone, the broker redelivers the job."""
        if self.lost:
            return
        try:
            await self.send(req)
        except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError):
            pass

    async def read(self) -> HarbingerError:
        """Reads the stream until it ends, and returns why it ended."""
        while True:
            try:
                resp = await self.call.read()
            except grpc.aio.AioRpcError as e:
                return from_rpc_error(e)
            if resp is grpc.aio.EOF:
                code = await self.call.code()
                details = await self.call.details()
                if code == grpc.StatusCode.OK:
                    return Unavailable("harbinger: the broker ended the consume stream")
                return from_rpc_error(_Status(code, details))
            kind = resp.WhichOneof("response")
            if kind == "delivery":
                self.receive((resp.delivery,))
            elif kind == "deliveries":
                self.receive(resp.deliveries.deliveries)
            elif kind == "cancel":
                self.cancel(resp.cancel.id)
            elif kind == "error":
                re_ = resp.error
                self.w.on_request_error(RequestError(re_.id, re_.request, status_code(re_.code), re_.message, re_.applied))

    # -- holding and running jobs -------------------------------------------------

    def renew_every(self, job: Job) -> float:
        if self.w.lease_extend is not None:
            return self.w.lease_extend
        return job.lease / 2

    def arm_renewal(self, h: _Held) -> None:
        every = self.renew_every(h.job)
        if every > 0:
            h.renew = self.loop.call_later(every, self.renew, h, every)

    def renew(self, h: _Held, every: float) -> None:
        if self.held.get(h.job.id) is not h or h.settling:
            return
        if h.until is not None and self.loop.time() >= h.until:
            return  # a job past its timeout keeps the lease it has, no more
        asyncio.ensure_future(self.try_send(pb.ConsumeRequest(extend=pb.Extend(
            id=h.job.id, lease=duration(h.job.lease)))))
        h.renew = self.loop.call_later(every, self.renew, h, every)

    def receive(self, ds: Sequence[pb.Delivery]) -> None:
        """Takes the deliveries of one response, alone or a batch. A broker
        that breaks the protocol is named in the log, and no job it sent is
        dropped: an empty batch is ignored, and deliveries past the credit
        are held and run like the others."""
        if not ds:
            log.warning("harbinger: the broker sent an empty batch of deliveries on queue %s; ignored", self.w.queue)
            return
        self.got = True
        self.credit -= len(ds)
        if self.credit < 0:
            log.warning("harbinger: the broker sent %d deliveries on queue %s with credit for %d; "
                        "the %d over it are held and run all the same",
                        len(ds), self.w.queue, len(ds) + self.credit, -self.credit)
            self.credit = 0
        for d in ds:
            self.deliver(Job.from_proto(d))

    def deliver(self, job: Job) -> None:
        h = _Held(job)
        self.held[job.id] = h
        self.arm_renewal(h)
        if self.running < self.w.concurrency and not self.stopping:
            self.start(h)
        else:
            self.waiting.append(h)

    def start(self, h: _Held) -> None:
        self.running += 1
        self.idle.clear()
        h.task = asyncio.ensure_future(self.handle(h))

    def cancel(self, id: str) -> None:
        h = self.held.get(id)
        if h is None:
            return  # already settled
        h.stop_reason = "cancelled"
        if h.task is not None and not h.settling:
            h.task.cancel()

    async def handle(self, h: _Held) -> None:
        job = h.job
        err: Optional[BaseException] = None
        timed_out = False
        took_ns = 1000
        if h.stop_reason is None:  # not cancelled while it waited
            t = self.w.timeout
            start = time.perf_counter_ns()
            if t is not None:
                h.until = self.loop.time() + t
            try:
                if t is None:
                    await self.w._handler(job)
                else:
                    async with asyncio.timeout(t):
                        await self.w._handler(job)
            except TimeoutError as e:
                timed_out = h.stop_reason is None
                err = e
            except asyncio.CancelledError as e:
                if h.stop_reason is None:
                    raise  # not ours: let it through
                task = asyncio.current_task()
                if task is not None:
                    task.uncancel()
                err = e
            except Exception as e:  # noqa: BLE001 - any failure of a handler nacks its job
                err = e
            took_ns = max(time.perf_counter_ns() - start, 1000)
        h.settling = True
        try:
            await self.settle(h, err, timed_out, took_ns)
        finally:
            self.running -= 1
            if not self.stopping:
                while self.waiting and self.running < self.w.concurrency:
                    nxt = self.waiting.popleft()
                    if self.held.get(nxt.job.id) is nxt:
                        self.start(nxt)
            if self.running == 0:
                self.idle.set()

    async def settle(self, h: _Held, err: Optional[BaseException], timed_out: bool, took_ns: int) -> None:
        job = h.job
        if h.renew is not None:
            h.renew.cancel()
        if self.held.get(job.id) is h:
            del self.held[job.id]
        credit = 0 if self.stopping else 1
        reason_of = h.stop_reason
        item: Settle
        if reason_of == "cancelled":
            # The broker drops it whatever we say; say why, and ask for more.
            item = pb.Nack(id=job.id, action=pb.NACK_ACTION_DEAD_LETTER, reason="cancelled", credit=credit)
        elif err is None:
            item = pb.Ack(id=job.id, duration=duration_ns(took_ns), credit=credit)
        elif isinstance(err, DeadLetter):
            item = pb.Nack(id=job.id, action=pb.NACK_ACTION_DEAD_LETTER,
                           reason=clean(str(err) or "DeadLetter"), credit=credit)
        elif reason_of in ("stopping", "lost") or (self.stopping and not timed_out):
            item = pb.Nack(id=job.id, action=pb.NACK_ACTION_REQUEUE, reason="worker stopping")
        else:
            text = f"timed out after {self.w.timeout:g}s" if timed_out else reason(err)
            if self.w.retry_backoff is None:
                item = pb.Nack(id=job.id, action=pb.NACK_ACTION_RETRY, reason=clean(text), credit=credit)
            else:
                item = pb.Nack(id=job.id, action=pb.NACK_ACTION_REQUEUE_AFTER, reason=clean(text), credit=credit,
                               delay=duration(self.w.retry_backoff(job.attempt)))
        self.credit += item.credit
        if self.gather is None:
            await self.try_send(settle_request(item))
        else:
            await self.settle_gathered(self.gather, item)

    async def settle_gathered(self, g: _Gather, item: Settle) -> None:
        """Sends an ack or a nack together with those of other handlers that
        finish close together. The first to settle while nothing is being
        sent sends for all: it lets the tasks that are ready run first (those
        about to finish their jobs add theirs), then sends what has gathered,
        and again until nothing is left; the others return at once. No ack
        waits for another to come: a handler that finishes alone has its ack
        sent as a plain one, a pass of the event loop later. The sender is
        itself a running handler, so a stopping worker, which waits for its
        handlers, sends everything gathered before it closes the stream."""
        g.items.append(item)
        if g.sending:
            return
        g.sending = True
        try:
            await asyncio.sleep(0)
            while g.items:
                items, g.items = g.items, []
                for req in settle_requests(items, g.limit):
                    await self.try_send(req)
        finally:
            g.sending = False

    async def drain(self, grace: float) -> None:
        """Stopping: starts nothing more, lets running handlers finish for grace
        seconds, then cancels them; their jobs go back to the queue."""
        self.stopping = True
        if self.running:
            try:
                await asyncio.wait_for(self.idle.wait(), grace)
            except asyncio.TimeoutError:
                for h in list(self.held.values()):
                    if h.task is not None and not h.settling:
                        h.stop_reason = h.stop_reason or "stopping"
                        h.task.cancel()
                await self.idle.wait()

    async def abandon(self) -> None:
        """The stream broke: the broker takes back every job held, so running
        handlers are cancelled (their answers could not reach it)."""
        self.lost = True
        self.stopping = True
        for h in list(self.held.values()):
            if h.task is not None and not h.settling:
                h.stop_reason = h.stop_reason or "lost"
                h.task.cancel()
        if self.running:
            await self.idle.wait()

    def forget(self) -> None:
        for h in self.held.values():
            if h.renew is not None:
                h.renew.cancel()
        self.held.clear()
        self.waiting.clear()


def settle_request(item: Settle) -> pb.ConsumeRequest:
    """The request that sends one ack or nack alone."""
    if isinstance(item, pb.Ack):
        return pb.ConsumeRequest(ack=item)
    return pb.ConsumeRequest(nack=item)


def settle_requests(items: Sequence[Settle], limit: int) -> list[pb.ConsumeRequest]:
    """The requests that send items, in order: one alone as a plain ack or
    nack, more as ConsumeBatch requests of at most limit items each."""
    out = []
    for i in range(0, len(items), max(limit, 1)):
        part = items[i:i + max(limit, 1)]
        if len(part) == 1:
            out.append(settle_request(part[0]))
            continue
        out.append(pb.ConsumeRequest(batch=pb.ConsumeBatch(
            acks=[a for a in part if isinstance(a, pb.Ack)],
            nacks=[n for n in part if isinstance(n, pb.Nack)])))
    return out


def reason(err: BaseException) -> str:
    """A handler's exception as a nack's reason: the line Python prints last for
    it ("ValueError: bad input"), with what is not UTF-8 replaced and cut to
    512 bytes on a character boundary."""
    text = str(err)
    name = type(err).__name__
    return clean(f"{name}: {text}" if text else name)


class _Status(grpc.RpcError):  # type: ignore[misc]
    def __init__(self, code: grpc.StatusCode, details: Optional[str]) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> Optional[str]:
        return self._details
