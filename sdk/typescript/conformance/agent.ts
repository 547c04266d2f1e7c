/**
 * The TypeScript SDK's side of the SDK conformance scenario
 * (internal/conformance, docs/sdk.md): a producer or a worker that does
 * what scenario.json says and reports each outcome as a JSON line on
 * stdout. The Go and Python SDKs have the same agent.
 *
 *     node dist/conformance/agent.js --addr HOST:PORT --queue Q --scenario FILE producer|worker
 */
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";
import { Client, DeadLetter, JobAborted, Status, type Job, type Message } from "../src/index.js";

interface Step {
  kind: string;
  count: number;
}
interface Scenario {
  producer: string;
  phase1: Step[];
  phase2: Step[];
  sleep_ms: number;
  slow_ms: number;
  too_large_bytes: number;
}

const emit = (v: Record<string, unknown>) => process.stdout.write(JSON.stringify(v) + "\n");

function messages(sc: Scenario, queue: string, steps: Step[], first: number): [number, string, Message][] {
  const out: [number, string, Message][] = [];
  let n = first;
  for (const s of steps) {
    for (let i = 0; i < s.count; i++) {
      const m: Message = { queue, producer: sc.producer, jobType: s.kind, payload: JSON.stringify({ n, kind: s.kind }) };
      if (s.kind === "bad-utf8") m.jobType = "bad-utf8 \uDCFF"; // a lone surrogate, as JS holds what is not text
      if (s.kind === "too-large") m.payload = new Uint8Array(sc.too_large_bytes);
      out.push([n, s.kind, m]);
      n++;
    }
  }
  return out;
}

async function produce(c: Client, queue: string, sc: Scenario): Promise<void> {
  const p = c.producer({ window: 4, maxBatch: 16 });
  const one = async ([n, kind, m]: [number, string, Message]) => {
    let r = await p.publishResult(m);
    for (let attempt = 0; r.error?.code === Status.UNAVAILABLE && attempt < 50; attempt++) {
      await sleep(100);
      r = await p.publishResult(m);
    }
    emit({ event: "result", n, kind, id: r.id, code: r.error?.code ?? 0, error: r.error?.details ?? "" });
  };
  const first = messages(sc, queue, sc.phase1, 0);
  await Promise.all(first.map(one));
  emit({ event: "phase", phase: 1 });
  const rl = createInterface({ input: process.stdin });
  const line = await rl[Symbol.asyncIterator]().next();
  rl.close(); // or stdin keeps the process alive
  if (line.value !== "continue") throw new Error("producer: no continue on stdin");
  await Promise.all(messages(sc, queue, sc.phase2, first.length).map(one));
  emit({ event: "phase", phase: 2 });
  await p.close();
}

async function work(c: Client, queue: string, sc: Scenario, concurrency: number): Promise<void> {
  const w = c.worker(
    queue,
    async (job: Job) => {
      const p = JSON.parse(job.payload.toString()) as { n: number; kind: string };
      const ev = { n: p.n, kind: p.kind, attempt: job.attempt };
      emit({ event: "start", ...ev });
      let outcome = "ok";
      try {
        if (p.kind === "sleep") await sleep(sc.sleep_ms, undefined, { signal: job.signal });
        else if (p.kind === "slow") await sleep(sc.slow_ms, undefined, { signal: job.signal });
        else if (p.kind === "flaky" && job.attempt === 1) throw new Error(`flaky ${p.n}`);
        else if (p.kind === "fail") throw new Error(`fail ${p.n}`);
        else if (p.kind === "dead") {
          outcome = "dead";
          throw new DeadLetter(`dead ${p.n}`);
        } else if (p.kind === "block") {
          await new Promise((_, reject) => job.signal.addEventListener("abort", () => reject(job.signal.reason), { once: true }));
        }
      } catch (e) {
        if (outcome !== "dead") outcome = job.signal.reason instanceof JobAborted && job.signal.reason.why === "cancelled" ? "cancelled" : "error";
        throw e;
      } finally {
        emit({ event: "end", outcome, ...ev });
      }
    },
    { concurrency, name: "conformance-typescript", logger: { warn() {} } },
  );
  w.handleSignals();
  await w.run();
}

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    addr: { type: "string", default: "127.0.0.1:7070" },
    queue: { type: "string", default: "conformance" },
    scenario: { type: "string" },
    concurrency: { type: "string", default: "4" },
  },
});
const sc = JSON.parse(readFileSync(values.scenario!, "utf8")) as Scenario;
const c = new Client(values.addr!);
if (positionals[0] === "producer") await produce(c, values.queue!, sc);
else if (positionals[0] === "worker") await work(c, values.queue!, sc, Number(values.concurrency));
else throw new Error(`agent producer|worker, not ${positionals[0]}`);
c.close();
