import { create, toBinary } from "@bufbuild/protobuf";
import { durationFromMs, timestampDate, timestampFromDate, durationMs } from "@bufbuild/protobuf/wkt";
import * as pb from "./gen/harbinger/v1/harbinger_pb.js";
import { HarbingerError, Status } from "./errors.js";
import { badUtf16At } from "./text.js";

/**
 * A job to publish. `producer` and `jobType` are part of the predictor's
 * key: who sends the job and what kind of job it is; `sizeHint` feeds its
 * size bucket (0: the payload's size). A string payload is sent as UTF-8.
 * Durations are in milliseconds; unset ones take the queue's. `runAt`, or
 * `delayMs` on the broker's clock, keeps the job invisible until then.
 * `uniqueKey` makes the publish idempotent for `uniqueForMs`: another
 * publish with the key inside the window stores nothing and is answered
 * with the first job's id as a duplicate.
 */
export interface Message {
  queue: string;
  payload?: Uint8Array | string;
  producer?: string;
  jobType?: string;
  sizeHint?: number | bigint;
  headers?: Record<string, string>;
  ttlMs?: number;
  maxAttempts?: number;
  runAt?: Date;
  delayMs?: number;
  retryBaseMs?: number;
  retryMaxMs?: number;
  uniqueKey?: string;
  uniqueForMs?: number;
}

/** The broker's size limits (GetLimits), in bytes but the counts. */
export interface Limits {
  maxPayloadBytes: number;
  maxHeaderBytes: number;
  maxRequestBytes: number;
  maxBatch: number;
  maxDeliveryBytes: number;
  maxCredit: number;
  /**
   * Most deliveries in one response, and acks and nacks in one request, on
   * a Consume stream; 0 from a broker that sends and reads no batches.
   */
  maxConsumeBatch: number;
}

export function limitsFromProto(p: pb.Limits): Limits {
  return {
    maxPayloadBytes: Number(p.maxPayloadBytes),
    maxHeaderBytes: Number(p.maxHeaderBytes),
    maxRequestBytes: Number(p.maxRequestBytes),
    maxBatch: p.maxBatch,
    maxDeliveryBytes: Number(p.maxDeliveryBytes),
    maxCredit: p.maxCredit,
    maxConsumeBatch: p.maxConsumeBatch,
  };
}

/** The request limit assumed of a broker too old to answer GetLimits: gRPC's default. */
export const FALLBACK_REQUEST_BYTES = 4 << 20;
/** Kept free below the broker's request limit for a request's framing. */
export const REQUEST_SLACK = 16 << 10;

/** The most encoded bytes one message may take, given the broker's limits. */
export function hardLimit(l: Limits | undefined): number {
  const req = l && l.maxRequestBytes > 0 ? l.maxRequestBytes : FALLBACK_REQUEST_BYTES;
  return Math.max(req - REQUEST_SLACK, Math.floor(req / 2));
}

const encoder = new TextEncoder();

function payloadBytes(p: Uint8Array | string | undefined): Uint8Array {
  if (p === undefined) return new Uint8Array(0);
  return typeof p === "string" ? encoder.encode(p) : p;
}

function utf8Length(s: string): number {
  return Buffer.byteLength(s, "utf8");
}

/**
 * Why the broker would refuse m as it stands, found before sending it, or
 * undefined. The text names the field; the caller adds which message.
 */
export function check(m: Message, limits: Limits | undefined): HarbingerError | undefined {
  const invalid = (what: string) => new HarbingerError(Status.INVALID_ARGUMENT, what);
  const strings: [string, unknown][] = [
    ["queue", m.queue],
    ["producer", m.producer ?? ""],
    ["jobType", m.jobType ?? ""],
    ["uniqueKey", m.uniqueKey ?? ""],
  ];
  if (typeof m.payload === "string") strings.push(["payload", m.payload]);
  for (const [k, v] of Object.entries(m.headers ?? {})) {
    strings.push([`header name ${JSON.stringify(k)}`, k], [`header ${JSON.stringify(k)}`, v]);
  }
  for (const [name, v] of strings) {
    if (typeof v !== "string") return invalid(`field ${name} is ${typeof v}, not a string; not sent`);
    const i = badUtf16At(v);
    if (i >= 0) {
      const unit = v.charCodeAt(i).toString(16).toUpperCase();
      return invalid(`field ${name} is not valid UTF-8 (a lone surrogate, U+${unit}, at index ${i}); not sent`);
    }
  }
  if (!m.queue) return invalid("field queue is empty; not sent");
  if (m.payload !== undefined && typeof m.payload !== "string" && !(m.payload instanceof Uint8Array)) {
    return invalid("field payload is neither a Uint8Array nor a string; not sent");
  }
  if (m.uniqueKey && m.uniqueForMs === undefined) {
    return invalid("field uniqueForMs is unset: a unique key needs a window; not sent");
  }
  if (limits) {
    const size = typeof m.payload === "string" ? utf8Length(m.payload) : (m.payload?.length ?? 0);
    if (limits.maxPayloadBytes > 0 && size > limits.maxPayloadBytes) {
      return invalid(`field payload is ${size} bytes, over the broker's limit of ${limits.maxPayloadBytes}; not sent`);
    }
    if (limits.maxHeaderBytes > 0 && m.headers) {
      let n = 0;
      for (const [k, v] of Object.entries(m.headers)) n += utf8Length(k) + utf8Length(v);
      if (n > limits.maxHeaderBytes) {
        return invalid(`field headers are ${n} bytes, over the broker's limit of ${limits.maxHeaderBytes}; not sent`);
      }
    }
  }
  return undefined;
}

