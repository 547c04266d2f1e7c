"""A synchronous client for producers in scripts and web handlers."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Coroutine, Iterable, Optional, Sequence, TypeVar

from ._client import Client
from ._message import Limits, Message, PublishResult
from .v1 import harbinger_pb2 as pb

T = TypeVar("T")


class SyncClient:
    """A blocking Client: each call runs on an event loop of its own, in a
    background thread, so it can be used from code that is not async (a
    script, a WSGI handler) and from any number of threads at once.

    Takes the same arguments as Client. For workers, use the asyncio Client.
    """

    def __init__(self, target: str, **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="harbinger", daemon=True)
        self._thread.start()

        async def make() -> Client:
            return Client(target, **options)

        self._client = self._run(make())

    def _run(self, coro: Coroutine[Any, Any, T], timeout: Optional[float] = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def __enter__(self) -> "SyncClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Closes the connection and stops the background loop."""
        if self._loop.is_closed():
            return
        self._run(self._client.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def limits(self) -> Limits:
        return self._run(self._client.limits())

    def publish(self, msg: Message, *, timeout: Optional[float] = None) -> str:
        """See Client.publish."""
        return self._run(self._client.publish(msg, timeout=timeout))

    def publish_many(self, msgs: Iterable[Message], *, timeout: Optional[float] = None) -> list[str]:
        """See Client.publish_many: raises PublishError naming what was stored."""
        return self._run(self._client.publish_many(list(msgs), timeout=timeout))

    def publish_each(self, msgs: Iterable[Message], *, timeout: Optional[float] = None) -> list[PublishResult]:
        """See Client.publish_each: one PublishResult per message."""
        return self._run(self._client.publish_each(list(msgs), timeout=timeout))

    def declare_queue(self, name: str, config: Optional[pb.QueueConfig] = None) -> pb.QueueInfo:
        return self._run(self._client.declare_queue(name, config))

    def queue(self, name: str) -> pb.QueueInfo:
        return self._run(self._client.queue(name))

    def list_queues(self) -> list[pb.QueueInfo]:
        return self._run(self._client.list_queues())

    def get_job(self, queue: str, id: str) -> pb.JobInfo:
        return self._run(self._client.get_job(queue, id))

    def cancel_job(self, queue: str, id: str) -> str:
        return self._run(self._client.cancel_job(queue, id))

    def list_jobs(self, queue: str, limit: int = 0) -> pb.ListJobsResponse:
        return self._run(self._client.list_jobs(queue, limit))

    def pause_queue(self, name: str) -> pb.QueueInfo:
        return self._run(self._client.pause_queue(name))

    def resume_queue(self, name: str) -> pb.QueueInfo:
        return self._run(self._client.resume_queue(name))

    def purge_queue(self, name: str) -> int:
        return self._run(self._client.purge_queue(name))

    def list_dead_letters(self, queue: str, limit: int = 0) -> list[pb.DeadLetter]:
        return self._run(self._client.list_dead_letters(queue, limit))

    def requeue_dead_letters(self, queue: str, ids: Sequence[str] = ()) -> int:
        return self._run(self._client.requeue_dead_letters(queue, ids))

    def declare_schedule(self, schedule: pb.Schedule) -> pb.Schedule:
        return self._run(self._client.declare_schedule(schedule))

    def list_schedules(self) -> list[pb.Schedule]:
        return self._run(self._client.list_schedules())

    def delete_schedule(self, name: str) -> None:
        self._run(self._client.delete_schedule(name))
