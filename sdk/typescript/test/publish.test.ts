import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { Broker } from "./broker.js";
import { Client, HarbingerError, ProducerClosed, PublishError, Status, isCode, durationFromMs } from "../src/index.js";
import type { Message } from "../src/index.js";

const broker = new Broker();
let addr = "";
before(async () => {
  addr = await broker.start();
});
after(() => broker.stop());

test("publish one, many and each", async () => {
  const c = new Client(addr);
  const queue = "ts.publish";
  try {
    assert.ok(await c.publish({ queue, producer: "web", jobType: "a", payload: "1" }));
    const ids = await c.publishMany(Array.from({ length: 5 }, (_, i) => ({ queue, payload: `${i}` })));
    assert.equal(new Set(ids).size, 5);
    const res = await c.publishEach([
      { queue, uniqueKey: "k1", uniqueForMs: 60_000 },
      { queue, uniqueKey: "k1", uniqueForMs: 60_000 },
    ]);
    assert.ok(!res[0].error && !res[0].duplicate);
    assert.ok(!res[1].error && res[1].duplicate && res[1].id === res[0].id);
    assert.equal((await c.queue(queue)).ready, 7n);
  } finally {
    c.close();
  }
});

test("what the broker would refuse is refused before sending, naming the message and the field", async () => {
  const c = new Client(addr);
  const queue = "ts.refuse";
  try {
    const lim = await c.limits();
    const msgs: Message[] = [
      { queue, payload: "ok" },
      { queue, jobType: "bad\uDC80" },
      { queue, headers: { h: "\uD800" } },
      { queue, payload: new Uint8Array(lim.maxPayloadBytes + 1) },
      { queue, headers: { big: "v".repeat(lim.maxHeaderBytes + 1) } },
      { queue, payload: "ok too \u{1F600}" },
    ];
    const res = await c.publishEach(msgs);
    assert.deepEqual(res.map((r) => !r.error), [true, false, false, false, false, true]);
    for (const [i, field] of [[1, "jobType"], [2, 'header "h"'], [3, "payload"], [4, "headers"]] as const) {
      const err = res[i].error!;
      assert.equal(err.code, Status.INVALID_ARGUMENT);
      assert.match(err.details, new RegExp(`message ${i}: field ${field}`));
    }
    assert.equal((await c.queue(queue)).ready, 2n);
    await assert.rejects(c.publishMany(msgs), (e: unknown) => {
      assert.ok(e instanceof PublishError);
      assert.deepEqual([...e.stored.keys()], [0, 5]);
      assert.deepEqual(e.failed.map((f) => f.index), [1, 2, 3, 4]);
      assert.equal(e.code, Status.INVALID_ARGUMENT);
      assert.match(e.message, /4 of 6 messages not stored/);
      return true;
    });
    await assert.rejects(c.publish({ queue, producer: "\uDFFF" }), (e) => isCode(e, Status.INVALID_ARGUMENT));
  } finally {
    c.close();
  }
});

test("the broker's refusals are per message", async () => {
  const c = new Client(addr);
  try {
    const res = await c.publishEach([{ queue: "ts.each" }, { queue: "ts.each bad name" }, { queue: "ts.each", ttlMs: -1 }]);
    assert.ok(!res[0].error);
    assert.equal(res[1].error?.code, Status.INVALID_ARGUMENT);
    assert.match(res[1].error!.details, /queue/);
    assert.match(res[2].error!.details, /ttl/);
  } finally {
    c.close();
  }
});

