import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import harbinger
from harbinger import Job, Message, pb
from brokerproc import Broker
from aio import run, until


def test_acks_with_the_measured_duration(addr: str, queue: str) -> None:
    async def main() -> None:
        async with harbinger.Client(addr) as c:
            await c.declare_queue(queue, pb.QueueConfig(keep_done=10))
            ids = await c.publish_many([Message(queue=queue, job_type="sleep") for _ in range(3)])
            done = asyncio.Event()
            seen: list[Job] = []

            async def handler(job: Job) -> None:
                await asyncio.sleep(0.2)
                seen.append(job)
                if len(seen) == 3:
                    done.set()

            w = c.worker(queue, handler, concurrency=3)
            t = asyncio.ensure_future(w.run())
            await done.wait()

            async def settled() -> bool:
                return all([(await c.get_job(queue, i)).state == "done" for i in ids])
            await until(settled, "three acks")
            for i in ids:
                took = (await c.get_job(queue, i)).took
                secs = took.seconds + took.nanos / 1e9
                assert 0.2 <= secs < 1.0, secs
            assert {j.attempt for j in seen} == {1} and {j.job_type for j in seen} == {"sleep"}
            w.stop()
            await t
    run(main())


def test_exception_nacks_with_its_text_and_broker_backoff(addr: str, queue: str) -> None:
    async def main() -> None:
        async with harbinger.Client(addr) as c:
            await c.declare_queue(queue, pb.QueueConfig(max_attempts=2, retry_base=harbinger.duration(0.05)))
            await c.publish_many([Message(queue=queue, job_type="boom"), Message(queue=queue, job_type="long"),
                                  Message(queue=queue, job_type="dead")])
            attempts: dict[str, list[int]] = {}

            async def handler(job: Job) -> None:
                attempts.setdefault(job.job_type, []).append(job.attempt)
                if job.job_type == "boom":
                    raise ValueError("boom")
                if job.job_type == "dead":
                    raise harbinger.DeadLetter("bad input")
                raise RuntimeError("é" * 2000)

            w = c.worker(queue, handler)
            t = asyncio.ensure_future(w.run())

            async def dead() -> bool:
                return len(await c.list_dead_letters(queue)) == 3
            await until(dead, "three dead letters")
            w.stop()
            await t
            by_type = {d.job_type: d for d in await c.list_dead_letters(queue)}
            assert by_type["boom"].reason == "nacked: ValueError: boom (attempt 2 of 2)"
            assert by_type["boom"].attempts == 2 and attempts["boom"] == [1, 2]
            assert "bad input" in by_type["dead"].reason and attempts["dead"] == [1]
            # The reason sent is cut to 512 bytes on a character boundary: 14
            # bytes of "RuntimeError: " and 249 two-byte characters.
            long = by_type["long"].reason
            assert "RuntimeError: " + "é" * 249 + " (attempt" in long, long
    run(main())


def test_long_handler_keeps_its_lease(addr: str, queue: str) -> None:
    async def main() -> None:
        async with harbinger.Client(addr) as c:
            await c.declare_queue(queue, pb.QueueConfig(lease=harbinger.duration(1), keep_done=1))
            jid = await c.publish(Message(queue=queue))
            runs: list[int] = []

            async def handler(job: Job) -> None:
                runs.append(job.attempt)
                await asyncio.sleep(2.5)

            w = c.worker(queue, handler, concurrency=2)
            t = asyncio.ensure_future(w.run())

            async def done() -> bool:
                return (await c.get_job(queue, jid)).state == "done"
            await until(done, "the ack")
            assert runs == [1], "the lease ran out and the job ran again"
            w.stop()
            await t
    run(main())


def test_cancel_stops_the_running_handler(addr: str, queue: str) -> None:
    async def main() -> None:
        async with harbinger.Client(addr) as c:
            jid = await c.publish(Message(queue=queue))
            started = asyncio.Event()
            cancelled = asyncio.Event()
            runs = 0

            async def handler(job: Job) -> None:
                nonlocal runs
                runs += 1
                started.set()
                try:
                    await asyncio.sleep(60)
                except asyncio.CancelledError:
                    cancelled.set()
                    raise

            w = c.worker(queue, handler)
            t = asyncio.ensure_future(w.run())
            await started.wait()
            assert await c.cancel_job(queue, jid) == "running"
            await cancelled.wait()

            async def gone() -> bool:
                try:
                    await c.get_job(queue, jid)
                    return False
                except harbinger.NotFound:
                    return True
            await until(gone, "the cancelled job to end")
            q = await c.queue(queue)
            assert q.ready == 0 and q.in_flight == 0 and q.dead_letters == 0 and runs == 1
            w.stop()
            await t
    run(main())


def test_timeout_cancels_and_retries(addr: str, queue: str) -> None:
    async def main() -> None:
        async with harbinger.Client(addr) as c:
            await c.declare_queue(queue, pb.QueueConfig(max_attempts=1))
            await c.publish(Message(queue=queue))

            async def handler(job: Job) -> None:
                await asyncio.sleep(30)

            w = c.worker(queue, handler, timeout=0.2)
            t = asyncio.ensure_future(w.run())

            async def dead() -> bool:
                return len(await c.list_dead_letters(queue)) == 1
            await until(dead, "the timed-out job's dead letter")
            assert (await c.list_dead_letters(queue))[0].reason == "nacked: timed out after 0.2s (attempt 1 of 1)"
            w.stop()
            await t
    run(main())


