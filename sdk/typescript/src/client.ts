import * as grpc from "@grpc/grpc-js";
import { create } from "@bufbuild/protobuf";
import type { MessageInitShape } from "@bufbuild/protobuf";
import * as pb from "./gen/harbinger/v1/harbinger_pb.js";
import { Backoff, pause } from "./backoff.js";
import { FailedMessage, HarbingerError, PublishError, Status } from "./errors.js";
import {
  check,
  hardLimit,
  Limits,
  limitsFromProto,
  Message,
  PublishResult,
  resultFromProto,
  toProto,
  encodeForRequest,
} from "./message.js";
import { CallOptions, method, Rpc } from "./rpc.js";
import { Producer, ProducerConfig } from "./producer.js";
import { Handler, Worker, WorkerConfig } from "./worker.js";

/** Milliseconds a connection with an open call may stay quiet before the client pings the broker. */
export const KEEPALIVE_TIME_MS = 30_000;
/** Milliseconds the client waits for the ping's answer before it takes the connection for dead. */
export const KEEPALIVE_TIMEOUT_MS = 20_000;

export const methods = {
  publish: method("Broker", "Publish", pb.PublishRequestSchema, pb.PublishResponseSchema),
  publishStream: method("Broker", "PublishStream", pb.PublishRequestSchema, pb.PublishResponseSchema),
  consume: method("Broker", "Consume", pb.ConsumeRequestSchema, pb.ConsumeResponseSchema),
  getLimits: method("Broker", "GetLimits", pb.GetLimitsRequestSchema, pb.LimitsSchema),
  declareQueue: method("Admin", "DeclareQueue", pb.DeclareQueueRequestSchema, pb.QueueInfoSchema),
  listQueues: method("Admin", "ListQueues", pb.ListQueuesRequestSchema, pb.ListQueuesResponseSchema),
  purgeQueue: method("Admin", "PurgeQueue", pb.PurgeQueueRequestSchema, pb.PurgeQueueResponseSchema),
  deleteQueue: method("Admin", "DeleteQueue", pb.DeleteQueueRequestSchema, pb.DeleteQueueResponseSchema),
  pauseQueue: method("Admin", "PauseQueue", pb.PauseQueueRequestSchema, pb.QueueInfoSchema),
  getJob: method("Admin", "GetJob", pb.GetJobRequestSchema, pb.JobInfoSchema),
  cancelJob: method("Admin", "CancelJob", pb.CancelJobRequestSchema, pb.CancelJobResponseSchema),
  listJobs: method("Admin", "ListJobs", pb.ListJobsRequestSchema, pb.ListJobsResponseSchema),
  listDeadLetters: method("Admin", "ListDeadLetters", pb.ListDeadLettersRequestSchema, pb.ListDeadLettersResponseSchema),
  requeueDeadLetters: method("Admin", "RequeueDeadLetters", pb.RequeueDeadLettersRequestSchema, pb.RequeueDeadLettersResponseSchema),
  deleteDeadLetters: method("Admin", "DeleteDeadLetters", pb.DeleteDeadLettersRequestSchema, pb.DeleteDeadLettersResponseSchema),
  listKeys: method("Admin", "ListKeys", pb.ListKeysRequestSchema, pb.ListKeysResponseSchema),
  listGroups: method("Admin", "ListGroups", pb.ListGroupsRequestSchema, pb.ListGroupsResponseSchema),
  declareSchedule: method("Admin", "DeclareSchedule", pb.ScheduleSchema, pb.ScheduleSchema),
  listSchedules: method("Admin", "ListSchedules", pb.ListSchedulesRequestSchema, pb.ListSchedulesResponseSchema),
  pauseSchedule: method("Admin", "PauseSchedule", pb.PauseScheduleRequestSchema, pb.ScheduleSchema),
  deleteSchedule: method("Admin", "DeleteSchedule", pb.DeleteScheduleRequestSchema, pb.DeleteScheduleResponseSchema),
};

/** TLS settings: PEM `ca` for a private CA, `cert` and `key` for a broker that asks for client certificates. */
export interface TLSOptions {
  ca?: Buffer | string;
  cert?: Buffer | string;
  key?: Buffer | string;
}

