/**
 * Harbinger for TypeScript on Node: publish jobs, run workers that tell
 * the broker how long jobs take, and manage queues, over the broker's
 * gRPC API. The wire types (QueueConfig, Schedule, the admin answers) are
 * exported as `pb`; `durationFromMs` makes their Duration fields.
 */
export { Client, KEEPALIVE_TIME_MS, KEEPALIVE_TIMEOUT_MS } from "./client.js";
export type { ClientOptions, TLSOptions } from "./client.js";
export { DeadLetter, HarbingerError, JobAborted, ProducerClosed, PublishError, Status, codeName, isCode } from "./errors.js";
export type { FailedMessage } from "./errors.js";
export type { Job, Limits, Message, PublishResult } from "./message.js";
export { Producer, DEFAULT_CLOSE_TIMEOUT_MS, DEFAULT_MAX_BATCH, DEFAULT_MAX_BATCH_BYTES, DEFAULT_WINDOW } from "./producer.js";
export type { ProducerConfig } from "./producer.js";
export { Worker } from "./worker.js";
export type { Handler, Logger, RequestError, WorkerConfig } from "./worker.js";
export type { CallOptions } from "./rpc.js";
export { durationFromMs, durationMs, timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
export * as pb from "./gen/harbinger/v1/harbinger_pb.js";
