/**
 * Batched frames on the Consume stream: several deliveries in one response
 * (DeliveryBatch) and several acks and nacks in one request (ConsumeBatch),
 * against a real broker. A spy on the client's Consume calls records the
 * frames that went each way, so that each test also shows batches were
 * used.
 */
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { Broker, start, until } from "./broker.js";
import { Client, DeadLetter, HarbingerError, Status, durationFromMs, pb, type Job } from "../src/index.js";
import { methods } from "../src/client.js";
import { settleRequests } from "../src/worker.js";

const broker = new Broker();
let addr = "";
before(async () => {
  addr = await broker.start();
});
after(() => broker.stop());

interface Frames {
  received: number[]; // deliveries in each response
  sent: pb.ConsumeRequest[];
}

/** Records every frame of c's Consume streams. */
function spy(c: Client): Frames {
  const f: Frames = { received: [], sent: [] };
  const bidi = c.rpc.bidi.bind(c.rpc);
  c.rpc.bidi = ((m: Parameters<typeof bidi>[0]) => {
    const call = bidi(m);
    const write = call.write.bind(call) as (...args: unknown[]) => boolean;
    call.write = ((req: unknown, ...rest: unknown[]) => {
      f.sent.push(req as pb.ConsumeRequest);
      return write(req, ...rest);
    }) as typeof call.write;
    call.on("data", (resp: pb.ConsumeResponse) => {
      const r = resp.response;
      if (r.case === "delivery") f.received.push(1);
      if (r.case === "deliveries") f.received.push(r.value.deliveries.length);
    });
    return call;
  }) as typeof c.rpc.bidi;
  return f;
}

const batches = (f: Frames) => f.sent.flatMap((r) => (r.request.case === "batch" ? [r.request.value] : []));
const subscribe = (f: Frames) => f.sent.find((r) => r.request.case === "subscribe")!.request.value as pb.Subscribe;

const TEXT = "héllo wörld ✓ 日本語 🚀 Ωμέγα ";
/** About 2 KiB of UTF-8 text, different for each job. */
const payload = (i: number) => `${i}: ` + TEXT.repeat(50);

test("batches run each job once and their acks settle every job", async () => {
  const c = new Client(addr);
  const f = spy(c);
  const queue = "ts.batch";
  const n = 300;
  try {
    assert.ok((await c.limits()).maxConsumeBatch > 1, "the broker reads batches");
    await c.declareQueue(queue, { keepDone: n });
    const ids = await c.publishMany(
      Array.from({ length: n }, (_, i) => ({ queue, jobType: "résumé", payload: payload(i), headers: { note: `ünïcode ${i} ✓` } })),
    );
    const index = new Map(ids.map((id, i) => [id, i]));
    const runs = new Map<string, number>();
    const wrong: string[] = [];
    const stop = start(c, queue, async (job) => {
      runs.set(job.id, (runs.get(job.id) ?? 0) + 1);
      const i = index.get(job.id)!;
      if (job.payload.toString() !== payload(i) || job.headers.note !== `ünïcode ${i} ✓` || job.jobType !== "résumé") wrong.push(job.id);
    }, { concurrency: 4, prefetch: 32 });
    await until(async () => {
      const q = await c.queue(queue);
      return q.acked === BigInt(n) && q.ready === 0n && q.inFlight === 0n;
    }, `${n} acks`);
    await stop();
    assert.deepEqual(wrong, [], "jobs handed over with another payload or headers");
    assert.deepEqual(new Set(runs.keys()), new Set(ids));
    assert.deepEqual(new Set(runs.values()), new Set([1]), "each job ran exactly once");
    for (const id of ids) assert.equal((await c.getJob(queue, id)).state, "done");
    const q = await c.queue(queue);
    assert.equal(q.deadLetters + q.delayed, 0n);

    assert.equal(subscribe(f).maxBatch, 32);
    assert.ok(Math.max(...f.received) > 1, "the broker sent batches of deliveries");
    assert.ok(Math.max(...f.received) <= 32);
    assert.equal(f.received.reduce((a, b) => a + b, 0), n);
    assert.ok(Math.max(0, ...batches(f).map((b) => b.acks.length)) > 1, "acks went out in batches");
  } finally {
    c.close();
  }
});

test("a nack inside a batch is honoured", async () => {
  const c = new Client(addr);
  const f = spy(c);
  const queue = "ts.batch.nack";
  try {
    await c.declareQueue(queue, { maxAttempts: 2, retryBase: durationFromMs(50), keepDone: 100 });
    const kinds = Array.from({ length: 3 }, () => ["ok", "retry", "dead", "ok", "ok", "retry", "ok", "dead"]).flat();
    const ids = await c.publishMany(kinds.map((k, i) => ({ queue, jobType: k, payload: payload(i) })));
    const attempts = new Map<string, number[]>();
    const stop = start(c, queue, async (job) => {
      attempts.set(job.id, [...(attempts.get(job.id) ?? []), job.attempt]);
      if (job.jobType === "dead") throw new DeadLetter("bad input: ✗");
      if (job.jobType === "retry" && job.attempt === 1) throw new TypeError("first try fails: ✗");
    }, { concurrency: 8, prefetch: 8 });
    await until(async () => {
      const q = await c.queue(queue);
      return q.deadLetters === 6n && q.acked === 18n && q.ready + q.inFlight + q.delayed === 0n;
    }, "18 acks and 6 dead letters");
    await stop();
    for (const [i, id] of ids.entries()) {
      const want = { ok: [1], retry: [1, 2], dead: [1] }[kinds[i]];
      assert.deepEqual(attempts.get(id), want, kinds[i]);
      if (kinds[i] !== "dead") assert.equal((await c.getJob(queue, id)).state, "done");
    }
    const dead = await c.listDeadLetters(queue);
    assert.deepEqual(new Set(dead.map((d) => d.id)), new Set(ids.filter((_, i) => kinds[i] === "dead")));
    for (const d of dead) assert.match(d.reason, /bad input: ✗/);

    assert.ok(batches(f).some((b) => b.acks.length > 0 && b.nacks.length > 0), "acks and nacks went out in one batch");
    const actions = new Set(batches(f).flatMap((b) => b.nacks.map((x) => x.action)));
    assert.ok(actions.has(pb.NackAction.RETRY) && actions.has(pb.NackAction.DEAD_LETTER));
  } finally {
    c.close();
  }
});