/** Options of a Client. */
export interface ClientOptions {
  /**
   * Sent with every call ("authorization: Bearer TOKEN"), for a broker
   * started with -tokens; refused without TLS unless the broker is on this
   * machine's loopback.
   */
  token?: string;
  /** Connect over TLS: true for the system's roots, or the PEM files to use. */
  tls?: boolean | TLSOptions;
  /** See KEEPALIVE_TIME_MS and KEEPALIVE_TIMEOUT_MS. */
  keepaliveTimeMs?: number;
  keepaliveTimeoutMs?: number;
  /** More grpc-js channel options. */
  channelOptions?: grpc.ChannelOptions;
}

function isLoopback(address: string): boolean {
  let host = address;
  if (host.startsWith("[")) host = host.slice(1, host.indexOf("]"));
  else if (host.split(":").length === 2) host = host.split(":")[0];
  return host === "localhost" || host === "::1" || /^127\.\d+\.\d+\.\d+$/.test(host);
}

const pem = (v: Buffer | string | undefined) => (v === undefined ? null : Buffer.from(v));

/**
 * A connection to a Harbinger broker at host:port. The connection is made
 * lazily and re-made after failures, so constructing a Client succeeds
 * while the broker is down; calls wait for it (bound them with an
 * AbortSignal or timeoutMs). One Client serves any number of publishes,
 * producers and workers. Close it when done.
 */
export class Client {
  /** @internal */
  readonly rpc: Rpc;
  readonly address: string;
  private limitsCache?: Limits;
  private closedFlag = false;

  constructor(address: string, opts: ClientOptions = {}) {
    const tls = opts.tls !== undefined && opts.tls !== false;
    if (opts.token !== undefined && !tls && !isLoopback(address)) {
      throw new Error(`harbinger: a token is sent only over TLS, and ${address} is not this machine's loopback: pass tls`);
    }
    const t: TLSOptions = typeof opts.tls === "object" ? opts.tls : {};
    const creds = tls ? grpc.credentials.createSsl(pem(t.ca), pem(t.key), pem(t.cert)) : grpc.credentials.createInsecure();
    const options: grpc.ChannelOptions = {
      // The broker bounds every answer by what it accepts; gRPC's default of
      // 4 MiB would refuse a delivery of a job a broker with a larger max
      // payload took.
      "grpc.max_receive_message_length": -1,
      "grpc.max_send_message_length": -1,
      // A worker waiting for jobs sends nothing: ping a quiet connection,
      // so that one that died without a word is noticed and re-made.
      "grpc.keepalive_time_ms": opts.keepaliveTimeMs ?? KEEPALIVE_TIME_MS,
      "grpc.keepalive_timeout_ms": opts.keepaliveTimeoutMs ?? KEEPALIVE_TIMEOUT_MS,
      // Come back soon after a broker restarts.
      "grpc.initial_reconnect_backoff_ms": 100,
      "grpc.max_reconnect_backoff_ms": 2000,
      ...opts.channelOptions,
    };
    this.rpc = new Rpc(address, creds, options, opts.token);
    this.address = address;
  }

  /** Closes the connection; producers and workers using it stop. */
  close(): void {
    this.closedFlag = true;
    this.rpc.close();
  }

  get closed(): boolean {
    return this.closedFlag;
  }

  /** The broker's size limits (GetLimits), asked once and kept. */
  async limits(opts: CallOptions & { refresh?: boolean } = {}): Promise<Limits> {
    if (this.limitsCache === undefined || opts.refresh) {
      try {
        this.limitsCache = limitsFromProto(await this.rpc.unary(methods.getLimits, create(pb.GetLimitsRequestSchema), opts));
      } catch (e) {
        if (!(e instanceof HarbingerError) || e.code !== Status.UNIMPLEMENTED) throw e;
        // A broker older than GetLimits.
        this.limitsCache = { maxPayloadBytes: 0, maxHeaderBytes: 0, maxRequestBytes: 0, maxBatch: 0, maxDeliveryBytes: 0, maxCredit: 0, maxConsumeBatch: 0 };
      }
    }
    return this.limitsCache;
  }

