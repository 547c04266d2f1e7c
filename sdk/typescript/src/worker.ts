import type * as grpc from "@grpc/grpc-js";
import { create } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import * as pb from "./gen/harbinger/v1/harbinger_pb.js";
import { Backoff, pause } from "./backoff.js";
import { DeadLetter, fromServiceError, HarbingerError, JobAborted, Status } from "./errors.js";
import { Job, jobFromProto } from "./message.js";
import { badUtf16At, clean } from "./text.js";
import type { Client } from "./client.js";
import { methods } from "./client.js";
import type { Wire } from "./rpc.js";

/** `async (job) => {}`: resolving acks the job, rejecting (or throwing) nacks it. */
export type Handler = (job: Job) => Promise<void> | void;

/**
 * The broker's answer to one ack, nack or extend it did not apply exactly
 * as sent; only that job is affected. `applied` is true when the request
 * took effect in an adjusted form.
 */
export interface RequestError {
  id: string;
  request: string;
  code: Status;
  message: string;
  applied: boolean;
}

/** Where a worker reports reconnects and the broker's answers; console by default. */
export interface Logger {
  warn(message: string, ...args: unknown[]): void;
}

/** Settings of a Worker; every field is optional. */
export interface WorkerConfig {
  /**
   * Handlers running at once; default 1. With more than one, the acks and
   * nacks of handlers that finish close together go to the broker in one
   * request (on a broker that reads batches: Limits.maxConsumeBatch).
   */
  concurrency?: number;
  /**
   * Deliveries held at once, counting those running; default and minimum:
   * concurrency. With more than one, the broker may send several
   * deliveries in one response when several are free to run; it still
   * picks each job only when the worker has room for it.
   */
  prefetch?: number;
  /** Shown in admin views. */
  name?: string;
  /**
   * Milliseconds a handler may run: past it, the job's signal aborts
   * (reason JobAborted "timeout") and its lease is no longer renewed; a
   * handler that then rejects has its job retried with "timed out after
   * ..." as the reason. Default: no bound.
   */
  timeoutMs?: number;
  /** How often a held job's lease is renewed, in ms; default half the lease, 0 for never. */
  leaseExtendMs?: number;
  /**
   * The delay before a failed job is retried, in ms, given the attempt that
   * failed. By default the broker's retry policy decides (the job's or the
   * queue's: exponential with jitter), so workers in every language retry
   * alike.
   */
  retryBackoff?: (attempt: number) => number;
  /** Caps the backoff between reconnects, in ms; default 5000. */
  maxReconnectDelayMs?: number;
  /**
   * How long stop lets running handlers finish, in ms, before it aborts
   * their signals (reason JobAborted "stopping"); their jobs then go back
   * to the queue. Default 10000.
   */
  stopTimeoutMs?: number;
  /** Told of acks, nacks and extends the broker refused or applied in part; default a log line. */
  onRequestError?: (err: RequestError) => void;
  logger?: Logger;
}

/** Milliseconds a stopping worker waits for the broker to read its last answers and end the stream. */
const DRAIN_GRACE_MS = 750;

// Answers that retrying cannot change: the worker stops with them.
const FATAL = new Set<number>([
  Status.INVALID_ARGUMENT,
  Status.NOT_FOUND,
  Status.PERMISSION_DENIED,
  Status.UNAUTHENTICATED,
  Status.UNIMPLEMENTED,
]);

/** How a job ends: its ack or its nack. @internal */
export type Settle = { case: "ack"; value: pb.Ack } | { case: "nack"; value: pb.Nack };

/** Acks and nacks of handlers that finish close together, waiting to go out in one request. */
interface Gather {
  limit: number; // most items in one request (Limits.maxConsumeBatch)
  items: Settle[];
  flush?: NodeJS.Immediate; // set while items wait for it
}

interface Held {
  job: Job;
  ctrl: AbortController;
  why?: "cancelled" | "timeout" | "stopping";
  started: boolean;
  settling: boolean;
  renew?: NodeJS.Timeout;
  until?: number; // no renewal after it (the job's timeout), by performance.now()
}

