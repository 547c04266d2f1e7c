#!/usr/bin/env bash
# Proves that the Go SDK is a module a user can take alone: a fresh module
# outside the repository that requires only github.com/harbinger-mq/harbinger/client
# (through a replace to this checkout, as a user would through a tag) builds a
# producer and a worker, and its go.sum names no module the SDK does not use.
#
# Usage, from anywhere in the repository:
#
#     scripts/check-sdk-deps.sh
#
# It writes only to a temporary directory, removed on exit. Modules come from
# the module cache or the module proxy, as for any build.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"

cat > go.mod <<MOD
module example.com/sdkuser

go 1.26.0

require github.com/harbinger-mq/harbinger/client v0.0.0-00010101000000-000000000000

replace (
	github.com/harbinger-mq/harbinger/client => $root/client
	github.com/harbinger-mq/harbinger/api => $root/api
)
MOD

# The repository's own example producer and worker, copied as a user would.
mkdir -p producer worker
cp "$root/examples/producer/main.go" producer/
cp "$root/examples/worker/main.go" worker/

GOFLAGS=-mod=mod go mod tidy
go build -o /dev/null ./producer
go build -o /dev/null ./worker

# Every module whose code the two programs build from, and every module
# go.sum names (with its source or only its go.mod, which the version
# selection reads).
used="$(go list -deps -f '{{with .Module}}{{.Path}}{{end}}' ./producer ./worker | sort -u)"
summed="$(awk '{print $1}' go.sum | sort -u)"
echo "sdk-deps: modules the producer and worker are built from:"
sed 's/^/  /' <<<"$used"
echo "sdk-deps: go.sum:"
sed 's/^/  /' go.sum

# The yardstick: a module that uses grpc and protobuf itself, the SDK's two
# requirements. Their go.mod files and their own tests' imports put a few
# more modules in go.sum (go mod tidy records what `go test all` would
# need); those come with gRPC, not with Harbinger.
mkdir -p "$tmp/base"
cd "$tmp/base"
cat > go.mod <<'MOD'
module example.com/grpcuser

go 1.26.0
MOD
cat > main.go <<'GO'
package main

import (
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"
)

func main() {
	c, err := grpc.NewClient("localhost:7070", grpc.WithTransportCredentials(insecure.NewCredentials()))
	fmt.Println(c, err, durationpb.New(time.Second))
}
GO
grpc_v="$(cd "$tmp" && go list -m -f '{{.Version}}' google.golang.org/grpc)"
pb_v="$(cd "$tmp" && go list -m -f '{{.Version}}' google.golang.org/protobuf)"
GOFLAGS=-mod=mod go get "google.golang.org/grpc@$grpc_v" "google.golang.org/protobuf@$pb_v" >/dev/null 2>&1
GOFLAGS=-mod=mod go mod tidy
base="$(awk '{print $1}' go.sum | sort -u)"
cd "$tmp"

status=0
# Every module go.sum names is one the programs are built from or one a
# plain gRPC program's go.sum names too.
for m in $summed; do
	if ! grep -qxF "$m" <<<"$used" && ! grep -qxF "$m" <<<"$base"; then
		echo "sdk-deps: go.sum names $m, which neither the SDK's build nor a plain gRPC program needs" >&2
		status=1
	fi
done
# Nothing of the broker, the lab or their test tools may be named at all.
if grep -E 'nats-io|redis|chromedp|prometheus|goleak|amqp091|yaml|cron|^github.com/harbinger-mq/harbinger$' <<<"$summed"; then
	echo "sdk-deps: go.sum names a module the SDK must not bring" >&2
	status=1
fi
if [[ $status -eq 0 ]]; then
	echo "sdk-deps: ok: go.sum names $(wc -l <<<"$summed") modules: those the SDK is built from, and $(comm -23 <(echo "$summed") <(echo "$used") | tr '\n' ' ')which a plain gRPC program's go.sum names too"
fi
exit $status