  /**
   * Publishes one message and resolves to its id (for a duplicate of a
   * unique job, the id of the job that holds the key); rejects with the
   * reason, a HarbingerError, when it was not stored.
   */
  async publish(msg: Message, opts: CallOptions = {}): Promise<string> {
    const [r] = await this.publishEach([msg], opts);
    if (r.error) throw r.error;
    return r.id;
  }

  /**
   * Publishes messages in as few requests as fit, and resolves to their
   * ids in order. When any was not stored, rejects with a PublishError
   * that says which were stored (with their ids) and why each other one
   * was not: publish only those again.
   */
  async publishMany(msgs: Message[], opts: CallOptions = {}): Promise<string[]> {
    const results = await this.publishEach(msgs, opts);
    const failed: FailedMessage[] = [];
    const stored = new Map<number, string>();
    results.forEach((r, i) => (r.error ? failed.push({ index: i, error: r.error }) : stored.set(i, r.id)));
    if (failed.length > 0) throw new PublishError(msgs.length, failed, stored);
    return results.map((r) => r.id);
  }

  /**
   * Publishes messages and resolves to one PublishResult per message, in
   * order. A message the broker would refuse as it stands (a string that is
   * not UTF-8, such as a lone surrogate; a payload or headers over the
   * broker's limits; one too large for any request) is answered here with
   * INVALID_ARGUMENT, naming the message and the field, and not sent; the
   * rest are. Messages larger together than one request go in several; if
   * one fails after an earlier one was answered, its messages and the
   * later ones are answered with its error. While the broker is
   * unreachable (restarting) it waits and tries again until the signal or
   * timeout ends it; a retry after a connection broke mid-call may store a
   * batch twice, which at-least-once delivery allows.
   */
  async publishEach(msgs: Message[], opts: CallOptions = {}): Promise<PublishResult[]> {
    if (msgs.length === 0) return [];
    const limits = await this.limits(opts);
    const hard = hardLimit(limits);
    const out: (PublishResult | undefined)[] = new Array(msgs.length).fill(undefined);
    const encoded = new Map<number, Uint8Array>();
    msgs.forEach((m, i) => {
      let err = check(m, limits);
      if (!err) {
        const bytes = encodeForRequest(toProto(m));
        if (bytes.length > hard) {
          err = new HarbingerError(
            Status.INVALID_ARGUMENT,
            `encodes to ${bytes.length} bytes, more than one request may carry (${hard} bytes, under the broker's request limit); not sent: store the body elsewhere and publish a reference`,
          );
        } else encoded.set(i, bytes);
      }
      if (err) out[i] = { id: "", duplicate: false, error: new HarbingerError(err.code, `harbinger: message ${i}: ${err.details}`) };
    });
    const parts = cut([...encoded.keys()], (i) => encoded.get(i)!.length, limits.maxBatch || 256, hard);
    let answered = false;
    for (let k = 0; k < parts.length; k++) {
      const part = parts[k];
      let resp: pb.PublishResponse;
      try {
        resp = await this.withRetry(() => this.rpc.unary(methods.publish, concat(part.map((i) => encoded.get(i)!)), opts), opts);
        if (resp.results.length !== part.length) {
          throw new HarbingerError(Status.UNAVAILABLE, "harbinger: the broker answered a batch with the wrong number of results");
        }
      } catch (e) {
        if (!answered || !(e instanceof HarbingerError)) throw e;
        // What the earlier requests stored stays stored: only this request's
        // messages and the later ones are to publish again.
        for (const rest of parts.slice(k)) for (const i of rest) out[i] = { id: "", duplicate: false, error: e };
        break;
      }
      answered = true;
      part.forEach((i, j) => (out[i] = resultFromProto(resp.results[j])));
    }
    return out.map((r) => r ?? { id: "", duplicate: false, error: new HarbingerError(Status.UNAVAILABLE, "harbinger: not sent") });
  }

  /** Calls f again with backoff while the broker answers UNAVAILABLE (restarting). */
  private async withRetry<T>(f: () => Promise<T>, opts: CallOptions): Promise<T> {
    const bo = new Backoff(1000);
    const deadline = opts.timeoutMs !== undefined ? Date.now() + opts.timeoutMs : Infinity;
    for (;;) {
      try {
        return await f();
      } catch (e) {
        if (!(e instanceof HarbingerError) || e.code !== Status.UNAVAILABLE || this.closedFlag) throw e;
        const wait = bo.next();
        if (Date.now() + wait >= deadline) throw e;
        if (!(await pause(wait, opts.signal))) throw e;
      }
    }
  }

