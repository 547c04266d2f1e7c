/** The shortest wait between two tries, in milliseconds. */
export const MIN_BACKOFF_MS = 50;

/**
 * Spaces out the tries of something the broker cannot do for now: the
 * wait doubles from 50 ms up to maxMs, each drawn at random between half
 * and all of it, so that the clients that lost a broker together do not
 * all come back at the same instant.
 */
export class Backoff {
  private cur = MIN_BACKOFF_MS;
  constructor(private readonly maxMs: number) {}

  next(): number {
    const d = this.cur / 2 + Math.random() * (this.cur / 2);
    this.cur = Math.min(this.cur * 2, this.maxMs);
    return d;
  }

  reset(): void {
    this.cur = MIN_BACKOFF_MS;
  }
}

/** Resolves after ms, or at once (false) when signal aborts. */
export function pause(ms: number, signal?: AbortSignal): Promise<boolean> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve(false);
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve(true);
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      resolve(false);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