def test_stop_returns_jobs_it_cannot_finish(addr: str, queue: str) -> None:
    async def main() -> None:
        async with harbinger.Client(addr) as c:
            await c.publish_many([Message(queue=queue, job_type="slow"), Message(queue=queue, job_type="quick")])
            running = asyncio.Event()
            quick_done = asyncio.Event()
            started: list[str] = []

            async def handler(job: Job) -> None:
                started.append(job.job_type)
                if len(started) == 2:
                    running.set()
                if job.job_type == "quick":
                    await asyncio.sleep(0.3)
                    quick_done.set()
                    return
                await asyncio.sleep(60)

            w = c.worker(queue, handler, concurrency=2, stop_timeout=1.0)
            t = asyncio.ensure_future(w.run())
            await running.wait()
            w.stop()
            await t
            assert quick_done.is_set(), "a job that finishes within stop_timeout is finished"
            q = await c.queue(queue)
            assert q.ready == 1 and q.in_flight == 0 and q.acked >= 1
            jobs = await c.list_jobs(queue)
            assert jobs.waiting[0].job_type == "slow"
    run(main())


def test_sigterm_finishes_the_running_job(addr: str, queue: str, tmp_path: Path) -> None:
    """The example worker, as a process: SIGTERM lets its running job finish and ack."""
    async def main() -> None:
        async with harbinger.Client(addr) as c:
            await c.declare_queue(queue, pb.QueueConfig(keep_done=5))
            jid = await c.publish(Message(queue=queue, job_type="sleep", payload=b"1.0"))
            example = Path(__file__).parents[1] / "examples" / "worker.py"
            env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[1] / "src"))
            proc = await asyncio.create_subprocess_exec(
                sys.executable, str(example), "--addr", addr, "--queue", queue,
                stdout=subprocess.PIPE, env=env)
            assert proc.stdout is not None
            line = await proc.stdout.readline()  # "started <id>"
            assert line.decode().split() == ["started", jid], line
            proc.send_signal(signal.SIGTERM)
            assert await proc.wait() == 0
            info = await c.get_job(queue, jid)
            assert info.state == "done"
    run(main())


def test_reconnects_when_the_broker_restarts(tmp_path: Path, queue: str) -> None:
    b = Broker(data_dir=str(tmp_path / "data"))
    addr = b.start()
    try:
        async def main() -> None:
            async with harbinger.Client(addr) as c:
                await c.publish_many([Message(queue=queue, payload=b"%d" % i) for i in range(40)])
                seen: set[bytes] = set()
                first = asyncio.Event()
                all_done = asyncio.Event()

                async def handler(job: Job) -> None:
                    await asyncio.sleep(0.01)
                    seen.add(job.payload)
                    if len(seen) >= 10:
                        first.set()
                    if len(seen) == 60:
                        all_done.set()

                w = c.worker(queue, handler, concurrency=2, max_reconnect_delay=0.5)
                t = asyncio.ensure_future(w.run())
                await first.wait()
                await asyncio.to_thread(b.stop)
                await asyncio.to_thread(b.start)
                # Published after the restart: the client's connection comes back too.
                await c.publish_many([Message(queue=queue, payload=b"%d" % i) for i in range(40, 60)])
                await all_done.wait()
                w.stop()
                await t
                q = await c.queue(queue)
                assert q.ready == 0 and q.in_flight == 0
        run(main())
    finally:
        b.kill()


def test_stop_while_the_broker_is_unreachable() -> None:
    """A worker waiting for a broker that is not there stops at once."""
    async def main() -> None:
        async with harbinger.Client("127.0.0.1:1") as c:
            async def handler(job: Job) -> None:
                pass
            w = c.worker("py.unreachable", handler, concurrency=4)
            t = asyncio.ensure_future(w.run())
            await asyncio.sleep(0.3)
            w.stop()
            await asyncio.wait_for(t, 5)
    run(main())


def test_closing_the_client_ends_run_with_unavailable(addr: str, queue: str) -> None:
    """Closing the client under a running worker makes run() raise
    Unavailable (not a bare cancellation), and the job it held goes back
    to the queue for another worker."""
    async def main() -> None:
        async with harbinger.Client(addr) as admin:
            jid = await admin.publish(Message(queue=queue, payload="ünïcode".encode() * 300))
            c = harbinger.Client(addr)
            started = asyncio.Event()

            async def handler(job: Job) -> None:
                started.set()
                await asyncio.sleep(60)

            w = c.worker(queue, handler)
            t = asyncio.ensure_future(w.run())
            await started.wait()
            await c.close()
            with pytest.raises(harbinger.Unavailable, match="client closed"):
                await asyncio.wait_for(t, 10)

            async def back() -> bool:
                return (await admin.get_job(queue, jid)).state == "waiting"
            await until(back, "the held job to return to the queue")
    run(main())


def test_invalid_queue_is_fatal(addr: str) -> None:
    async def main() -> None:
        async with harbinger.Client(addr) as c:
            async def handler(job: Job) -> None:
                pass
            with pytest.raises(harbinger.InvalidArgument):
                await c.run_worker("bad queue name", handler)
            with pytest.raises(harbinger.InvalidArgument):
                c.worker("q\udc00", handler)
    run(main())