test("a producer keeps a window of publishes in flight", async () => {
  const c = new Client(addr);
  const queue = "ts.producer";
  try {
    const p = c.producer({ maxBatch: 64, window: 4 });
    const results = Array.from({ length: 2000 }, (_, i) => p.publishResult({ queue, payload: `${i}` }));
    const bad = p.publishResult({ queue, jobType: "\uDC00" });
    const more = Array.from({ length: 10 }, () => p.publishResult({ queue }));
    const all = await Promise.all([...results, ...more]);
    assert.ok(all.every((r) => !r.error));
    assert.equal(new Set(all.map((r) => r.id)).size, 2010);
    const b = await bad;
    assert.equal(b.error?.code, Status.INVALID_ARGUMENT);
    assert.match(b.error!.details, /jobType/);
    assert.ok(await p.publish({ queue }));
    await p.close();
    await assert.rejects(p.publish({ queue }), (e) => e instanceof ProducerClosed);
    assert.equal((await c.queue(queue)).ready, 2011n);
  } finally {
    c.close();
  }
});

test("list groups", async () => {
  const c = new Client(addr);
  const queue = "ts.groups";
  try {
    await c.declareQueue(queue, { groupBy: "tenant", limits: ["tenant=2"] });
    for (const tenant of ["zürich", "東京", "東京"]) {
      await c.publish({ queue, jobType: "t", payload: new Uint8Array(2048).fill(0xff), headers: { tenant } });
    }
    const resp = await c.listGroups(queue);
    assert.equal(resp.groupCount, 2n);
    assert.deepEqual(
      Object.fromEntries(resp.groups.map((g) => [g.name, [g.waiting, g.limit, g.running]])),
      { "zürich": [1n, 2, 0n], "東京": [2n, 2, 0n] },
    );
    await c.publish({ queue: `${queue}.plain` });
    await assert.rejects(c.listGroups(`${queue}.plain`), (e) => isCode(e, Status.FAILED_PRECONDITION));
  } finally {
    c.close();
  }
});

test("admin calls", async () => {
  const c = new Client(addr);
  const queue = "ts.admin";
  try {
    const info = await c.declareQueue(queue, { maxAttempts: 3, lease: durationFromMs(5000) });
    assert.equal(info.config?.maxAttempts, 3);
    assert.ok((await c.pauseQueue(queue)).paused);
    assert.ok(!(await c.resumeQueue(queue)).paused);
    const id = await c.publish({ queue, producer: "p", jobType: "t" });
    const jobs = await c.listJobs(queue);
    assert.equal(jobs.waiting[0].jobType, "t");
    assert.equal((await c.getJob(queue, id)).state, "waiting");
    const s = await c.declareSchedule({ name: `${queue}.tick`, queue, every: durationFromMs(3_600_000), jobType: "tick" });
    assert.ok((await c.listSchedules()).some((x) => x.name === s.name));
    assert.ok((await c.pauseSchedule(s.name)).paused);
    await c.deleteSchedule(s.name);
    assert.equal(await c.purgeQueue(queue), 1);
    await c.deleteQueue(queue);
    await assert.rejects(c.queue(queue), (e) => isCode(e, Status.NOT_FOUND));
    await assert.rejects(c.getJob(queue, "nope"), (e) => e instanceof HarbingerError && e.code === Status.NOT_FOUND);
  } finally {
    c.close();
  }
});

test("a producer gives up on an unreachable broker at close", async () => {
  const { createServer } = await import("node:net");
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", () => r()));
  const port = (srv.address() as { port: number }).port;
  await new Promise<void>((r) => srv.close(() => r())); // nothing listens there now
  const c = new Client(`127.0.0.1:${port}`);
  try {
    const p = c.producer({ closeTimeoutMs: 300 });
    const result = p.publishResult({ queue: "q" });
    await p.close();
    const r = await result;
    assert.equal(r.error?.code, Status.UNAVAILABLE);
    assert.match(r.error!.details, /unreachable/);
  } finally {
    c.close();
  }
});

test("a publish's timeout bounds its wait for a broker that is down", async () => {
  const { createServer } = await import("node:net");
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", () => r()));
  const port = (srv.address() as { port: number }).port;
  await new Promise<void>((r) => srv.close(() => r()));
  const c = new Client(`127.0.0.1:${port}`);
  try {
    await assert.rejects(c.publish({ queue: "q" }, { timeoutMs: 300 }), (e) => isCode(e, Status.DEADLINE_EXCEEDED));
  } finally {
    c.close();
  }
});
