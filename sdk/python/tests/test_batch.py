"""Batched frames on the Consume stream: several deliveries in one response
(DeliveryBatch) and several acks and nacks in one request (ConsumeBatch),
against a real broker. A spy on the worker's session records the frames
that went each way, so that each test also shows batches were used."""

import asyncio
import collections
from dataclasses import dataclass, field
from typing import Iterator

import grpc
import pytest

import harbinger
from harbinger import Job, Message, pb
from harbinger import _worker
from aio import run, until


@dataclass
class Frames:
    received: list[int] = field(default_factory=list)  # deliveries in each response
    sent: list[pb.ConsumeRequest] = field(default_factory=list)

    def batches(self) -> list[pb.ConsumeBatch]:
        return [r.batch for r in self.sent if r.WhichOneof("request") == "batch"]

    def subscribe(self) -> pb.Subscribe:
        return next(r.subscribe for r in self.sent if r.WhichOneof("request") == "subscribe")


@pytest.fixture
def frames(monkeypatch: pytest.MonkeyPatch) -> Iterator[Frames]:
    f = Frames()
    receive, send = _worker._Session.receive, _worker._Session.send

    def spy_receive(self: _worker._Session, ds):  # type: ignore[no-untyped-def]
        f.received.append(len(ds))
        receive(self, ds)

    async def spy_send(self: _worker._Session, req: pb.ConsumeRequest) -> None:
        f.sent.append(req)
        await send(self, req)

    monkeypatch.setattr(_worker._Session, "receive", spy_receive)
    monkeypatch.setattr(_worker._Session, "send", spy_send)
    yield f


TEXT = "héllo wörld ✓ 日本語 🚀 Ωμέγα "


def payload(i: int) -> bytes:
    """About 2 KiB of UTF-8 text, different for each job."""
    return (f"{i}: " + TEXT * 50).encode()


def test_batches_run_each_job_once_and_settle_all(addr: str, queue: str, frames: Frames) -> None:
    n = 300

    async def main() -> None:
        async with harbinger.Client(addr) as c:
            assert (await c.limits()).max_consume_batch > 1, "the broker reads batches"
            await c.declare_queue(queue, pb.QueueConfig(keep_done=n))
            sent = {i: payload(i) for i in range(n)}
            ids = await c.publish_many([
                Message(queue=queue, job_type="résumé", payload=sent[i], headers={"note": f"ünïcode {i} ✓"})
                for i in range(n)])
            by_id = dict(zip(ids, range(n)))
            runs: collections.Counter[str] = collections.Counter()
            wrong: list[str] = []

            async def handler(job: Job) -> None:
                runs[job.id] += 1
                i = by_id[job.id]
                if job.payload != sent[i] or job.headers != {"note": f"ünïcode {i} ✓"} or job.job_type != "résumé":
                    wrong.append(job.id)

            w = c.worker(queue, handler, concurrency=4, prefetch=32)
            t = asyncio.ensure_future(w.run())

            async def settled() -> bool:
                q = await c.queue(queue)
                return q.acked == n and q.ready == 0 and q.in_flight == 0
            await until(settled, f"{n} acks")
            w.stop()
            await t
            assert not wrong, f"jobs handed over with another payload or headers: {wrong[:3]}"
            assert set(runs) == set(ids) and set(runs.values()) == {1}, "each job ran exactly once"
            for jid in ids:
                assert (await c.get_job(queue, jid)).state == "done"
            q = await c.queue(queue)
            assert q.dead_letters == 0 and q.delayed == 0

        assert frames.subscribe().max_batch == 32
        assert max(frames.received) > 1, "the broker sent batches of deliveries"
        assert max(frames.received) <= 32
        batches = frames.batches()
        assert batches and max(len(b.acks) for b in batches) > 1, "acks went out in batches"
        assert sum(frames.received) == n
    run(main())


def test_nacks_in_a_batch_are_honoured(addr: str, queue: str, frames: Frames) -> None:
    async def main() -> None:
        async with harbinger.Client(addr) as c:
            await c.declare_queue(queue, pb.QueueConfig(max_attempts=2, retry_base=harbinger.duration(0.05),
                                                        keep_done=100))
            kinds = ["ok", "retry", "dead", "ok", "ok", "retry", "ok", "dead"] * 3
            ids = await c.publish_many([Message(queue=queue, job_type=k, payload=payload(i))
                                        for i, k in enumerate(kinds)])
            attempts: dict[str, list[int]] = collections.defaultdict(list)

            async def handler(job: Job) -> None:
                attempts[job.id].append(job.attempt)
                if job.job_type == "dead":
                    raise harbinger.DeadLetter("bad input: ✗")
                if job.job_type == "retry" and job.attempt == 1:
                    raise ValueError("first try fails: ✗")

            w = c.worker(queue, handler, concurrency=8, prefetch=8)
            t = asyncio.ensure_future(w.run())

            async def settled() -> bool:
                q = await c.queue(queue)
                return q.dead_letters == 6 and q.acked == 18 and q.ready + q.in_flight + q.delayed == 0
            await until(settled, "18 acks and 6 dead letters")
            w.stop()
            await t
            for jid, kind in zip(ids, kinds):
                want = {"ok": [1], "retry": [1, 2], "dead": [1]}[kind]
                assert attempts[jid] == want, (kind, attempts[jid])
                if kind != "dead":
                    assert (await c.get_job(queue, jid)).state == "done"
            dead = await c.list_dead_letters(queue)
            assert {d.id for d in dead} == {i for i, k in zip(ids, kinds) if k == "dead"}
            assert all("bad input: ✗" in d.reason for d in dead)

        mixed = [b for b in frames.batches() if b.acks and b.nacks]
        assert mixed, "acks and nacks went out in one batch"
        actions = {n.action for b in frames.batches() for n in b.nacks}
        assert {pb.NACK_ACTION_RETRY, pb.NACK_ACTION_DEAD_LETTER} <= actions
    run(main())