/**
 * Consumes a queue, running the handler for each job.
 *
 * A handler that resolves acks its job with the time it took, measured
 * around the call on a monotonic clock, so the broker learns how long
 * each kind of job runs. One that rejects nacks it, with String(error)
 * ("Error: message") as the reason, cut to 512 bytes on a character
 * boundary: the broker retries it after its retry policy's backoff (or
 * after retryBackoff(attempt) ms) and dead-letters it once it has had its
 * attempts. Throwing a DeadLetter dead-letters it at once.
 *
 * When the broker cancels a running job (Client.cancelJob), the job's
 * signal aborts and, whatever the handler does then, the job is dropped;
 * one cancelled while it waits never runs. Leases of held jobs are
 * renewed. When the broker goes away, the worker reconnects with backoff;
 * the jobs it held are redelivered by the broker.
 *
 * Against a broker that sends and reads batches, a worker with prefetch
 * above 1 takes several deliveries in one response, and one with
 * concurrency above 1 sends the acks and nacks of handlers that finish in
 * the same turn of the event loop in one request; none waits for another
 * to come.
 */
export class Worker {
  readonly concurrency: number;
  readonly prefetch: number;
  private readonly stopCtrl = new AbortController();
  private readonly log: Logger;
  private readonly onRequestError: (err: RequestError) => void;

  constructor(
    private readonly client: Client,
    readonly queue: string,
    private readonly handler: Handler,
    readonly cfg: WorkerConfig = {},
  ) {
    for (const [what, v] of [
      ["queue", queue],
      ["name", cfg.name ?? ""],
    ] as const) {
      if (badUtf16At(v) >= 0) throw new HarbingerError(Status.INVALID_ARGUMENT, `harbinger: the worker's ${what} ${JSON.stringify(v)} is not valid UTF-8`);
    }
    if (!queue) throw new HarbingerError(Status.INVALID_ARGUMENT, "harbinger: a worker needs a queue");
    if (cfg.timeoutMs !== undefined && !(cfg.timeoutMs > 0)) {
      throw new HarbingerError(Status.INVALID_ARGUMENT, `harbinger: the worker's timeoutMs ${cfg.timeoutMs} is not positive (unset is no bound)`);
    }
    this.concurrency = Math.max(cfg.concurrency ?? 1, 1);
    this.prefetch = Math.max(cfg.prefetch ?? 0, this.concurrency);
    this.log = cfg.logger ?? console;
    this.onRequestError =
      cfg.onRequestError ??
      ((e) => this.log.warn(`harbinger: ${e.request} of ${e.id} ${e.applied ? "applied with a change" : "refused"}: ${e.message}`));
  }

  /**
   * Stops the worker: no new job starts, running handlers get stopTimeoutMs
   * to finish (then their signals abort and their jobs go back to the
   * queue), and run resolves.
   */
  stop(): void {
    this.stopCtrl.abort();
  }

  /** Makes SIGTERM and SIGINT (or the given signals) stop the worker; returns a function that undoes it. */
  handleSignals(signals: NodeJS.Signals[] = ["SIGTERM", "SIGINT"]): () => void {
    const stop = () => this.stop();
    for (const s of signals) process.on(s, stop);
    return () => signals.forEach((s) => process.off(s, stop));
  }

  /**
   * Consumes the queue until stop. Rejects with what retrying cannot fix:
   * an invalid queue, a queue deleted under it (NOT_FOUND), a token
   * refused, or a closed client.
   */
  async run(): Promise<void> {
    const bo = new Backoff(this.cfg.maxReconnectDelayMs ?? 5000);
    while (!this.stopCtrl.signal.aborted) {
      let err: HarbingerError | undefined;
      let got = false;
      try {
        // Whether the broker sends and reads batches; asked again for every
        // stream, since a broker that restarted may have changed.
        const limits = await this.client.limits({ refresh: true, signal: this.stopCtrl.signal });
        const s = new Session(this, this.client.rpc.bidi(methods.consume), limits.maxConsumeBatch);
        err = await s.run(this.stopCtrl.signal);
        got = s.got;
      } catch (e) {
        if (!(e instanceof HarbingerError)) throw e;
        err = e;
      }
      if (this.stopCtrl.signal.aborted) return;
      if (this.client.closed) throw new HarbingerError(Status.UNAVAILABLE, `harbinger: client closed: ${err?.details}`);
      if (err && FATAL.has(err.code)) throw err;
      if (got) bo.reset();
      const delay = bo.next();
      this.log.warn(`harbinger: worker of ${this.queue} reconnecting in ${Math.round(delay)}ms: ${err?.message}`);
      await pause(delay, this.stopCtrl.signal);
    }
  }

