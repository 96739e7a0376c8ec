#!/usr/bin/env bash
# Builds the npm packages of mcp-idempotent, ready to publish: the
# launcher (mcp-idempotent) and one package per platform holding its
# binary (@mcp-idempotent/<os>-<cpu>), each packed as a .tgz.
#
#   npm/build.sh [-o DIR] VERSION [PLATFORM...]
#
# PLATFORM is linux-x64, linux-arm64, darwin-x64, darwin-arm64 or
# win32-x64; all five by default. The launcher names all five as optional
# dependencies whichever are built. DIR defaults to npm/dist.
#
# The binaries are built with -trimpath unless GOFLAGS is set (even to
# nothing), as a test that wants Go's build cache sets it.
set -euo pipefail
export GOFLAGS=${GOFLAGS--trimpath}

usage() {
  echo "usage: npm/build.sh [-o DIR] VERSION [PLATFORM...]" >&2
  exit 2
}

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
out=$here/dist
while getopts o: flag; do
  case $flag in
  o) out=$OPTARG ;;
  *) usage ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || usage
version=$1
shift
if ! [[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]]; then
  echo "npm/build.sh: VERSION $version is not a semantic version (such as 1.2.3 or 1.2.3-rc.1)" >&2
  exit 2
fi

all=(linux-x64 linux-arm64 darwin-x64 darwin-arm64 win32-x64)
platforms=("$@")
[ ${#platforms[@]} -gt 0 ] || platforms=("${all[@]}")
# Every PLATFORM is checked before any is built: a typo in the last one
# must not cost the builds of the others, nor leave them half made.
# A PLATFORM is one of them exactly, not two in one quoted argument.
for p in "${platforms[@]}"; do
  known=
  for a in "${all[@]}"; do
    [ "$p" != "$a" ] || known=1
  done
  if [ -z "$known" ]; then
    echo "npm/build.sh: unknown PLATFORM $p; want one of ${all[*]}" >&2
    exit 2
  fi
done

# goarch maps an npm cpu to a GOARCH.
goarch() {
  case $1 in
  x64) echo amd64 ;;
  arm64) echo arm64 ;;
  esac
}

mkdir -p "$out"
out=$(cd "$out" && pwd)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
repo='"repository": {"type": "git", "url": "git+https://github.com/mcp-idempotent/mcp-idempotent.git"}'

for p in "${platforms[@]}"; do
  os=${p%-*}
  cpu=${p#*-}
  goos=$os
  exe=mcp-idempotent
  if [ "$os" = win32 ]; then
    goos=windows
    exe=mcp-idempotent.exe
  fi
  dir=$stage/$p
  mkdir -p "$dir/bin"
  echo "building $p"
  (cd "$root" && CGO_ENABLED=0 GOOS=$goos GOARCH=$(goarch "$cpu") go build \
    -ldflags "-s -w -X github.com/mcp-idempotent/mcp-idempotent/internal/cli.Version=$version" \
    -o "$dir/bin/$exe" ./cmd/mcp-idempotent)
  cat >"$dir/package.json" <<JSON
{
  "name": "@mcp-idempotent/$p",
  "version": "$version",
  "description": "The mcp-idempotent binary for $os $cpu. Install mcp-idempotent, which picks the one for its platform.",
  $repo,
  "os": ["$os"],
  "cpu": ["$cpu"],
  "files": ["bin/"],
  "preferUnplugged": true
}
JSON
  printf '# @mcp-idempotent/%s\n\nThe `mcp-idempotent` binary for %s %s. Install [mcp-idempotent](https://www.npmjs.com/package/mcp-idempotent) instead: it picks this package on this platform.\n' \
    "$p" "$os" "$cpu" >"$dir/README.md"
  (cd "$dir" && npm pack --silent --pack-destination "$out" >/dev/null)
done

echo "packing the launcher"
dir=$stage/mcp-idempotent
mkdir -p "$dir"
cp -R "$here/mcp-idempotent/." "$dir/"
optional=""
for p in "${all[@]}"; do
  optional+="${optional:+,
}    \"@mcp-idempotent/$p\": \"$version\""
done
cat >"$dir/package.json" <<JSON
{
  "name": "mcp-idempotent",
  "version": "$version",
  "description": "A proxy in front of any MCP server that makes retried tool calls safe: a retried charge_card charges the card once.",
  "keywords": ["mcp", "model-context-protocol", "idempotency", "proxy"],
  $repo,
  "bin": {"mcp-idempotent": "bin/mcp-idempotent.js"},
  "files": ["bin/"],
  "engines": {"node": ">=18"},
  "optionalDependencies": {
$optional
  }
}
JSON
(cd "$dir" && npm pack --silent --pack-destination "$out" >/dev/null)
ls -1 "$out"/*.tgz
