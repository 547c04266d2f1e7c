import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { Broker, start, until } from "./broker.js";
import { Client, DeadLetter, JobAborted, Status, durationFromMs, durationMs, isCode, type Job } from "../src/index.js";

const broker = new Broker();
let addr = "";
before(async () => {
  addr = await broker.start();
});
after(() => broker.stop());

test("acks with the measured duration", async () => {
  const c = new Client(addr);
  const queue = "ts.ack";
  try {
    await c.declareQueue(queue, { keepDone: 10 });
    const ids = await c.publishMany([0, 1, 2].map(() => ({ queue, jobType: "sleep" })));
    const seen: Job[] = [];
    const stop = start(c, queue, async (job) => {
      await sleep(200);
      seen.push(job);
    }, { concurrency: 3 });
    const settled = async () => (await Promise.all(ids.map((id) => c.getJob(queue, id)))).every((j) => j.state === "done");
    await until(settled, "three acks");
    await stop();
    for (const id of ids) {
      // A timer of 200 ms may end a fraction of a millisecond early by
      // the clock the worker measures with.
      const took = durationMs((await c.getJob(queue, id)).took!);
      assert.ok(took >= 195 && took < 1000, `took ${took}ms`);
    }
    assert.deepEqual(new Set(seen.map((j) => j.attempt)), new Set([1]));
  } finally {
    c.close();
  }
});

test("a failure nacks with its text and the broker's backoff", async () => {
  const c = new Client(addr);
  const queue = "ts.nack";
  try {
    await c.declareQueue(queue, { maxAttempts: 2, retryBase: durationFromMs(50) });
    await c.publishMany([{ queue, jobType: "boom" }, { queue, jobType: "long" }, { queue, jobType: "dead" }]);
    const attempts: Record<string, number[]> = {};
    const stop = start(c, queue, async (job) => {
      (attempts[job.jobType] ??= []).push(job.attempt);
      if (job.jobType === "boom") throw new TypeError("boom");
      if (job.jobType === "dead") throw new DeadLetter("bad input");
      throw new Error("é".repeat(2000));
    });
    await until(async () => (await c.listDeadLetters(queue)).length === 3, "three dead letters");
    await stop();
    const byType = Object.fromEntries((await c.listDeadLetters(queue)).map((d) => [d.jobType, d]));
    assert.equal(byType.boom.reason, "nacked: TypeError: boom (attempt 2 of 2)");
    assert.deepEqual(attempts.boom, [1, 2]);
    assert.match(byType.dead.reason, /bad input/);
    assert.deepEqual(attempts.dead, [1]);
    // Cut to 512 bytes on a character boundary: "Error: " and 252 two-byte characters.
    assert.ok(byType.long.reason.includes("Error: " + "é".repeat(252) + " (attempt"), byType.long.reason);
  } finally {
    c.close();
  }
});

test("a long handler keeps its lease", async () => {
  const c = new Client(addr);
  const queue = "ts.lease";
  try {
    await c.declareQueue(queue, { lease: durationFromMs(1000), keepDone: 1 });
    const id = await c.publish({ queue });
    const runs: number[] = [];
    const stop = start(c, queue, async (job) => {
      runs.push(job.attempt);
      await sleep(2500);
    }, { concurrency: 2 });
    await until(async () => (await c.getJob(queue, id)).state === "done", "the ack");
    assert.deepEqual(runs, [1], "the lease ran out and the job ran again");
    await stop();
  } finally {
    c.close();
  }
});

test("cancelling a running job aborts its signal", async () => {
  const c = new Client(addr);
  const queue = "ts.cancel";
  try {
    const id = await c.publish({ queue });
    let runs = 0;
    let reason: unknown;
    let startedResolve!: () => void;
    const started = new Promise<void>((r) => (startedResolve = r));
    const stop = start(c, queue, async (job) => {
      runs++;
      startedResolve();
      try {
        await sleep(60_000, undefined, { signal: job.signal });
      } finally {
        reason = job.signal.reason;
      }
    });
    await started;
    assert.equal(await c.cancelJob(queue, id), "running");
    await until(async () => {
      try {
        await c.getJob(queue, id);
        return false;
      } catch (e) {
        return isCode(e, Status.NOT_FOUND);
      }
    }, "the cancelled job to end");
    assert.ok(reason instanceof JobAborted && reason.why === "cancelled");
    const q = await c.queue(queue);
    assert.equal(q.ready + q.inFlight + q.deadLetters, 0n);
    assert.equal(runs, 1);
    await stop();
  } finally {
    c.close();
  }
});

test("a timeout aborts the handler and its job is retried", async () => {
  const c = new Client(addr);
  const queue = "ts.timeout";
  try {
    await c.declareQueue(queue, { maxAttempts: 1 });
    await c.publish({ queue });
    const stop = start(c, queue, (job) => sleep(30_000, undefined, { signal: job.signal }), { timeoutMs: 200 });
    await until(async () => (await c.listDeadLetters(queue)).length === 1, "the timed-out job's dead letter");
    assert.match((await c.listDeadLetters(queue))[0].reason, /^nacked: timed out after 200ms: AbortError/);
    await stop();
  } finally {
    c.close();
  }
});

