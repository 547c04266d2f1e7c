"""A producer: publishes n jobs through a Producer, which keeps a window of
batches in flight, and says how many were stored.

    python3 examples/producer.py --addr 127.0.0.1:7070 --queue demo -n 1000
"""

import argparse
import asyncio

import harbinger


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--addr", default="127.0.0.1:7070")
    ap.add_argument("--queue", default="demo")
    ap.add_argument("-n", type=int, default=1000)
    args = ap.parse_args()

    async with harbinger.Client(args.addr) as client:
        async with client.producer() as producer:
            futures = [
                await producer.enqueue(harbinger.Message(
                    queue=args.queue, producer="example", job_type="thumbnail" if i % 10 else "report",
                    payload=b"job %d" % i))
                for i in range(args.n)
            ]
            results = await asyncio.gather(*futures)
    failed = [(i, r.error) for i, r in enumerate(results) if r.error is not None]
    print(f"stored {len(results) - len(failed)} of {len(results)}")
    for i, err in failed[:5]:
        print(f"message {i}: {err}")


if __name__ == "__main__":
    asyncio.run(main())