def test_prefetch_one_sends_and_receives_single_frames(addr: str, queue: str, frames: Frames) -> None:
    async def main() -> None:
        async with harbinger.Client(addr) as c:
            await c.publish_many([Message(queue=queue, payload=payload(i)) for i in range(20)])
            seen: list[bytes] = []

            async def handler(job: Job) -> None:
                seen.append(job.payload)

            w = c.worker(queue, handler)
            t = asyncio.ensure_future(w.run())

            async def settled() -> bool:
                q = await c.queue(queue)
                return q.acked == 20 and q.ready + q.in_flight == 0
            await until(settled, "20 acks")
            w.stop()
            await t
            assert sorted(seen) == sorted(payload(i) for i in range(20))
        assert frames.subscribe().prefetch == 1 and frames.subscribe().max_batch <= 1
        assert set(frames.received) == {1}
        assert not frames.batches()
    run(main())


def test_settle_requests_cut_at_the_limit() -> None:
    acks = [pb.Ack(id=f"a{i}", credit=1) for i in range(5)]
    nacks = [pb.Nack(id=f"n{i}", action=pb.NACK_ACTION_RETRY, credit=1) for i in range(2)]
    one = _worker.settle_requests(acks[:1], 4)
    assert [r.WhichOneof("request") for r in one] == ["ack"] and one[0].ack.id == "a0"
    assert _worker.settle_requests(nacks[:1], 4)[0].nack.id == "n0"
    reqs = _worker.settle_requests([*acks, *nacks], 3)
    assert [r.WhichOneof("request") for r in reqs] == ["batch", "batch", "nack"]
    assert [a.id for a in reqs[0].batch.acks] == ["a0", "a1", "a2"] and not reqs[0].batch.nacks
    assert [a.id for a in reqs[1].batch.acks] == ["a3", "a4"] and [n.id for n in reqs[1].batch.nacks] == ["n0"]
    assert reqs[2].nack.id == "n1"


def test_a_broker_without_batches_gets_single_frames(addr: str, queue: str, frames: Frames) -> None:
    """A broker older than GetLimits (it answers Unimplemented) neither sends
    nor reads batches: a worker with room for many jobs then subscribes
    without max_batch and settles each job in a frame of its own."""
    n = 120

    async def main() -> None:
        async with harbinger.Client(addr) as c:
            sent = {i: payload(i) for i in range(n)}
            ids = await c.publish_many([Message(queue=queue, job_type="résumé", payload=sent[i]) for i in range(n)])
            by_id = dict(zip(ids, range(n)))

            async def unimplemented(req, **kw):  # type: ignore[no-untyped-def]
                raise grpc.aio.AioRpcError(grpc.StatusCode.UNIMPLEMENTED, grpc.aio.Metadata(), grpc.aio.Metadata(),
                                           "unknown method GetLimits for service harbinger.v1.Broker")
            c._broker.GetLimits = unimplemented
            assert (await c.limits(refresh=True)).max_consume_batch == 0
            runs: collections.Counter[str] = collections.Counter()
            wrong: list[str] = []

            async def handler(job: Job) -> None:
                runs[job.id] += 1
                await asyncio.sleep(0.001)
                if job.payload != sent[by_id[job.id]]:
                    wrong.append(job.id)

            w = c.worker(queue, handler, concurrency=4, prefetch=16)
            t = asyncio.ensure_future(w.run())

            async def settled() -> bool:
                q = await c.queue(queue)
                return q.acked == n and q.ready + q.in_flight == 0
            await until(settled, f"{n} acks")
            w.stop()
            await t
            assert not wrong, f"jobs handed over with another payload: {wrong[:3]}"
            assert set(runs) == set(ids) and set(runs.values()) == {1}, "each job ran exactly once"

        sub = frames.subscribe()
        assert sub.prefetch == 16 and sub.max_batch == 0, "no batches asked of a broker without them"
        assert set(frames.received) == {1} and sum(frames.received) == n
        assert not frames.batches(), "no ConsumeBatch sent to a broker that reads none"
        kinds = collections.Counter(r.WhichOneof("request") for r in frames.sent)
        assert kinds["ack"] == n, kinds
    run(main())
