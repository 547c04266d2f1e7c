"""Publishing from code that is not async (a script, a WSGI view).

    python3 examples/publish_sync.py --addr 127.0.0.1:7070 --queue demo
"""

import argparse

import harbinger


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--addr", default="127.0.0.1:7070")
    ap.add_argument("--queue", default="demo")
    args = ap.parse_args()
    with harbinger.SyncClient(args.addr) as client:
        job_id = client.publish(harbinger.Message(queue=args.queue, producer="script", job_type="report"))
        print("published", job_id, client.get_job(args.queue, job_id).state)


if __name__ == "__main__":
    main()
