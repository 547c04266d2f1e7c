"""A producer that keeps a window of publishes in flight over one stream."""

from __future__ import annotations

import asyncio
import collections
from typing import TYPE_CHECKING, Deque, Optional

import grpc
import grpc.aio

from ._backoff import Backoff
from ._errors import HarbingerError, InvalidArgument, ProducerClosed, Unavailable, from_rpc_error
from ._message import Limits, Message, PublishResult, check, hard_limit, message_size
from .v1 import harbinger_pb2 as pb

if TYPE_CHECKING:
    from ._client import Client


class _Pending:
    __slots__ = ("msg", "proto", "size", "error", "future", "resent")

    def __init__(self, msg: Message, future: "asyncio.Future[PublishResult]") -> None:
        self.msg: Optional[Message] = msg  # until checked against the broker's limits
        self.proto: Optional[pb.Message] = None
        self.size = 0
        self.error: Optional[HarbingerError] = None
        self.future = future
        self.resent = False

    def prepare(self, limits: Optional[Limits]) -> None:
        """Checks and encodes the message, once the broker's limits are known."""
        if self.msg is None:
            return
        err = check(self.msg, limits)
        if err is None:
            self.proto = self.msg.to_proto()
            self.size = message_size(self.proto)
        else:
            self.error = type(err)(f"harbinger: message: {err.message}")
        self.msg = None

    def done(self, r: PublishResult) -> None:
        if not self.future.done():
            self.future.set_result(r)

    def fail(self, err: HarbingerError) -> None:
        self.done(PublishResult(error=err))


class _Stream:
    """One PublishStream with the batches awaiting answers on it, in send order."""

    def __init__(self, call: grpc.aio.StreamStreamCall, limits: Limits, window: int, max_batch: int,
                 max_batch_bytes: int) -> None:
        self.call = call
        self.limits = limits
        self.count = min(max_batch, limits.max_batch or max_batch)
        self.hard = hard_limit(limits)
        self.target = min(max_batch_bytes, self.hard)
        self.slots = asyncio.Semaphore(window)
        self.inflight: Deque[list[_Pending]] = collections.deque()
        self.error: Optional[HarbingerError] = None
        self.idle = asyncio.Event()
        self.idle.set()
        self.reader = asyncio.ensure_future(self._recv())

    @property
    def broken(self) -> bool:
        return self.error is not None

    def _fail(self, err: HarbingerError) -> None:
        if self.error is None:
            self.error = err
        while self.inflight:
            for it in self.inflight.popleft():
                it.fail(self.error)
            self.slots.release()
        self.idle.set()

    async def _recv(self) -> None:
        try:
            while True:
                resp = await self.call.read()
                if resp is grpc.aio.EOF:
                    self._fail(Unavailable("harbinger: the broker ended the publish stream"))
                    return
                if not self.inflight:
                    self._fail(Unavailable("harbinger: the broker answered a batch that was not sent"))
                    return
                batch = self.inflight.popleft()
                if len(resp.results) != len(batch):
                    self.inflight.appendleft(batch)
                    self._fail(Unavailable("harbinger: the broker answered a batch with the wrong number of results"))
                    return
                for it, r in zip(batch, resp.results):
                    it.done(PublishResult.from_proto(r))
                self.slots.release()
                if not self.inflight:
                    self.idle.set()
        except grpc.aio.AioRpcError as e:
            self._fail(from_rpc_error(e))
        except asyncio.CancelledError:
            self._fail(Unavailable("harbinger: publish stream closed"))
            raise

    async def send(self, batch: list[_Pending]) -> Optional[HarbingerError]:
        """Sends batch, waiting for room in the window. None when sent; else the
        error, with the batch still unanswered if the stream never took it."""
        await self.slots.acquire()
        if self.error is not None:
            self.slots.release()
            return self.error
        self.inflight.append(batch)
        self.idle.clear()
        try:
            await self.call.write(pb.PublishRequest(messages=[it.proto for it in batch if it.proto is not None]))
        except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError) as e:
            err = from_rpc_error(e) if isinstance(e, grpc.aio.AioRpcError) else Unavailable(
                "harbinger: the publish stream ended")
            if batch in self.inflight:
                self.inflight.remove(batch)
                self.slots.release()
            self._fail(err)
            return err
        return None

    async def close(self) -> None:
        """Ends the stream once every answer has arrived."""
        if self.error is None:
            await self.idle.wait()
            try:
                await self.call.done_writing()
            except (grpc.aio.AioRpcError, grpc.aio.UsageError):
                pass
        self.call.cancel()
        try:
            await self.reader
        except asyncio.CancelledError:
            pass


