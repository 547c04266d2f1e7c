import type * as grpc from "@grpc/grpc-js";
import * as pb from "./gen/harbinger/v1/harbinger_pb.js";
import { Backoff, pause } from "./backoff.js";
import { fromServiceError, HarbingerError, ProducerClosed, Status } from "./errors.js";
import { check, encodeForRequest, hardLimit, Limits, Message, PublishResult, resultFromProto, toProto } from "./message.js";
import type { Client } from "./client.js";
import { concat, methods } from "./client.js";
import type { Wire } from "./rpc.js";

/** Defaults of ProducerConfig. */
export const DEFAULT_MAX_BATCH = 256;
export const DEFAULT_MAX_BATCH_BYTES = 1 << 20;
export const DEFAULT_WINDOW = 16;
export const DEFAULT_CLOSE_TIMEOUT_MS = 5000;

/** Tunes a Producer; unset fields take the defaults above. */
export interface ProducerConfig {
  /** Most messages in one request; never more than the broker allows. */
  maxBatch?: number;
  /** Encoded bytes a request is cut at; never more than the broker reads. A message larger than it goes alone. */
  maxBatchBytes?: number;
  /** Most batches awaiting the broker's answer. */
  window?: number;
  /** How long close waits for a broker it cannot reach before failing what is still queued. */
  closeTimeoutMs?: number;
}

interface Pending {
  /** Not yet checked: the broker's limits were not known when it was queued. */
  msg?: Message;
  bytes?: Uint8Array;
  error?: HarbingerError;
  resolve: (r: PublishResult) => void;
}

/** Checks and encodes it.msg against limits. */
function prepare(it: Pending, limits: Limits | undefined): void {
  if (!it.msg) return;
  const err = check(it.msg, limits);
  if (err) it.error = new HarbingerError(err.code, `harbinger: message: ${err.details}`);
  else it.bytes = encodeForRequest(toProto(it.msg));
  it.msg = undefined;
}

const failed = (err: HarbingerError): PublishResult => ({ id: "", duplicate: false, error: err });

/** One PublishStream with the batches awaiting answers on it, in send order. */
class PStream {
  readonly inflight: Pending[][] = [];
  error?: HarbingerError;
  private wake?: () => void;
  readonly count: number;
  readonly hard: number;
  readonly target: number;

  constructor(
    readonly call: grpc.ClientDuplexStream<Wire<typeof pb.PublishRequestSchema>, pb.PublishResponse>,
    readonly limits: Limits,
    cfg: Required<ProducerConfig>,
  ) {
    this.count = Math.min(cfg.maxBatch, limits.maxBatch || cfg.maxBatch);
    this.hard = hardLimit(limits);
    this.target = Math.min(cfg.maxBatchBytes, this.hard);
    call.on("data", (resp: pb.PublishResponse) => {
      const batch = this.inflight.shift();
      if (!batch) return this.fail(new HarbingerError(Status.UNAVAILABLE, "harbinger: the broker answered a batch that was not sent"));
      if (resp.results.length !== batch.length) {
        this.inflight.unshift(batch);
        return this.fail(new HarbingerError(Status.UNAVAILABLE, "harbinger: the broker answered a batch with the wrong number of results"));
      }
      batch.forEach((it, i) => it.resolve(resultFromProto(resp.results[i])));
      this.notify();
    });
    call.on("error", (err) => this.fail(fromServiceError(err)));
    call.on("end", () => this.fail(new HarbingerError(Status.UNAVAILABLE, "harbinger: the broker ended the publish stream")));
  }

  private notify(): void {
    const w = this.wake;
    this.wake = undefined;
    w?.();
  }

  fail(err: HarbingerError): void {
    if (!this.error) this.error = err;
    for (const batch of this.inflight.splice(0)) for (const it of batch) it.resolve(failed(this.error));
    this.notify();
  }

  /** Resolves when fewer than n batches await answers, or the stream failed. */
  async room(n: number): Promise<void> {
    while (this.inflight.length >= n && !this.error) await new Promise<void>((r) => (this.wake = r));
  }

  send(batch: Pending[]): void {
    this.inflight.push(batch);
    this.call.write(concat(batch.map((it) => it.bytes!)));
  }

  /** Ends the stream once every answer has arrived. */
  async close(): Promise<void> {
    await this.room(1);
    this.call.end();
    this.call.cancel();
  }
}

/**
 * Publishes at a high rate over one PublishStream. Messages published in
 * the same turn of the event loop, and while earlier batches are in
 * flight, are gathered into batches cut by count and by encoded size to
 * fit the broker's request limit, and up to `window` batches are in flight
 * without a round trip each. Each message gets its own outcome: one the
 * broker refuses, or one that fails the checks made before sending (see
 * Client.publishEach), fails alone. If the stream fails, the batches in
 * flight fail with its error and the next batch opens a new stream. While
 * the broker is unreachable, batches wait for it; close waits for it at
 * most closeTimeoutMs.
 */
