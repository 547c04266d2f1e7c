/**
 * Runs `harbinger serve` as a child process for the tests. The binary is
 * $HARBINGER_BIN when set (.ci/run builds it once for every SDK), else it
 * is built from the repository. Readiness is the broker's own "serving"
 * log line, which names the address it bound; nothing sleeps to wait.
 */
import { ChildProcess, execFileSync, spawn } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import type { Client, Job } from "../src/index.js";

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../../../..");
let built: string | undefined;

export function binary(): string {
  if (process.env.HARBINGER_BIN) return process.env.HARBINGER_BIN;
  if (!built) {
    built = join(mkdtempSync(join(tmpdir(), "harbinger-bin-")), "harbinger");
    execFileSync("go", ["build", "-o", built, "./cmd/harbinger"], { cwd: ROOT, stdio: "inherit" });
  }
  return built;
}

export class Broker {
  addr = "127.0.0.1:0";
  proc?: ChildProcess;
  readonly log: string[] = [];

  constructor(
    readonly dataDir?: string,
    readonly extra: string[] = [],
  ) {}

  start(timeoutMs = 30_000): Promise<string> {
    const args = ["serve", "-grpc-addr", this.addr, "-http-addr", "off"];
    args.push(...(this.dataDir ? ["-data-dir", this.dataDir] : ["--memory"]), ...this.extra);
    const proc = spawn(binary(), args, { stdio: ["ignore", "ignore", "pipe"] });
    this.proc = proc;
    return new Promise((resolveAddr, reject) => {
      const timer = setTimeout(() => {
        proc.kill("SIGKILL");
        reject(new Error("harbinger serve did not start:\n" + this.log.slice(-20).join("\n")));
      }, timeoutMs);
      const lines = createInterface({ input: proc.stderr! });
      let ready = false;
      lines.on("line", (line) => {
        this.log.push(line);
        const m = /msg="harbinger: serving" grpc=(\S+)/.exec(line);
        if (m && !ready) {
          ready = true;
          clearTimeout(timer);
          this.addr = m[1];
          resolveAddr(this.addr);
        }
      });
      proc.on("exit", () => {
        if (!ready) {
          clearTimeout(timer);
          reject(new Error("harbinger serve exited:\n" + this.log.slice(-20).join("\n")));
        }
      });
    });
  }

  stop(signal: NodeJS.Signals = "SIGTERM"): Promise<void> {
    const p = this.proc;
    this.proc = undefined;
    if (!p || p.exitCode !== null) return Promise.resolve();
    return new Promise((r) => {
      p.once("exit", () => r());
      p.kill(signal);
    });
  }
}

/** Polls an admin answer until pred holds, with a deadline (the broker's state is only seen by asking). */
export async function until(pred: () => Promise<boolean>, what: string, timeoutMs = 20_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await pred())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Runs a worker of queue with handler until the test calls the returned stop. */
export function start(c: Client, queue: string, handler: (job: Job) => Promise<void>, cfg = {}) {
  const w = c.worker(queue, handler, cfg);
  const done = w.run();
  return async () => {
    w.stop();
    await done;
  };
}
