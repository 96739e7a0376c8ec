#!/usr/bin/env bash
# segments.sh: where a sequential call's time goes through the bare relay
# and through the proxy, from each process's system calls (perf's syscall
# tracepoints): its own work from reading a message to writing it on (in,
# out), and how soon it wakes for the upstream's answer and the client's
# next request (bench/segments).
#
# Usage: bench/segments.sh
# Environment: BENCHTIME (calls per chain, default 3000x),
# MCP_IDEMPOTENT_BENCH_PROXY_FLAGS (flags put before the proxy's --).
# Needs perf, allowed to read tracepoints (as root, or with
# kernel.perf_event_paranoid at -1).
set -euo pipefail
cd "$(dirname "$0")/.."
benchtime=${BENCHTIME:-3000x}
command -v perf >/dev/null || { echo "segments.sh: perf is not installed (apt install linux-perf)" >&2; exit 2; }
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
mkdir "$bin/real" "$bin/wrap"
go build -o "$bin/wrap/benchserver" ./bench/benchserver
go build -o "$bin/real/relay" ./bench/relay
go build -o "$bin/real/mcp-idempotent" ./cmd/mcp-idempotent
go build -o "$bin/segments" ./bench/segments
go test -c -o "$bin/bench.test" ./bench
# Each chain's middle process runs under perf record; the benchmark finds
# the wrappers by their names.
events=syscalls:sys_enter_read,syscalls:sys_exit_read,syscalls:sys_enter_write
for b in relay mcp-idempotent; do
	printf '#!/bin/sh\nexec perf record -q -e %s -o %s %s "$@"\n' "$events" "$bin/$b.data" "$bin/real/$b" >"$bin/wrap/$b"
	chmod +x "$bin/wrap/$b"
done
(cd bench && MCP_IDEMPOTENT_BENCH_BIN=$bin/wrap "$bin/bench.test" -test.run '^$' \
	-test.bench 'BenchmarkCall/(relay|proxy)$' -test.benchtime "$benchtime") | grep '^BenchmarkCall' |
	awk '{ for (i = 3; i < NF; i++) if ($(i + 1) == "p50-ns") printf "%s p50 %.1f us\n", $1, $i / 1000 }'
for b in relay mcp-idempotent; do
	echo "== $b"
	perf script -i "$bin/$b.data" 2>/dev/null | "$bin/segments" -comm "$b"
done
