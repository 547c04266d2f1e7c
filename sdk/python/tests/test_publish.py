import asyncio

import pytest

import harbinger
from harbinger import Message


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_publish_one_many_each(addr: str, queue: str) -> None:
    async def main() -> None:
        async with harbinger.Client(addr) as c:
            one = await c.publish(Message(queue=queue, producer="web", job_type="a", payload=b"1"))
            assert one
            ids = await c.publish_many([Message(queue=queue, payload=b"%d" % i) for i in range(5)])
            assert len(ids) == 5 and len(set(ids)) == 5
            res = await c.publish_each([
                Message(queue=queue, unique_key="k1", unique_for=60),
                Message(queue=queue, unique_key="k1", unique_for=60),
            ])
            assert res[0].ok and not res[0].duplicate
            assert res[1].ok and res[1].duplicate and res[1].id == res[0].id
            q = await c.queue(queue)
            assert q.ready == 7
    run(main())


def test_refused_before_sending_names_message_and_field(addr: str, queue: str) -> None:
    async def main() -> None:
        async with harbinger.Client(addr) as c:
            lim = await c.limits()
            msgs = [
                Message(queue=queue, payload=b"ok"),
                Message(queue=queue, job_type="bad\udc80"),
                Message(queue=queue, headers={"h": "\ud800"}),
                Message(queue=queue, payload=b"x" * (lim.max_payload_bytes + 1)),
                Message(queue=queue, headers={"big": "v" * (lim.max_header_bytes + 1)}),
                Message(queue=queue, payload=b"ok too"),
            ]
            res = await c.publish_each(msgs)
            assert [r.ok for r in res] == [True, False, False, False, False, True]
            for i, field in [(1, "job_type"), (2, "header 'h'"), (3, "payload"), (4, "headers")]:
                err = res[i].error
                assert isinstance(err, harbinger.InvalidArgument)
                assert f"message {i}" in err.message and f"field {field}" in err.message, err.message
            assert (await c.queue(queue)).ready == 2

            with pytest.raises(harbinger.PublishError) as ei:
                await c.publish_many(msgs)
            pe = ei.value
            assert sorted(pe.stored) == [0, 5] and len(pe.ids) == 2
            assert [f.index for f in pe.failed] == [1, 2, 3, 4]
            assert pe.code.name == "INVALID_ARGUMENT"
            assert "4 of 6 messages not stored" in str(pe)

            with pytest.raises(harbinger.InvalidArgument):
                await c.publish(Message(queue=queue, producer="\udfff"))
    run(main())


def test_broker_refusal_is_per_message(addr: str, queue: str) -> None:
    async def main() -> None:
        async with harbinger.Client(addr) as c:
            res = await c.publish_each([
                Message(queue=queue), Message(queue=queue + " bad name"), Message(queue=queue, ttl=-1),
            ])
            assert res[0].ok
            assert isinstance(res[1].error, harbinger.InvalidArgument) and "queue" in res[1].error.message
            assert isinstance(res[2].error, harbinger.InvalidArgument) and "ttl" in res[2].error.message
    run(main())


def test_producer_keeps_a_window(addr: str, queue: str) -> None:
    async def main() -> None:
        async with harbinger.Client(addr) as c:
            async with c.producer(max_batch=64, window=4) as p:
                futs = [await p.enqueue(Message(queue=queue, payload=b"%d" % i)) for i in range(2000)]
                bad = await p.enqueue(Message(queue=queue, job_type="\udc00"))
                futs += [await p.enqueue(Message(queue=queue)) for _ in range(10)]
                results = await asyncio.gather(*futs)
                assert all(r.ok for r in results)
                assert len({r.id for r in results}) == 2010
                r = await bad
                assert isinstance(r.error, harbinger.InvalidArgument) and "job_type" in r.error.message
                assert await p.publish(Message(queue=queue))
            with pytest.raises(harbinger.ProducerClosed):
                await p.enqueue(Message(queue=queue))
            assert (await c.queue(queue)).ready == 2011
    run(main())


def test_sync_client(addr: str, queue: str) -> None:
    with harbinger.SyncClient(addr) as c:
        ids = c.publish_many([Message(queue=queue, job_type="x") for _ in range(3)])
        assert len(ids) == 3
        assert c.get_job(queue, ids[0]).state == "waiting"
        assert c.cancel_job(queue, ids[0]) == "waiting"
        with pytest.raises(harbinger.NotFound):
            c.get_job(queue, ids[0])
        assert c.queue(queue).ready == 2


def test_admin_calls(addr: str, queue: str) -> None:
    async def main() -> None:
        async with harbinger.Client(addr) as c:
            info = await c.declare_queue(queue, harbinger.pb.QueueConfig(max_attempts=3, lease=harbinger.duration(5)))
            assert info.config.max_attempts == 3
            assert (await c.pause_queue(queue)).paused
            assert not (await c.resume_queue(queue)).paused
            await c.publish(Message(queue=queue, producer="p", job_type="t"))
            jobs = await c.list_jobs(queue)
            assert len(jobs.waiting) == 1 and jobs.waiting[0].job_type == "t"
            s = await c.declare_schedule(harbinger.pb.Schedule(
                name=queue + ".tick", queue=queue, every=harbinger.duration(3600), job_type="tick"))
            assert s.name == queue + ".tick"
            assert any(x.name == s.name for x in await c.list_schedules())
            assert (await c.pause_schedule(s.name)).paused
            await c.delete_schedule(s.name)
            assert await c.purge_queue(queue) == 1
            assert (await c.delete_queue(queue)).waiting == 0
            with pytest.raises(harbinger.NotFound):
                await c.queue(queue)
            with pytest.raises(harbinger.NotFound):
                await c.get_job(queue, "nope")
    run(main())


def test_list_groups(addr: str, queue: str) -> None:
    async def main() -> None:
        async with harbinger.Client(addr) as c:
            await c.declare_queue(queue, harbinger.pb.QueueConfig(group_by="tenant", limits=["tenant=2"]))
            for tenant in ("zürich", "東京", "東京"):
                await c.publish(Message(queue=queue, job_type="t", payload=b"\xff" * 2048, headers={"tenant": tenant}))
            resp = await c.list_groups(queue)
            assert resp.group_count == 2
            assert {g.name: (g.waiting, g.limit, g.running) for g in resp.groups} == {"zürich": (1, 2, 0), "東京": (2, 2, 0)}
            await c.publish(Message(queue=queue + ".plain"))
            with pytest.raises(harbinger.FailedPrecondition) as e:
                await c.list_groups(queue + ".plain")
            assert "declares no limits" in str(e.value)
    run(main())


def test_producer_gives_up_on_an_unreachable_broker_at_close() -> None:
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now

    async def main() -> None:
        async with harbinger.Client(f"127.0.0.1:{port}") as c:
            p = c.producer(close_timeout=0.3)
            fut = await p.enqueue(Message(queue="q"))  # queued at once, broker or not
            assert not fut.done()
            await p.close()
            r = await fut
            assert isinstance(r.error, harbinger.Unavailable) and "unreachable" in r.error.message
    run(main())


def test_publish_timeout_while_the_broker_is_down() -> None:
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()

    async def main() -> None:
        async with harbinger.Client(f"127.0.0.1:{port}") as c:
            with pytest.raises(harbinger.DeadlineExceeded):
                await c.publish(Message(queue="q"), timeout=0.3)
    run(main())
