/**
 * Measures the TypeScript SDK's throughput against a running broker, as
 * internal/sdkbench does for Go: publishes n empty jobs through a Producer
 * (timed), then runs a worker with empty handlers until every job was
 * handled and acked (timed), and prints one JSON line.
 * scripts/sdk-bench.sh runs it against a fresh `harbinger serve --memory`.
 *
 *     node dist/bench/worker.js --addr 127.0.0.1:7070 -n 20000 --concurrency 16
 */
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";
import { Client } from "../src/index.js";

const { values } = parseArgs({
  options: {
    addr: { type: "string", default: "127.0.0.1:7070" },
    queue: { type: "string", default: "bench" },
    n: { type: "string", short: "n", default: "20000" },
    concurrency: { type: "string", default: "16" },
  },
});
const n = Number(values.n);
const concurrency = Number(values.concurrency);
const queue = values.queue!;
const c = new Client(values.addr!);

let start = performance.now();
const p = c.producer();
const results = await Promise.all(Array.from({ length: n }, () => p.publishResult({ queue, producer: "bench", jobType: "empty" })));
const publish = (performance.now() - start) / 1000;
await p.close();
if (results.some((r) => r.error)) throw new Error("some publishes failed");

let handled = 0;
let doneResolve!: () => void;
const done = new Promise<void>((r) => (doneResolve = r));
const w = c.worker(
  queue,
  async () => {
    if (++handled === n) doneResolve();
  },
  { concurrency },
);
start = performance.now();
const running = w.run();
await done;
while ((await c.queue(queue)).acked < BigInt(n)) await sleep(1); // the last acks are on their way
const work = (performance.now() - start) / 1000;
w.stop();
await running;
c.close();
console.log(JSON.stringify({ sdk: "typescript", jobs: n, concurrency, publish_per_s: n / publish, worker_per_s: n / work }));