test("stop finishes what it can and returns the rest", async () => {
  const c = new Client(addr);
  const queue = "ts.stop";
  try {
    await c.publishMany([{ queue, jobType: "slow" }, { queue, jobType: "quick" }]);
    let quickDone = false;
    let bothResolve!: () => void;
    const both = new Promise<void>((r) => (bothResolve = r));
    let started = 0;
    const w = c.worker(queue, async (job) => {
      if (++started === 2) bothResolve();
      if (job.jobType === "quick") {
        await sleep(300);
        quickDone = true;
        return;
      }
      await sleep(60_000, undefined, { signal: job.signal });
    }, { concurrency: 2, stopTimeoutMs: 1000 });
    const running = w.run();
    await both;
    w.stop();
    await running;
    assert.ok(quickDone, "a job that finishes within stopTimeoutMs is finished");
    const q = await c.queue(queue);
    assert.equal(q.ready, 1n);
    assert.equal(q.inFlight, 0n);
    assert.equal((await c.listJobs(queue)).waiting[0].jobType, "slow");
  } finally {
    c.close();
  }
});

test("SIGTERM lets the running job finish", async () => {
  const c = new Client(addr);
  const queue = "ts.sigterm";
  try {
    await c.declareQueue(queue, { keepDone: 5 });
    const id = await c.publish({ queue, jobType: "sleep", payload: "1.0" });
    const example = join(dirname(fileURLToPath(import.meta.url)), "..", "examples", "worker.js");
    const proc = spawn(process.execPath, [example, "--addr", addr, "--queue", queue], { stdio: ["ignore", "pipe", "inherit"] });
    const lines = createInterface({ input: proc.stdout! })[Symbol.asyncIterator]();
    const first = await lines.next();
    assert.deepEqual(String(first.value).split(" "), ["started", id]);
    const exited = new Promise<number | null>((r) => proc.on("exit", (code) => r(code)));
    proc.kill("SIGTERM");
    assert.equal(await exited, 0);
    assert.equal((await c.getJob(queue, id)).state, "done");
  } finally {
    c.close();
  }
});

test("reconnects when the broker restarts", async () => {
  const b = new Broker(join(mkdtempSync(join(tmpdir(), "harbinger-ts-")), "data"));
  const addr = await b.start();
  const c = new Client(addr);
  const queue = "ts.restart";
  try {
    await c.publishMany(Array.from({ length: 40 }, (_, i) => ({ queue, payload: `${i}` })));
    const seen = new Set<string>();
    let tenResolve!: () => void;
    const ten = new Promise<void>((r) => (tenResolve = r));
    let allResolve!: () => void;
    const all = new Promise<void>((r) => (allResolve = r));
    const stop = start(c, queue, async (job) => {
      await sleep(10);
      seen.add(job.payload.toString());
      if (seen.size >= 10) tenResolve();
      if (seen.size === 60) allResolve();
    }, { concurrency: 2, maxReconnectDelayMs: 500, logger: { warn() {} } });
    await ten;
    await b.stop();
    await b.start();
    // Published after the restart: the client's connection comes back too.
    await c.publishMany(Array.from({ length: 20 }, (_, i) => ({ queue, payload: `${40 + i}` })));
    await all;
    await stop();
    const q = await c.queue(queue);
    assert.equal(q.ready + q.inFlight, 0n);
  } finally {
    c.close();
    await b.stop();
  }
});

test("a worker waiting for an unreachable broker stops at once", async () => {
  const c = new Client("127.0.0.1:1");
  try {
    const w = c.worker("ts.unreachable", async () => {}, { concurrency: 4, logger: { warn() {} } });
    const running = w.run();
    await sleep(300);
    w.stop();
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<"late">((r) => (timer = setTimeout(() => r("late"), 5000)));
    assert.equal(await Promise.race([running.then(() => "stopped" as const), late]), "stopped");
    clearTimeout(timer);
  } finally {
    c.close();
  }
});

test("an invalid queue stops the worker", async () => {
  const c = new Client(addr);
  try {
    await assert.rejects(c.runWorker("bad queue name", async () => {}), (e) => isCode(e, Status.INVALID_ARGUMENT));
    assert.throws(() => c.worker("q\uDC00", async () => {}), (e) => isCode(e, Status.INVALID_ARGUMENT));
  } finally {
    c.close();
  }
});

test("closing the client ends a running worker with Unavailable and its job goes back", async () => {
  const admin = new Client(addr);
  const queue = "ts.close-under-worker";
  try {
    const id = await admin.publish({ queue, payload: Buffer.from("ünïcode".repeat(300)) });
    const c = new Client(addr);
    let started!: () => void;
    const running = new Promise<void>((resolve) => (started = resolve));
    const w = c.worker(queue, async (job) => {
      started();
      await sleep(60_000, undefined, { signal: job.signal });
    });
    const done = w.run();
    await running;
    c.close();
    const outcome = await Promise.race([
      done.then(() => "returned", (e: unknown) => e),
      sleep(10_000).then(() => "still running after 10 s"),
    ]);
    assert.ok(isCode(outcome, Status.UNAVAILABLE), `run() ended with ${String(outcome)}`);
    assert.match(String((outcome as Error).message), /client closed/);
    await until(async () => (await admin.getJob(queue, id)).state === "waiting", "the held job to return to the queue");
  } finally {
    admin.close();
  }
});
