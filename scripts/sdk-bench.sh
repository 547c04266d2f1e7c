#!/usr/bin/env bash
# Throughput of each SDK (Go, Python, TypeScript) against its own fresh
# `harbinger serve --memory`: n empty jobs published through the SDK's
# producer, then handled by its worker with empty handlers, each timed
# (internal/sdkbench, sdk/python/bench/worker_bench.py,
# sdk/typescript/bench/worker.ts). The runs go one at a time, SDK after SDK,
# `runs` rounds; each prints one JSON line. This is a benchmark, not a test:
# on a shared machine the figures move with whatever else runs.
#
# Usage, from anywhere in the repository, after `npm ci` in sdk/typescript:
#
#     scripts/sdk-bench.sh [n] [concurrency] [runs]
set -euo pipefail

n="${1:-20000}"
concurrency="${2:-16}"
runs="${3:-3}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
tmp="$(mktemp -d)"
broker_pid=""
cleanup() {
	if [[ -n "$broker_pid" ]]; then kill "$broker_pid" 2>/dev/null || true; fi
	rm -rf "$tmp"
}
trap cleanup EXIT

go build -o "$tmp/harbinger" ./cmd/harbinger
go build -o "$tmp/sdkbench" ./internal/sdkbench
(cd sdk/typescript && npx tsc -p .)

# serve starts a broker on a free port and sets addr once it says it serves.
serve() {
	"$tmp/harbinger" serve --memory -grpc-addr 127.0.0.1:0 -http-addr off 2>"$tmp/broker.log" &
	broker_pid=$!
	for _ in $(seq 1 300); do
		addr="$(sed -n 's/.*msg="harbinger: serving" grpc=\([^ ]*\).*/\1/p' "$tmp/broker.log")"
		[[ -n "$addr" ]] && return 0
		sleep 0.1
	done
	echo "sdk-bench: the broker did not start" >&2
	return 1
}

stop() {
	kill "$broker_pid"
	wait "$broker_pid" 2>/dev/null || true
	broker_pid=""
}

echo "sdk-bench: $n empty jobs, worker concurrency $concurrency, $runs rounds, $(nproc) cores"
for round in $(seq 1 "$runs"); do
	for sdk in go python typescript; do
		serve
		case "$sdk" in
		go) "$tmp/sdkbench" -addr "$addr" -n "$n" -concurrency "$concurrency" ;;
		python) /usr/bin/python3 sdk/python/bench/worker_bench.py --addr "$addr" -n "$n" --concurrency "$concurrency" ;;
		typescript) node sdk/typescript/dist/bench/worker.js --addr "$addr" -n "$n" --concurrency "$concurrency" ;;
		esac
		stop
	done
done
