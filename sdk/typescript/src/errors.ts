import { status } from "@grpc/grpc-js";

/** gRPC status codes, as the broker answers them. */
export const Status = status;
export type Status = status;

const names: Record<number, string> = Object.fromEntries(
  Object.entries(status)
    .filter(([, v]) => typeof v === "number")
    .map(([k, v]) => [v as number, k]),
);

/** The name of a gRPC status code ("NOT_FOUND"). */
export function codeName(code: number): string {
  return names[code] ?? `CODE_${code}`;
}

/**
 * An answer of the broker, or of this SDK on its behalf, that is not a
 * success. `code` is the gRPC status code: compare it with `Status`
 * (`err.code === Status.NOT_FOUND`).
 */
export class HarbingerError extends Error {
  readonly code: Status;
  /** The broker's (or the SDK's) reason, without the code. */
  readonly details: string;

  constructor(code: Status, details: string) {
    super(`${codeName(code)}: ${details}`);
    this.name = "HarbingerError";
    this.code = code;
    this.details = details;
  }

  /** The name of the code, such as "INVALID_ARGUMENT". */
  get codeName(): string {
    return codeName(this.code);
  }
}

/** Whether err is a HarbingerError with code. */
export function isCode(err: unknown, code: Status): err is HarbingerError {
  return err instanceof HarbingerError && err.code === code;
}

/** A failed call's status as a HarbingerError. */
export function fromServiceError(err: unknown): HarbingerError {
  if (err instanceof HarbingerError) return err;
  const e = err as { code?: number; details?: string; message?: string };
  if (typeof e?.code === "number") return new HarbingerError(e.code, e.details ?? e.message ?? "");
  return new HarbingerError(Status.UNKNOWN, String((err as Error)?.message ?? err));
}

/** One message of a publish that was not stored, by its index in the call. */
export interface FailedMessage {
  index: number;
  error: HarbingerError;
}

/**
 * Some messages of a publish were not stored; every other message was.
 * `stored` maps each stored message's index to its id; publish only the
 * `failed` ones again, or the stored ones are duplicated. `code` is the
 * failed messages' code when they share one, else UNKNOWN.
 */
export class PublishError extends HarbingerError {
  readonly total: number;
  readonly failed: FailedMessage[];
  readonly stored: Map<number, string>;

  constructor(total: number, failed: FailedMessage[], stored: Map<number, string>) {
    const show = 3;
    const parts = [`harbinger: ${failed.length} of ${total} messages not stored`];
    failed.slice(0, show).forEach((f) => parts.push(`message ${f.index}: ${f.error.details}`));
    if (failed.length > show) parts.push(`and ${failed.length - show} more`);
    const codes = new Set(failed.map((f) => f.error.code));
    super(codes.size === 1 ? [...codes][0] : Status.UNKNOWN, parts.join("; "));
    this.name = "PublishError";
    this.total = total;
    this.failed = failed;
    this.stored = stored;
  }

  /** The stored messages' ids, in call order. */
  get ids(): string[] {
    return [...this.stored.keys()].sort((a, b) => a - b).map((i) => this.stored.get(i)!);
  }
}

/**
 * Thrown by a handler, sends its job to the dead-letter list at once,
 * without further attempts; its message is the dead letter's reason.
 */
export class DeadLetter extends Error {
  constructor(message: string) {
    super(message);
    this.name = "DeadLetter";
  }
}

/** Publishing through a Producer that was closed. */
export class ProducerClosed extends HarbingerError {
  constructor() {
    super(Status.FAILED_PRECONDITION, "harbinger: producer closed");
    this.name = "ProducerClosed";
  }
}

/**
 * The reason a job's `signal` is aborted with: `"cancelled"` (the broker
 * cancelled the job), `"timeout"` (it ran past the worker's timeoutMs) or
 * `"stopping"` (the worker is stopping and its grace ran out, or its
 * stream to the broker broke).
 */
export class JobAborted extends Error {
  readonly why: "cancelled" | "timeout" | "stopping";

  constructor(why: "cancelled" | "timeout" | "stopping", message: string) {
    super(message);
    this.name = "JobAborted";
    this.why = why;
  }
}
