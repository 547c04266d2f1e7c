"""The Python SDK's side of the SDK conformance scenario (internal/conformance,
docs/sdk.md): a producer or a worker that does what scenario.json says and
reports each outcome as a JSON line on stdout. The Go and TypeScript SDKs
have the same agent.

    python3 conformance/agent.py --addr HOST:PORT --queue Q --scenario FILE producer|worker
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import harbinger  # noqa: E402
from harbinger import Job, Message  # noqa: E402


def emit(**v: object) -> None:
    print(json.dumps(v), flush=True)


def messages(sc: dict, queue: str, steps: list, first: int) -> list[tuple[int, str, Message]]:
    out = []
    n = first
    for s in steps:
        for _ in range(s["count"]):
            kind = s["kind"]
            m = Message(queue=queue, producer=sc["producer"], job_type=kind,
                        payload=json.dumps({"n": n, "kind": kind}).encode())
            if kind == "bad-utf8":
                m.job_type = "bad-utf8 \udcff"  # the byte 0xff, as Python holds bytes that are not UTF-8
            elif kind == "too-large":
                m.payload = bytes(sc["too_large_bytes"])
            out.append((n, kind, m))
            n += 1
    return out


async def produce(c: harbinger.Client, queue: str, sc: dict) -> None:
    async with c.producer(window=4, max_batch=16) as p:
        async def one(n: int, kind: str, m: Message) -> None:
            for attempt in range(51):
                r = await p.publish_result(m)
                if not isinstance(r.error, harbinger.Unavailable) or attempt == 50:
                    break
                await asyncio.sleep(0.1)
            code = r.error.code.value[0] if r.error else 0
            emit(event="result", n=n, kind=kind, id=r.id, code=code, error=r.error.message if r.error else "")

        first = messages(sc, queue, sc["phase1"], 0)
        await asyncio.gather(*(one(*x) for x in first))
        emit(event="phase", phase=1)
        line = await asyncio.to_thread(sys.stdin.readline)
        if line.strip() != "continue":
            raise SystemExit("producer: no continue on stdin")
        await asyncio.gather(*(one(*x) for x in messages(sc, queue, sc["phase2"], len(first))))
        emit(event="phase", phase=2)


async def work(c: harbinger.Client, queue: str, sc: dict, concurrency: int) -> None:
    async def handle(job: Job) -> None:
        p = json.loads(job.payload)
        ev = {"n": p["n"], "kind": p["kind"], "attempt": job.attempt}
        emit(event="start", **ev)
        outcome = "ok"
        try:
            kind = p["kind"]
            if kind == "sleep":
                await asyncio.sleep(sc["sleep_ms"] / 1000)
            elif kind == "slow":
                await asyncio.sleep(sc["slow_ms"] / 1000)
            elif kind == "flaky" and job.attempt == 1:
                raise RuntimeError(f"flaky {p['n']}")
            elif kind == "fail":
                raise RuntimeError(f"fail {p['n']}")
            elif kind == "dead":
                outcome = "dead"
                raise harbinger.DeadLetter(f"dead {p['n']}")
            elif kind == "block":
                await asyncio.Event().wait()
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        except Exception:
            outcome = "dead" if outcome == "dead" else "error"
            raise
        finally:
            emit(event="end", outcome=outcome, **ev)

    w = c.worker(queue, handle, concurrency=concurrency, name="conformance-python")
    w.handle_signals()
    await w.run()


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--addr", default="127.0.0.1:7070")
    ap.add_argument("--queue", default="conformance")
    ap.add_argument("--scenario", required=True)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("role", choices=["producer", "worker"])
    args = ap.parse_args()
    sc = json.loads(Path(args.scenario).read_text())
    async with harbinger.Client(args.addr) as c:
        if args.role == "producer":
            await produce(c, args.queue, sc)
        else:
            await work(c, args.queue, sc, args.concurrency)


if __name__ == "__main__":
    asyncio.run(main())