class Producer:
    """Publishes at a high rate over one PublishStream.

    Messages queued by any number of tasks are gathered into batches, cut by
    count and by encoded size to fit the broker's request limit, and up to
    ``window`` batches are in flight without a round trip each. Each message
    gets its own outcome: one the broker refuses, or one that fails the
    checks made before sending (see Client.publish_each), fails alone. If the
    stream fails, the batches in flight fail with its error and the next
    batch opens a new stream; a batch the failed stream never took is sent
    again on the new one. While the broker is unreachable, batches wait for
    it; ``close`` waits for it at most ``close_timeout`` seconds.
    """

    def __init__(self, client: "Client", *, max_batch: int = 256, max_batch_bytes: int = 1 << 20,
                 window: int = 16, close_timeout: float = 5.0) -> None:
        self._client = client
        self._max_batch = max(max_batch, 1)
        self._max_batch_bytes = max(max_batch_bytes, 1)
        self._window = max(window, 1)
        self._close_timeout = close_timeout
        self._queue: "asyncio.Queue[Optional[_Pending]]" = asyncio.Queue(maxsize=self._max_batch * 2)
        self._held: Deque[Optional[_Pending]] = collections.deque()
        self._closed = False
        self._give_up = asyncio.Event()
        self._task: Optional["asyncio.Task[None]"] = None
        self._limits: Optional[Limits] = None

    async def __aenter__(self) -> "Producer":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def enqueue(self, msg: Message) -> "asyncio.Future[PublishResult]":
        """Queues msg and returns a future of its PublishResult, waiting only
        while the producer's buffer is full. Many enqueues keep many publishes
        in flight: ``await asyncio.gather(*futures)``."""
        if self._closed:
            raise ProducerClosed()
        loop = asyncio.get_running_loop()
        fut: "asyncio.Future[PublishResult]" = loop.create_future()
        it = _Pending(msg, fut)
        if self._limits is not None:
            it.prepare(self._limits)
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())
        await self._queue.put(it)
        return fut

    async def publish_result(self, msg: Message) -> PublishResult:
        """Queues msg and waits for its PublishResult."""
        return await (await self.enqueue(msg))

    async def publish(self, msg: Message) -> str:
        """Queues msg and waits for its id; raises the reason it was not stored."""
        r = await self.publish_result(msg)
        if r.error is not None:
            raise r.error
        return r.id

    async def close(self) -> None:
        """Stops taking messages, sends what is queued, waits for the broker's
        answers and closes the stream; every queued message's future is done
        when it returns. If no stream can be opened within close_timeout,
        what is still queued fails with Unavailable."""
        if not self._closed:
            self._closed = True
            asyncio.get_running_loop().call_later(self._close_timeout, self._give_up.set)
            if self._task is not None:
                await self._queue.put(None)
        if self._task is not None:
            await asyncio.shield(self._task)

    # -- the loop that batches and sends ----------------------------------------

    async def _next(self, block: bool) -> Optional[_Pending] | bool:
        """The next item, None once closed, False when none waits and block is false."""
        if self._held:
            return self._held.popleft()
        if block:
            return await self._queue.get()
        try:
            return self._queue.get_nowait()
        except asyncio.QueueEmpty:
            return False

    async def _open(self) -> _Stream:
        bo = Backoff(1.0)
        c = self._client
        while True:
            try:
                limits = self._limits = await c.limits()
                call = c._broker.PublishStream(metadata=c._metadata, wait_for_ready=True)
                await call.wait_for_connection()
                return _Stream(call, limits, self._window, self._max_batch, self._max_batch_bytes)
            except grpc.aio.AioRpcError as e:
                err = from_rpc_error(e)
            except HarbingerError as e:
                err = e
            if not isinstance(err, Unavailable) or c.closed:
                raise err
            await asyncio.sleep(bo.next())

    async def _open_or_give_up(self) -> _Stream:
        opening = asyncio.ensure_future(self._open())
        giving_up = asyncio.ensure_future(self._give_up.wait())
        try:
            done, _ = await asyncio.wait({opening, giving_up}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            giving_up.cancel()
        if opening in done:
            return opening.result()
        opening.cancel()
        raise Unavailable(f"harbinger: producer closed while the broker was unreachable "
                          f"(gave up after {self._close_timeout}s); message not sent")

    async def _run(self) -> None:
        stream: Optional[_Stream] = None
        try:
            while True:
                first = await self._next(block=True)
                if first is None or first is False:
                    break
                assert isinstance(first, _Pending)
                if self._limits is not None:
                    first.prepare(self._limits)
                if first.error is not None:
                    first.fail(first.error)
                    continue
                if stream is not None and stream.broken:
                    await stream.close()
                    stream = None
                if stream is None:
                    try:
                        stream = await self._open_or_give_up()
                    except HarbingerError as e:
                        first.fail(e)
                        continue
                batch = self._gather(first, stream)
                if not batch:
                    continue
                err = await stream.send(batch)
                if err is None:
                    continue
                # A batch the stream never took goes again, once, on a new one.
                again = []
                for it in batch:
                    if it.future.done():
                        continue
                    if it.resent:
                        it.fail(err)
                    else:
                        it.resent = True
                        again.append(it)
                self._held.extendleft(reversed(again))
        finally:
            if stream is not None:
                await stream.close()
            while self._held:
                left = self._held.popleft()
                if left is not None:
                    left.fail(ProducerClosed())
            while not self._queue.empty():
                left = self._queue.get_nowait()
                if left is not None:
                    left.fail(ProducerClosed())

    def _gather(self, first: _Pending, s: _Stream) -> list[_Pending]:
        batch: list[_Pending] = []
        total = 0
        it: Optional[_Pending] = first
        while it is not None:
            it.prepare(s.limits)
            if it.error is not None:
                it.fail(it.error)
            elif it.size > s.hard:
                it.fail(InvalidArgument(
                    f"harbinger: message encodes to {it.size} bytes, more than one request may carry "
                    f"({s.hard} bytes); not sent: store the body elsewhere and publish a reference"))
            elif batch and total + it.size > s.target:
                self._held.appendleft(it)
                break
            else:
                batch.append(it)
                total += it.size
            if len(batch) >= s.count:
                break
            nxt = self._held.popleft() if self._held else self._take_nowait()
            if nxt is None:  # closing: keep the marker for the loop
                self._held.appendleft(None)
                break
            it = nxt if isinstance(nxt, _Pending) else None
        return batch

    def _take_nowait(self) -> Optional[_Pending] | bool:
        try:
            return self._queue.get_nowait()
        except asyncio.QueueEmpty:
            return False