  /** @internal */
  get internals() {
    return { handler: this.handler, onRequestError: this.onRequestError, log: this.log };
  }
}

type ConsumeCall = grpc.ClientDuplexStream<Wire<typeof pb.ConsumeRequestSchema>, pb.ConsumeResponse>;

/** One Consume stream and the jobs held on it. */
class Session {
  got = false;
  private readonly held = new Map<string, Held>();
  private readonly waiting: Held[] = [];
  private running = 0;
  private stopping = false;
  private ended = false;
  private idle?: () => void;
  private endedWith?: (err: HarbingerError) => void;
  private readonly cfg: WorkerConfig;
  /**
   * What the broker may still send, as this side counts it: the prefetch,
   * less each delivery, plus the credit of each ack and nack. The broker's
   * count is never above it, so a broker that sends more has broken the
   * protocol.
   */
  private credit: number;
  /** Acks and nacks gathered into one request, with several handlers and a broker that reads batches; unset sends each alone. */
  private readonly gather?: Gather;

  constructor(
    private readonly w: Worker,
    private readonly call: ConsumeCall,
    private readonly maxConsumeBatch = 0,
  ) {
    this.cfg = w.cfg;
    this.credit = w.prefetch;
    if (maxConsumeBatch > 1 && w.concurrency > 1) this.gather = { limit: maxConsumeBatch, items: [] };
  }

  async run(stop: AbortSignal): Promise<HarbingerError | undefined> {
    const streamEnded = new Promise<HarbingerError>((resolve) => {
      this.endedWith = resolve;
    });
    this.call.on("data", (resp: pb.ConsumeResponse) => this.receive(resp));
    this.call.on("error", (e) => this.end(fromServiceError(e)));
    this.call.on("end", () => this.end(new HarbingerError(Status.UNAVAILABLE, "harbinger: the broker ended the consume stream")));
    // Several deliveries to a response when the worker has room for them;
    // a broker without batches would ignore it.
    const maxBatch = this.maxConsumeBatch > 1 ? Math.min(this.w.prefetch, this.maxConsumeBatch) : 0;
    this.send(
      create(pb.ConsumeRequestSchema, {
        request: { case: "subscribe", value: { queue: this.w.queue, prefetch: this.w.prefetch, consumerName: this.cfg.name ?? "", maxBatch } },
      }),
    );
    const stopped = new Promise<"stop">((resolve) => {
      if (stop.aborted) resolve("stop");
      stop.addEventListener("abort", () => resolve("stop"), { once: true });
    });
    const first = await Promise.race([streamEnded, stopped]);
    if (first !== "stop") {
      await this.abandon();
      this.forget();
      return first;
    }
    await this.drain(this.cfg.stopTimeoutMs ?? 10_000);
    this.flush(); // what the last handlers settled goes before the stream closes
    if (!this.ended) this.call.end();
    // The broker ends the stream once it has read our last answers.
    const grace = new AbortController();
    await Promise.race([streamEnded, pause(DRAIN_GRACE_MS, grace.signal)]);
    grace.abort();
    this.call.cancel();
    this.forget();
    return undefined;
  }

  private end(err: HarbingerError): void {
    if (this.ended) return;
    this.ended = true;
    this.endedWith?.(err);
  }

  private send(req: pb.ConsumeRequest): void {
    // If the stream is gone, the broker redelivers the job.
    if (!this.ended) this.call.write(req);
  }

  private receive(resp: pb.ConsumeResponse): void {
    const r = resp.response;
    switch (r.case) {
      case "delivery":
        this.take([r.value]);
        break;
      case "deliveries":
        this.take(r.value.deliveries);
        break;
      case "cancel": {
        const h = this.held.get(r.value.id);
        if (!h) return; // already settled
        h.why = "cancelled";
        if (h.started && !h.settling) h.ctrl.abort(new JobAborted("cancelled", "harbinger: job cancelled"));
        break;
      }
      case "error": {
        const e = r.value;
        this.w.internals.onRequestError({ id: e.id, request: e.request, code: e.code, message: e.message, applied: e.applied });
        break;
      }
    }
  }

