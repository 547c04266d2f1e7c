/**
 * A worker: runs each job of a queue, and finishes the running ones on SIGTERM.
 *
 *     node dist/examples/worker.js --addr 127.0.0.1:7070 --queue demo
 *
 * A job of type "sleep" sleeps for its payload's seconds (and stops early
 * if the job is cancelled); any other job is done at once.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";
import { Client, type Job } from "../src/index.js";

const { values } = parseArgs({
  options: {
    addr: { type: "string", default: "127.0.0.1:7070" },
    queue: { type: "string", default: "demo" },
    concurrency: { type: "string", default: "8" },
  },
});

const client = new Client(values.addr!);
const worker = client.worker(
  values.queue!,
  async (job: Job) => {
    console.log("started", job.id);
    if (job.jobType === "sleep") await sleep(Number(job.payload.toString() || "0") * 1000, undefined, { signal: job.signal });
  },
  { concurrency: Number(values.concurrency), stopTimeoutMs: 25_000 },
);
worker.handleSignals(); // SIGTERM, SIGINT: finish running jobs, then return
await worker.run();
client.close();
console.error("stopped");