export class Producer {
  private readonly cfg: Required<ProducerConfig>;
  private readonly queue: Pending[] = [];
  private stream?: PStream;
  private pumping?: Promise<void>;
  private closed = false;
  private readonly reach = new AbortController();
  private limits?: Limits;

  constructor(
    private readonly client: Client,
    cfg: ProducerConfig = {},
  ) {
    this.cfg = {
      maxBatch: Math.max(cfg.maxBatch ?? DEFAULT_MAX_BATCH, 1),
      maxBatchBytes: Math.max(cfg.maxBatchBytes ?? DEFAULT_MAX_BATCH_BYTES, 1),
      window: Math.max(cfg.window ?? DEFAULT_WINDOW, 1),
      closeTimeoutMs: cfg.closeTimeoutMs ?? DEFAULT_CLOSE_TIMEOUT_MS,
    };
  }

  /** Queues msg and resolves to its PublishResult; it never rejects for the message's own failure. */
  publishResult(msg: Message): Promise<PublishResult> {
    if (this.closed) return Promise.reject(new ProducerClosed());
    return new Promise((resolve) => {
      const it: Pending = { msg, resolve };
      if (this.limits) prepare(it, this.limits);
      this.queue.push(it);
      this.kick();
    });
  }

  /** Queues msg and resolves to its id; rejects with the reason it was not stored. */
  async publish(msg: Message): Promise<string> {
    const r = await this.publishResult(msg);
    if (r.error) throw r.error;
    return r.id;
  }

  /**
   * Stops taking messages, sends what is queued, waits for the broker's
   * answers and closes the stream; every queued message has its result
   * when it resolves. If no stream can be opened within closeTimeoutMs,
   * what is still queued fails with UNAVAILABLE.
   */
  async close(): Promise<void> {
    if (!this.closed) {
      this.closed = true;
      setTimeout(() => this.reach.abort(), this.cfg.closeTimeoutMs).unref();
    }
    while (this.pumping) await this.pumping;
    if (this.stream) {
      await this.stream.close();
      this.stream = undefined;
    }
  }

  private kick(): void {
    if (this.pumping) return;
    this.pumping = new Promise<void>((resolve) => setImmediate(resolve))
      .then(() => this.pump())
      .finally(() => {
        this.pumping = undefined;
        if (this.queue.length > 0) this.kick();
      });
  }

  private async open(): Promise<PStream> {
    const bo = new Backoff(1000);
    for (;;) {
      try {
        const limits = await this.client.limits({ signal: this.reach.signal });
        this.limits = limits;
        return new PStream(this.client.rpc.bidi(methods.publishStream), limits, this.cfg);
      } catch (e) {
        const err = e instanceof HarbingerError ? e : fromServiceError(e);
        if (this.reach.signal.aborted) {
          throw new HarbingerError(
            Status.UNAVAILABLE,
            `harbinger: producer closed while the broker was unreachable (gave up after ${this.cfg.closeTimeoutMs}ms); message not sent`,
          );
        }
        if (err.code !== Status.UNAVAILABLE || this.client.closed) throw err;
        await pause(bo.next(), this.reach.signal);
      }
    }
  }

  private async pump(): Promise<void> {
    while (this.queue.length > 0) {
      const first = this.queue[0];
      if (this.limits) prepare(first, this.limits);
      if (first.error) {
        this.queue.shift();
        first.resolve(failed(first.error));
        continue;
      }
      if (this.stream?.error) {
        this.stream.call.cancel();
        this.stream = undefined;
      }
      if (!this.stream) {
        try {
          this.stream = await this.open();
        } catch (e) {
          this.queue.shift()?.resolve(failed(e as HarbingerError));
          continue;
        }
      }
      const s = this.stream;
      await s.room(this.cfg.window);
      if (s.error) continue;
      const batch = this.gather(s);
      if (batch.length > 0) s.send(batch);
    }
  }

  private gather(s: PStream): Pending[] {
    const batch: Pending[] = [];
    let total = 0;
    while (this.queue.length > 0 && batch.length < s.count) {
      const it = this.queue[0];
      prepare(it, s.limits);
      const size = it.bytes?.length ?? 0;
      if (it.error) {
        this.queue.shift();
        it.resolve(failed(it.error));
        continue;
      }
      if (size > s.hard) {
        this.queue.shift();
        it.resolve(
          failed(
            new HarbingerError(
              Status.INVALID_ARGUMENT,
              `harbinger: message encodes to ${size} bytes, more than one request may carry (${s.hard} bytes); not sent: store the body elsewhere and publish a reference`,
            ),
          ),
        );
        continue;
      }
      if (batch.length > 0 && total + size > s.target) break;
      batch.push(this.queue.shift()!);
      total += size;
    }
    return batch;
  }
}