  /** A Producer publishing through this client over one stream; close it when done. */
  producer(cfg: ProducerConfig = {}): Producer {
    return new Producer(this, cfg);
  }

  /** A Worker of queue running handler; see WorkerConfig. */
  worker(queue: string, handler: Handler, cfg: WorkerConfig = {}): Worker {
    return new Worker(this, queue, handler, cfg);
  }

  /** Runs a Worker until signal aborts (or stop); see Worker.run. */
  async runWorker(queue: string, handler: Handler, cfg: WorkerConfig & { signal?: AbortSignal } = {}): Promise<void> {
    const w = this.worker(queue, handler, cfg);
    const stop = () => w.stop();
    cfg.signal?.addEventListener("abort", stop, { once: true });
    if (cfg.signal?.aborted) w.stop();
    try {
      await w.run();
    } finally {
      cfg.signal?.removeEventListener("abort", stop);
    }
  }

  // -- admin -------------------------------------------------------------

  /** Creates a queue, or updates its config; unset fields take the broker's defaults. */
  declareQueue(name: string, config?: MessageInitShape<typeof pb.QueueConfigSchema>, opts?: CallOptions): Promise<pb.QueueInfo> {
    return this.rpc.unary(methods.declareQueue, create(pb.DeclareQueueRequestSchema, { name, config }), opts);
  }

  /** Every queue, sorted by name. */
  async listQueues(opts?: CallOptions): Promise<pb.QueueInfo[]> {
    return (await this.rpc.unary(methods.listQueues, create(pb.ListQueuesRequestSchema), opts)).queues;
  }

  /** One queue's config and counters; NOT_FOUND if there is none. */
  async queue(name: string, opts?: CallOptions): Promise<pb.QueueInfo> {
    const q = (await this.listQueues(opts)).find((q) => q.name === name);
    if (!q) throw new HarbingerError(Status.NOT_FOUND, `queue ${JSON.stringify(name)} not found`);
    return q;
  }

  /** Drops a queue's ready jobs and says how many. */
  async purgeQueue(name: string, opts?: CallOptions): Promise<number> {
    return Number((await this.rpc.unary(methods.purgeQueue, create(pb.PurgeQueueRequestSchema, { name }), opts)).purged);
  }

  /** Removes a queue; refused (FAILED_PRECONDITION) while it holds a job unless force. */
  deleteQueue(name: string, force = false, opts?: CallOptions): Promise<pb.DeleteQueueResponse> {
    return this.rpc.unary(methods.deleteQueue, create(pb.DeleteQueueRequestSchema, { name, force }), opts);
  }

  /** Stops deliveries from a queue until resumeQueue; publishes are still taken. */
  pauseQueue(name: string, opts?: CallOptions): Promise<pb.QueueInfo> {
    return this.rpc.unary(methods.pauseQueue, create(pb.PauseQueueRequestSchema, { name, paused: true }), opts);
  }

  resumeQueue(name: string, opts?: CallOptions): Promise<pb.QueueInfo> {
    return this.rpc.unary(methods.pauseQueue, create(pb.PauseQueueRequestSchema, { name, paused: false }), opts);
  }

  /** Where a job stands (waiting, delayed, running, dead) and what the broker knows of it. */
  getJob(queue: string, id: string, opts?: CallOptions): Promise<pb.JobInfo> {
    return this.rpc.unary(methods.getJob, create(pb.GetJobRequestSchema, { queue, id }), opts);
  }

  /**
   * Ends a job and says where it stood: "waiting" or "delayed" (removed)
   * or "running" (its worker is told to stop it; it is not retried).
   */
  async cancelJob(queue: string, id: string, opts?: CallOptions): Promise<string> {
    return (await this.rpc.unary(methods.cancelJob, create(pb.CancelJobRequestSchema, { queue, id }), opts)).state;
  }

  /** A queue's waiting jobs in the order they would run, and its running jobs. */
  listJobs(queue: string, limit = 0, opts?: CallOptions): Promise<pb.ListJobsResponse> {
    return this.rpc.unary(methods.listJobs, create(pb.ListJobsRequestSchema, { queue, limit: Math.max(limit, 0) }), opts);
  }

