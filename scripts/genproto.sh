#!/usr/bin/env bash
# Regenerates the Go code for the gRPC contract under api/.
#
# Usage, from anywhere in the repository:
#
#     scripts/genproto.sh
#
# Needs protoc (Debian: apt-get install -y protobuf-compiler) and Go. The two
# plugins are used from PATH when the pinned versions are there; otherwise they
# are installed into a temporary GOBIN that is removed on exit. Running the
# script twice yields no diff. The generated header records the protoc
# version, so use the pinned one below to keep diffs clean.
set -euo pipefail

PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2
PROTOC_VERSION=3.21.12

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

if ! command -v protoc >/dev/null 2>&1; then
	echo "genproto: protoc not found; install it (Debian: apt-get install -y protobuf-compiler)" >&2
	exit 1
fi
have="$(protoc --version | awk '{print $2}')"
if [[ "$have" != "$PROTOC_VERSION" ]]; then
	echo "genproto: warning: protoc $have, pinned $PROTOC_VERSION; generated headers will differ" >&2
fi

# Well-known types (google/protobuf/*.proto) ship beside protoc.
include="${PROTOC_INCLUDE:-$(dirname "$(command -v protoc)")/../include}"
if [[ ! -f "$include/google/protobuf/duration.proto" ]]; then
	echo "genproto: well-known types not found under $include; set PROTOC_INCLUDE" >&2
	exit 1
fi

# plugin_ok NAME VERSION reports whether NAME on PATH is VERSION; the two
# plugins print their versions with and without the leading v.
plugin_ok() {
	command -v "$1" >/dev/null 2>&1 || return 1
	local v
	v="$("$1" --version 2>/dev/null | awk '{print $2}')"
	[[ "${v#v}" == "${2#v}" ]]
}

if ! plugin_ok protoc-gen-go "$PROTOC_GEN_GO_VERSION" || ! plugin_ok protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION"; then
	gobin="$(mktemp -d)"
	trap 'rm -rf "$gobin"' EXIT
	GOBIN="$gobin" go install "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO_VERSION"
	GOBIN="$gobin" go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC_VERSION"
	export PATH="$gobin:$PATH"
fi

protos=()
while IFS= read -r f; do protos+=("$f"); done < <(find api -name '*.proto' | LC_ALL=C sort)

protoc \
	-I api \
	-I "$include" \
	--go_out=api --go_opt=paths=source_relative \
	--go-grpc_out=api --go-grpc_opt=paths=source_relative \
	"${protos[@]#api/}"