test("prefetch 1 sends and receives single frames", async () => {
  const c = new Client(addr);
  const f = spy(c);
  const queue = "ts.batch.single";
  try {
    await c.publishMany(Array.from({ length: 20 }, (_, i) => ({ queue, payload: payload(i) })));
    const seen: string[] = [];
    const stop = start(c, queue, async (job) => {
      seen.push(job.payload.toString());
    });
    await until(async () => {
      const q = await c.queue(queue);
      return q.acked === 20n && q.ready + q.inFlight === 0n;
    }, "20 acks");
    await stop();
    assert.deepEqual(seen.sort(), Array.from({ length: 20 }, (_, i) => payload(i)).sort());
    assert.equal(subscribe(f).prefetch, 1);
    assert.ok(subscribe(f).maxBatch <= 1);
    assert.deepEqual(new Set(f.received), new Set([1]));
    assert.equal(batches(f).length, 0);
  } finally {
    c.close();
  }
});

test("a broker without batches gets single frames", async () => {
  // A broker older than GetLimits answers it Unimplemented: it neither sends
  // nor reads batches, so a worker with room for many jobs subscribes
  // without maxBatch and settles each job in a frame of its own.
  const c = new Client(addr);
  const f = spy(c);
  const queue = "ts.batch.none";
  const n = 120;
  try {
    const ids = await c.publishMany(Array.from({ length: n }, (_, i) => ({ queue, jobType: "résumé", payload: payload(i) })));
    const index = new Map(ids.map((id, i) => [id, i]));
    const unary = c.rpc.unary.bind(c.rpc);
    c.rpc.unary = ((m: Parameters<typeof unary>[0], ...rest: unknown[]) => {
      if (m === (methods.getLimits as unknown)) {
        return Promise.reject(new HarbingerError(Status.UNIMPLEMENTED, "unknown method GetLimits for service harbinger.v1.Broker"));
      }
      return (unary as (...args: unknown[]) => unknown)(m, ...rest);
    }) as typeof c.rpc.unary;
    assert.equal((await c.limits({ refresh: true })).maxConsumeBatch, 0);
    const runs = new Map<string, number>();
    const wrong: string[] = [];
    const stop = start(c, queue, async (job) => {
      runs.set(job.id, (runs.get(job.id) ?? 0) + 1);
      await new Promise((r) => setTimeout(r, 1));
      if (job.payload.toString() !== payload(index.get(job.id)!)) wrong.push(job.id);
    }, { concurrency: 4, prefetch: 16 });
    await until(async () => {
      const q = await c.queue(queue);
      return q.acked === BigInt(n) && q.ready + q.inFlight === 0n;
    }, `${n} acks`);
    await stop();
    assert.deepEqual(wrong, [], "jobs handed over with another payload");
    assert.deepEqual(new Set(runs.keys()), new Set(ids));
    assert.deepEqual(new Set(runs.values()), new Set([1]), "each job ran exactly once");

    assert.equal(subscribe(f).prefetch, 16);
    assert.equal(subscribe(f).maxBatch, 0, "no batches asked of a broker without them");
    assert.deepEqual(new Set(f.received), new Set([1]));
    assert.equal(f.received.length, n);
    assert.equal(batches(f).length, 0, "no ConsumeBatch sent to a broker that reads none");
    assert.equal(f.sent.filter((r) => r.request.case === "ack").length, n);
  } finally {
    c.close();
  }
});

test("settleRequests cuts at the limit", () => {
  const ack = (id: string) => ({ case: "ack" as const, value: create(pb.AckSchema, { id, credit: 1 }) });
  const nack = (id: string) => ({ case: "nack" as const, value: create(pb.NackSchema, { id, action: pb.NackAction.RETRY, credit: 1 }) });
  const one = settleRequests([ack("a0")], 4);
  assert.equal(one.length, 1);
  assert.equal(one[0].request.case, "ack");
  assert.equal(settleRequests([nack("n0")], 4)[0].request.case, "nack");
  const reqs = settleRequests([ack("a0"), ack("a1"), ack("a2"), ack("a3"), ack("a4"), nack("n0"), nack("n1")], 3);
  assert.deepEqual(reqs.map((r) => r.request.case), ["batch", "batch", "nack"]);
  const [b0, b1] = reqs.map((r) => r.request.value as pb.ConsumeBatch);
  assert.deepEqual(b0.acks.map((a) => a.id), ["a0", "a1", "a2"]);
  assert.equal(b0.nacks.length, 0);
  assert.deepEqual(b1.acks.map((a) => a.id), ["a3", "a4"]);
  assert.deepEqual(b1.nacks.map((x) => x.id), ["n0"]);
  assert.equal((reqs[2].request.value as pb.Nack).id, "n1");
});