  /** Up to limit of a queue's dead letters (0: the broker's default), oldest first. */
  async listDeadLetters(queue: string, limit = 0, opts?: CallOptions): Promise<pb.DeadLetter[]> {
    const req = create(pb.ListDeadLettersRequestSchema, { queue, limit: Math.max(limit, 0) });
    return (await this.rpc.unary(methods.listDeadLetters, req, opts)).deadLetters;
  }

  /** Moves dead letters back to their queue (all when ids is empty); says how many. */
  async requeueDeadLetters(queue: string, ids: string[] = [], opts?: CallOptions): Promise<number> {
    const req = create(pb.RequeueDeadLettersRequestSchema, { queue, ids });
    return Number((await this.rpc.unary(methods.requeueDeadLetters, req, opts)).requeued);
  }

  /** Drops dead letters for good (all when ids is empty); says how many. */
  async deleteDeadLetters(queue: string, ids: string[] = [], opts?: CallOptions): Promise<number> {
    const req = create(pb.DeleteDeadLettersRequestSchema, { queue, ids });
    return Number((await this.rpc.unary(methods.deleteDeadLetters, req, opts)).deleted);
  }

  /** What the predictor learned of a queue's keys, busiest first. */
  async listKeys(queue: string, limit = 0, opts?: CallOptions): Promise<pb.KeyStats[]> {
    return (await this.rpc.unary(methods.listKeys, create(pb.ListKeysRequestSchema, { queue, limit: Math.max(limit, 0) }), opts)).keys;
  }

  /** A queue's groups under its limits and fair shares: running, limit, waiting, share of the worker time in the last minute, throttled. FAILED_PRECONDITION when the queue declares none. */
  listGroups(queue: string, limit = 0, opts?: CallOptions): Promise<pb.ListGroupsResponse> {
    return this.rpc.unary(methods.listGroups, create(pb.ListGroupsRequestSchema, { queue, limit: Math.max(limit, 0) }), opts);
  }

  /** Creates or replaces a periodic job (cron or every). */
  declareSchedule(schedule: MessageInitShape<typeof pb.ScheduleSchema>, opts?: CallOptions): Promise<pb.Schedule> {
    return this.rpc.unary(methods.declareSchedule, create(pb.ScheduleSchema, schedule), opts);
  }

  /** Every schedule, by name, in as many calls as their payloads take. */
  async listSchedules(opts?: CallOptions): Promise<pb.Schedule[]> {
    const out: pb.Schedule[] = [];
    let after = "";
    for (;;) {
      const resp = await this.rpc.unary(methods.listSchedules, create(pb.ListSchedulesRequestSchema, { after }), opts);
      out.push(...resp.schedules);
      if (!resp.next || resp.next === after) return out;
      after = resp.next;
    }
  }

  /** Stops (or, with paused false, restarts) a schedule's ticks. */
  pauseSchedule(name: string, paused = true, opts?: CallOptions): Promise<pb.Schedule> {
    return this.rpc.unary(methods.pauseSchedule, create(pb.PauseScheduleRequestSchema, { name, paused }), opts);
  }

  async deleteSchedule(name: string, opts?: CallOptions): Promise<void> {
    await this.rpc.unary(methods.deleteSchedule, create(pb.DeleteScheduleRequestSchema, { name }), opts);
  }
}

/**
 * Splits the messages at idx, in order, into requests of at most count
 * messages and target bytes (a message alone may be larger).
 */
function cut(idx: number[], size: (i: number) => number, count: number, target: number): number[][] {
  const parts: number[][] = [];
  let cur: number[] = [];
  let total = 0;
  for (const i of idx) {
    if (cur.length > 0 && (cur.length === count || total + size(i) > target)) {
      parts.push(cur);
      cur = [];
      total = 0;
    }
    cur.push(i);
    total += size(i);
  }
  if (cur.length > 0) parts.push(cur);
  return parts;
}

/** Encoded messages, each already framed as a field of PublishRequest, as one request. */
export function concat(chunks: Uint8Array[]): Uint8Array {
  let n = 0;
  for (const c of chunks) n += c.length;
  const out = new Uint8Array(n);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.length;
  }
  return out;
}
