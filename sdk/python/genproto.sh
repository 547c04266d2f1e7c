#!/usr/bin/env bash
# Regenerates the Python code for the gRPC contract (api/harbinger/v1/*.proto)
# into src/harbinger/v1/.
#
# Usage, from anywhere in the repository:
#
#     sdk/python/genproto.sh
#
# Needs protoc and the gRPC Python plugin (Debian: apt-get install -y
# protobuf-compiler protobuf-compiler-grpc). The code protoc writes must
# match the protobuf runtime it runs on: protoc 3.21.x writes code for the
# 4.21.x Python runtime (Debian 12's python3-protobuf), which is what
# pyproject.toml requires. Running the script twice yields no diff.
set -euo pipefail

PROTOC_VERSION=3.21.12

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$here/src"

for tool in protoc grpc_python_plugin; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		echo "genproto: $tool not found; install it (Debian: apt-get install -y protobuf-compiler protobuf-compiler-grpc)" >&2
		exit 1
	fi
done
have="$(protoc --version | awk '{print $2}')"
if [[ "$have" != "$PROTOC_VERSION" ]]; then
	echo "genproto: protoc $have, pinned $PROTOC_VERSION: the code would not match the protobuf runtime pyproject.toml requires" >&2
	exit 1
fi
include="${PROTOC_INCLUDE:-$(dirname "$(command -v protoc)")/../include}"

cd "$root/api"
protos=()
while IFS= read -r f; do protos+=("$f"); done < <(find harbinger -name '*.proto' | LC_ALL=C sort)
protoc -I . -I "$include" \
	--python_out="$out" --pyi_out="$out" \
	--grpc_python_out="$out" --plugin=protoc-gen-grpc_python="$(command -v grpc_python_plugin)" \
	"${protos[@]}"
