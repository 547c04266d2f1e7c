"""A worker: runs each job of a queue, and finishes the running ones on SIGTERM.

    python3 examples/worker.py --addr 127.0.0.1:7070 --queue demo

A job of type "sleep" sleeps for its payload's seconds; any other job is done at once.
"""

import argparse
import asyncio
import sys

import harbinger


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--addr", default="127.0.0.1:7070")
    ap.add_argument("--queue", default="demo")
    ap.add_argument("--concurrency", type=int, default=8)
    args = ap.parse_args()

    async def handle(job: harbinger.Job) -> None:
        print("started", job.id, flush=True)
        if job.job_type == "sleep":
            await asyncio.sleep(float(job.payload or b"0"))

    async with harbinger.Client(args.addr) as client:
        worker = client.worker(args.queue, handle, concurrency=args.concurrency, stop_timeout=25)
        worker.handle_signals()  # SIGTERM, SIGINT: finish running jobs, then return
        await worker.run()
    print("stopped", file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main())