  /**
   * Takes the deliveries of one response, alone or a batch. A broker that
   * breaks the protocol is named in the log, and no job it sent is
   * dropped: an empty batch is ignored, and deliveries past the credit are
   * held and run like the others.
   */
  private take(ds: pb.Delivery[]): void {
    const log = this.w.internals.log;
    if (ds.length === 0) {
      log.warn(`harbinger: the broker sent an empty batch of deliveries on queue ${this.w.queue}; ignored`);
      return;
    }
    this.got = true;
    this.credit -= ds.length;
    if (this.credit < 0) {
      log.warn(
        `harbinger: the broker sent ${ds.length} deliveries on queue ${this.w.queue} with credit for ${ds.length + this.credit}; ` +
          `the ${-this.credit} over it are held and run all the same`,
      );
      this.credit = 0;
    }
    for (const d of ds) {
      const ctrl = new AbortController();
      const h: Held = { job: jobFromProto(d, ctrl.signal), ctrl, started: false, settling: false };
      this.held.set(h.job.id, h);
      this.armRenewal(h);
      if (this.running < this.w.concurrency && !this.stopping) this.start(h);
      else this.waiting.push(h);
    }
  }

  private renewEvery(job: Job): number {
    return this.cfg.leaseExtendMs ?? job.leaseMs / 2;
  }

  private armRenewal(h: Held): void {
    const every = this.renewEvery(h.job);
    if (!(every > 0)) return;
    const tick = () => {
      if (this.held.get(h.job.id) !== h || h.settling) return;
      if (h.until !== undefined && performance.now() >= h.until) return; // past its timeout: no more lease
      this.send(create(pb.ConsumeRequestSchema, { request: { case: "extend", value: { id: h.job.id, lease: durationFromMs(h.job.leaseMs) } } }));
      h.renew = setTimeout(tick, every);
    };
    h.renew = setTimeout(tick, every);
  }

  private start(h: Held): void {
    this.running++;
    h.started = true;
    void this.handle(h);
  }

  private async handle(h: Held): Promise<void> {
    let err: unknown;
    let failed = false;
    let tookNs = 1000n;
    let timedOut = false;
    if (h.why !== "cancelled") {
      const t = this.cfg.timeoutMs;
      let timer: NodeJS.Timeout | undefined;
      if (t !== undefined) {
        h.until = performance.now() + t;
        timer = setTimeout(() => {
          if (h.why) return;
          h.why = "timeout";
          timedOut = true;
          h.ctrl.abort(new JobAborted("timeout", `harbinger: job timed out after ${t}ms`));
        }, t);
      }
      const start = process.hrtime.bigint();
      try {
        await this.w.internals.handler(h.job);
      } catch (e) {
        err = e;
        failed = true;
      }
      const took = process.hrtime.bigint() - start;
      tookNs = took > 1000n ? took : 1000n;
      clearTimeout(timer);
    }
    h.settling = true;
    this.settle(h, failed, err, timedOut, tookNs);
    this.running--;
    if (!this.stopping) {
      while (this.waiting.length > 0 && this.running < this.w.concurrency) {
        const next = this.waiting.shift()!;
        if (this.held.get(next.job.id) === next) this.start(next);
      }
    }
    if (this.running === 0) this.idle?.();
  }

