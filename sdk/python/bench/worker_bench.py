"""Measures the Python SDK's throughput against a running broker, as
internal/sdkbench does for Go: publishes n empty jobs through a Producer
(timed), then runs a worker with empty handlers until every job was handled
and acked (timed), and prints one JSON line. scripts/sdk-bench.sh runs it
against a fresh `harbinger serve --memory`.

    python3 bench/worker_bench.py --addr 127.0.0.1:7070 -n 20000 --concurrency 16
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import harbinger  # noqa: E402


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--addr", default="127.0.0.1:7070")
    ap.add_argument("--queue", default="bench")
    ap.add_argument("-n", type=int, default=20000)
    ap.add_argument("--concurrency", type=int, default=16)
    args = ap.parse_args()
    async with harbinger.Client(args.addr) as c:
        start = time.perf_counter()
        async with c.producer() as p:
            futs = [await p.enqueue(harbinger.Message(queue=args.queue, producer="bench", job_type="empty"))
                    for _ in range(args.n)]
            results = await asyncio.gather(*futs)
        publish = time.perf_counter() - start
        if any(r.error for r in results):
            raise SystemExit("some publishes failed")

        handled = 0
        done = asyncio.Event()

        async def handler(job: harbinger.Job) -> None:
            nonlocal handled
            handled += 1
            if handled == args.n:
                done.set()

        w = c.worker(args.queue, handler, concurrency=args.concurrency)
        start = time.perf_counter()
        task = asyncio.ensure_future(w.run())
        await done.wait()
        while (await c.queue(args.queue)).acked < args.n:  # the last acks are on their way
            await asyncio.sleep(0.001)
        work = time.perf_counter() - start
        w.stop()
        await task
    print(json.dumps({"sdk": "python", "jobs": args.n, "concurrency": args.concurrency,
                      "publish_per_s": args.n / publish, "worker_per_s": args.n / work}))


if __name__ == "__main__":
    asyncio.run(main())