/** m as the wire's Message. */
export function toProto(m: Message): pb.Message {
  return create(pb.MessageSchema, {
    queue: m.queue,
    producer: m.producer ?? "",
    jobType: m.jobType ?? "",
    sizeHint: BigInt(m.sizeHint ?? 0),
    payload: payloadBytes(m.payload),
    maxAttempts: Math.max(m.maxAttempts ?? 0, 0),
    headers: { ...(m.headers ?? {}) },
    uniqueKey: m.uniqueKey ?? "",
    ttl: m.ttlMs !== undefined ? durationFromMs(m.ttlMs) : undefined,
    runAt: m.runAt !== undefined ? timestampFromDate(m.runAt) : undefined,
    delay: m.delayMs !== undefined ? durationFromMs(m.delayMs) : undefined,
    retryBase: m.retryBaseMs !== undefined ? durationFromMs(m.retryBaseMs) : undefined,
    retryMax: m.retryMaxMs !== undefined ? durationFromMs(m.retryMaxMs) : undefined,
    uniqueFor: m.uniqueForMs !== undefined ? durationFromMs(m.uniqueForMs) : undefined,
  });
}

/** The encoded message as one field of a PublishRequest (tag, length, bytes). */
export function encodeForRequest(p: pb.Message): Uint8Array {
  const body = toBinary(pb.MessageSchema, p);
  const head: number[] = [0x0a];
  let n = body.length;
  while (n >= 0x80) {
    head.push((n & 0x7f) | 0x80);
    n >>>= 7;
  }
  head.push(n);
  const out = new Uint8Array(head.length + body.length);
  out.set(head, 0);
  out.set(body, head.length);
  return out;
}

/**
 * One message's answer: its id when stored (for a duplicate of a unique
 * job, the id of the job that holds the key), or why it was not stored.
 */
export interface PublishResult {
  id: string;
  duplicate: boolean;
  error?: HarbingerError;
}

export function resultFromProto(r: pb.PublishResult): PublishResult {
  if (r.id && r.code === 0) return { id: r.id, duplicate: r.duplicate };
  if (r.code === 0) {
    return {
      id: "",
      duplicate: false,
      error: new HarbingerError(Status.INTERNAL, "harbinger: the broker answered a message with neither an id nor a reason"),
    };
  }
  return { id: "", duplicate: false, error: new HarbingerError(r.code, r.error) };
}

/**
 * One job handed to a worker's handler. `signal` aborts when the worker
 * wants the handler to stop: the broker cancelled the job, it ran past
 * the worker's timeout, or the worker is stopping (its reason is a
 * JobAborted saying which). `leaseMs` is how long the worker has before
 * the broker redelivers the job (renewed while the handler runs);
 * `predictedMs` is the broker's guess of how long it takes.
 */
export interface Job {
  readonly id: string;
  readonly queue: string;
  readonly producer: string;
  readonly jobType: string;
  readonly sizeHint: bigint;
  readonly payload: Buffer;
  readonly headers: Readonly<Record<string, string>>;
  readonly attempt: number;
  readonly publishedAt: Date;
  readonly leaseMs: number;
  readonly tier: number;
  readonly predictedMs: number;
  readonly signal: AbortSignal;
}

export function jobFromProto(d: pb.Delivery, signal: AbortSignal): Job {
  return {
    id: d.id,
    queue: d.queue,
    producer: d.producer,
    jobType: d.jobType,
    sizeHint: d.sizeHint,
    payload: Buffer.from(d.payload.buffer, d.payload.byteOffset, d.payload.byteLength),
    headers: d.headers,
    attempt: d.attempt,
    publishedAt: d.publishedAt ? timestampDate(d.publishedAt) : new Date(0),
    leaseMs: d.lease ? durationMs(d.lease) : 0,
    tier: d.tier,
    predictedMs: d.predictedMs,
    signal,
  };
}