  private settle(h: Held, failed: boolean, err: unknown, timedOut: boolean, tookNs: bigint): void {
    const id = h.job.id;
    clearTimeout(h.renew);
    if (this.held.get(id) === h) this.held.delete(id);
    const credit = this.stopping ? 0 : 1;
    const nack = (action: pb.NackAction, reason: string, delayMs?: number): Settle => ({
      case: "nack",
      value: create(pb.NackSchema, {
        id,
        action,
        reason: clean(reason),
        credit: action === pb.NackAction.REQUEUE ? 0 : credit,
        delay: delayMs !== undefined ? durationFromMs(delayMs) : undefined,
      }),
    });
    let item: Settle;
    if (h.why === "cancelled") {
      // The broker drops it whatever we say; say why, and ask for more.
      item = nack(pb.NackAction.DEAD_LETTER, "cancelled");
    } else if (!failed) {
      item = {
        case: "ack",
        value: create(pb.AckSchema, { id, credit, duration: { seconds: tookNs / 1_000_000_000n, nanos: Number(tookNs % 1_000_000_000n) } }),
      };
    } else if (err instanceof DeadLetter) {
      item = nack(pb.NackAction.DEAD_LETTER, err.message || "DeadLetter");
    } else if (h.why === "stopping" || (this.stopping && !timedOut)) {
      item = nack(pb.NackAction.REQUEUE, "worker stopping");
    } else {
      let text = errorText(err);
      if (timedOut) {
        const t = `timed out after ${this.cfg.timeoutMs}ms`;
        text = err instanceof JobAborted ? t : `${t}: ${text}`;
      }
      const backoff = this.cfg.retryBackoff;
      item = backoff ? nack(pb.NackAction.REQUEUE_AFTER, text, backoff(h.job.attempt)) : nack(pb.NackAction.RETRY, text);
    }
    this.credit += item.value.credit;
    const g = this.gather;
    if (!g) {
      this.send(create(pb.ConsumeRequestSchema, { request: item }));
      return;
    }
    // Sent with those of the other handlers that finish in this turn of the
    // event loop: the first schedules the send for when the callbacks ready
    // now have run, and no ack waits longer for others to come.
    g.items.push(item);
    g.flush ??= setImmediate(() => this.flush());
  }

  /** Sends the acks and nacks gathered, if any. */
  private flush(): void {
    const g = this.gather;
    if (!g) return;
    clearImmediate(g.flush);
    g.flush = undefined;
    const items = g.items;
    g.items = [];
    for (const req of settleRequests(items, g.limit)) this.send(req);
  }

  private waitIdle(): Promise<void> {
    if (this.running === 0) return Promise.resolve();
    return new Promise((resolve) => (this.idle = resolve));
  }

  /** Stopping: starts nothing more, lets running handlers finish for grace ms, then aborts them. */
  private async drain(graceMs: number): Promise<void> {
    this.stopping = true;
    if (this.running === 0) return;
    const grace = new AbortController();
    const finished = await Promise.race([this.waitIdle().then(() => true), pause(graceMs, grace.signal).then(() => false)]);
    grace.abort(); // no timer left to keep the process alive
    if (!finished) {
      this.abortRunning();
      await this.waitIdle();
    }
  }

  private abortRunning(): void {
    for (const h of this.held.values()) {
      if (h.started && !h.settling && !h.ctrl.signal.aborted) {
        h.why ??= "stopping";
        h.ctrl.abort(new JobAborted("stopping", "harbinger: worker stopping"));
      }
    }
  }

  /** The stream broke: the broker takes back every job held, so running handlers are told to stop. */
  private async abandon(): Promise<void> {
    this.stopping = true;
    this.abortRunning();
    await this.waitIdle();
  }

  private forget(): void {
    if (this.gather) {
      // The stream is gone: the broker takes back the jobs these settled.
      clearImmediate(this.gather.flush);
      this.gather.flush = undefined;
      this.gather.items = [];
    }
    for (const h of this.held.values()) clearTimeout(h.renew);
    this.held.clear();
    this.waiting.length = 0;
  }
}

/**
 * The requests that send acks and nacks, in order: one alone as a plain
 * ack or nack, more as ConsumeBatch requests of at most limit items each.
 * @internal
 */
export function settleRequests(items: Settle[], limit: number): pb.ConsumeRequest[] {
  const out: pb.ConsumeRequest[] = [];
  const step = Math.max(limit, 1);
  for (let i = 0; i < items.length; i += step) {
    const part = items.slice(i, i + step);
    if (part.length === 1) {
      out.push(create(pb.ConsumeRequestSchema, { request: part[0] }));
      continue;
    }
    const batch = create(pb.ConsumeBatchSchema);
    for (const it of part) {
      if (it.case === "ack") batch.acks.push(it.value);
      else batch.nacks.push(it.value);
    }
    out.push(create(pb.ConsumeRequestSchema, { request: { case: "batch", value: batch } }));
  }
  return out;
}

/** A handler's failure as the text of its nack: String(err), as Node prints it ("Error: boom"). */
export function errorText(err: unknown): string {
  if (err instanceof Error) return String(err) || err.name;
  return String(err);
}
