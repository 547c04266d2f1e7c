/**
 * A producer: publishes n jobs through a Producer, which keeps a window of
 * batches in flight, and says how many were stored.
 *
 *     node dist/examples/producer.js --addr 127.0.0.1:7070 --queue demo -n 1000
 */
import { parseArgs } from "node:util";
import { Client } from "../src/index.js";

const { values } = parseArgs({
  options: {
    addr: { type: "string", default: "127.0.0.1:7070" },
    queue: { type: "string", default: "demo" },
    n: { type: "string", short: "n", default: "1000" },
  },
});

const client = new Client(values.addr!);
const producer = client.producer();
const results = await Promise.all(
  Array.from({ length: Number(values.n) }, (_, i) =>
    producer.publishResult({ queue: values.queue!, producer: "example", jobType: i % 10 ? "thumbnail" : "report", payload: `job ${i}` }),
  ),
);
await producer.close();
client.close();
const failed = results.flatMap((r, i) => (r.error ? [[i, r.error] as const] : []));
console.log(`stored ${results.length - failed.length} of ${results.length}`);
for (const [i, err] of failed.slice(0, 5)) console.log(`message ${i}: ${err.message}`);
