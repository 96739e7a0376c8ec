#!/usr/bin/env bash
# segments.sh: where a sequential call's time goes through the bare relay
# and through the proxy, from the system calls of the whole machine
# (perf's syscall tracepoints): each middle process's own work from
# reading a message to writing it on (in, out), how soon it wakes for the
# upstream's answer and the client's next request, and the calls by where
# the client, the middle process and the server ran (bench/segments).
#
# Usage: bench/segments.sh
# Environment: BENCHTIME (calls per chain, default 3000x),
# MCP_IDEMPOTENT_BENCH_PROXY_FLAGS (flags put before the proxy's --).
# Needs perf, allowed to trace the whole machine (as root, or with
# kernel.perf_event_paranoid at -1).
set -euo pipefail
cd "$(dirname "$0")/.."
benchtime=${BENCHTIME:-3000x}
command -v perf >/dev/null || { echo "segments.sh: perf is not installed (apt install linux-perf)" >&2; exit 2; }
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/benchserver" ./bench/benchserver
go build -o "$bin/relay" ./bench/relay
go build -o "$bin/mcp-idempotent" ./cmd/mcp-idempotent
go build -o "$bin/segments" ./bench/segments
go test -c -o "$bin/bench.test" ./bench
# One chain at a time, each under a trace of every processor: where the
# benchmark's client and the server ran is part of the answer.
events=syscalls:sys_enter_read,syscalls:sys_exit_read,syscalls:sys_enter_write
for chain in relay:relay proxy:mcp-idempotent; do
	name=${chain%%:*} comm=${chain#*:}
	(cd bench && MCP_IDEMPOTENT_BENCH_BIN=$bin perf record -q -a -e "$events" -o "$bin/$name.data" -- \
		"$bin/bench.test" -test.run '^$' -test.bench "^BenchmarkCall/$name\$" -test.benchtime "$benchtime") |
		awk '/^BenchmarkCall/ { for (i = 3; i < NF; i++) if ($(i + 1) == "p50-ns") printf "%s p50 %.1f us\n", $1, $i / 1000 }'
	echo "== $comm"
	# perf's own warnings pass: events lost or out of order drop calls.
	perf script --ns -i "$bin/$name.data" | "$bin/segments" -comm "$comm" -client bench.test -server benchserver
done
