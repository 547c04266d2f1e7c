import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Broker } from "./broker.js";
import { Client, Status, isCode } from "../src/index.js";

test("a token over TLS", async () => {
  const dir = mkdtempSync(join(tmpdir(), "harbinger-ts-auth-"));
  const token = "hbr_" + randomBytes(16).toString("hex");
  const sha = createHash("sha256").update(token).digest("hex");
  writeFileSync(join(dir, "tokens.yaml"), `tokens:\n  - name: "sdk-test"\n    sha256: ${sha}\n    scopes: ["publish:ts.", "read"]\n`);
  execFileSync("openssl", [
    "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
    "-keyout", join(dir, "key.pem"), "-out", join(dir, "cert.pem"), "-days", "1", "-subj", "/CN=localhost",
    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
  ], { stdio: "ignore" });
  const b = new Broker(undefined, ["-tokens", join(dir, "tokens.yaml"), "-tls-cert", join(dir, "cert.pem"), "-tls-key", join(dir, "key.pem")]);
  const addr = await b.start();
  const ca = readFileSync(join(dir, "cert.pem"));
  const ok = new Client(addr, { token, tls: { ca } });
  const wrong = new Client(addr, { token: "hbr_wrong", tls: { ca } });
  const none = new Client(addr, { tls: { ca } });
  try {
    assert.ok(await ok.publish({ queue: "ts.auth" }));
    await assert.rejects(ok.publish({ queue: "other" }), (e) => isCode(e, Status.PERMISSION_DENIED));
    await assert.rejects(ok.purgeQueue("ts.auth"), (e) => isCode(e, Status.PERMISSION_DENIED));
    await assert.rejects(wrong.publish({ queue: "ts.auth" }, { timeoutMs: 10_000 }), (e) => isCode(e, Status.UNAUTHENTICATED));
    await assert.rejects(none.listQueues(), (e) => isCode(e, Status.UNAUTHENTICATED));
  } finally {
    ok.close();
    wrong.close();
    none.close();
    await b.stop();
  }
});

test("a token needs TLS beyond loopback", () => {
  assert.throws(() => new Client("broker.example:7070", { token: "t" }), /TLS/);
});
