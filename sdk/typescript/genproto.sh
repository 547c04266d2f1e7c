#!/usr/bin/env bash
# Regenerates the TypeScript code for the gRPC contract
# (api/harbinger/v1/*.proto) into src/gen/, with protoc-gen-es at the
# version package-lock.json pins.
#
# Usage, from anywhere in the repository, after `npm ci` in sdk/typescript:
#
#     sdk/typescript/genproto.sh
#
# Needs protoc (Debian: apt-get install -y protobuf-compiler). Running the
# script twice yields no diff.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
plugin="$here/node_modules/.bin/protoc-gen-es"
if [[ ! -x "$plugin" ]]; then
	echo "genproto: $plugin not found; run npm ci in sdk/typescript first" >&2
	exit 1
fi
if ! command -v protoc >/dev/null 2>&1; then
	echo "genproto: protoc not found; install it (Debian: apt-get install -y protobuf-compiler)" >&2
	exit 1
fi
include="${PROTOC_INCLUDE:-$(dirname "$(command -v protoc)")/../include}"

cd "$root/api"
protos=()
while IFS= read -r f; do protos+=("$f"); done < <(find harbinger -name '*.proto' | LC_ALL=C sort)
rm -rf "$here/src/gen"
mkdir -p "$here/src/gen"
protoc -I . -I "$include" \
	--plugin=protoc-gen-es="$plugin" \
	--es_out="$here/src/gen" --es_opt=target=ts,import_extension=js \
	"${protos[@]}"
