#!/usr/bin/env bash
# process.sh: what the proxy's process and the relay's cost per call in a
# running chain, counted by perf stat around each: CPU time, context
# switches, page faults and the system calls that matter here.
#
# Each of the two binaries is started through a wrapper that runs it under
# perf stat, so the chain has no extra hop. perf stat follows children,
# so each figure holds the benchserver the binary starts as well: the same
# server, doing the same work, in both chains, so the difference between
# the two rows is the proxy's own.
#
# Usage: bench/process.sh [call|inflight]
#   call      one call at a time (BenchmarkCall; the default)
#   inflight  32 calls in flight (BenchmarkInFlight)
# Environment: N (calls per chain, default 20000). A process's start-up
# (about 1,400 page faults for the proxy) is counted with its calls: keep N
# large.
# Needs perf (apt install linux-perf) and the syscalls tracepoints.
set -euo pipefail

cd "$(dirname "$0")/.."
mode=${1:-call}
n=${N:-20000}
case $mode in
call) bench='^BenchmarkCall$/^(relay|proxy)$' ;;
inflight) bench='^BenchmarkInFlight$' ;;
*) echo "process.sh: unknown mode $mode (call or inflight)" >&2; exit 2 ;;
esac
command -v perf >/dev/null || { echo "process.sh: perf is not installed (apt install linux-perf)" >&2; exit 2; }

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir "$dir/real" "$dir/bin" "$dir/stat"
go build -o "$dir/real/benchserver" ./bench/benchserver
go build -o "$dir/real/relay" ./bench/relay
go build -o "$dir/real/mcp-idempotent" ./cmd/mcp-idempotent
go test -c -o "$dir/bench.test" ./bench
cp "$dir/real/benchserver" "$dir/bin/"

events=task-clock,context-switches,page-faults
for s in read write futex nanosleep epoll_pwait; do
	events+=,syscalls:sys_enter_$s
done
perf stat -e "$events" -o /dev/null true 2>/dev/null ||
	{ echo "process.sh: perf stat cannot count $events here" >&2; exit 2; }
for b in relay mcp-idempotent; do
	printf '#!/bin/sh\nexec perf stat -x, -e %s -o %s/stat/%s.$$ %s/real/%s "$@"\n' \
		"$events" "$dir" "$b" "$dir" "$b" >"$dir/bin/$b"
	chmod +x "$dir/bin/$b"
done

(cd bench && MCP_IDEMPOTENT_BENCH_BIN=$dir/bin "$dir/bench.test" -test.run '^$' \
	-test.bench "$bench" -test.benchtime "${n}x" -test.count 1 -test.timeout 30m)

# A benchmark may start a chain more than once (a first run of one call);
# the run of N calls is the file with the most CPU time.
echo
echo "per call, $n calls a chain ($mode), each process with the benchserver it starts:"
printf '%-15s %9s %9s %9s %7s %7s %7s %9s %7s\n' process cpu-us switches faults reads writes futex nanosleep epoll
for b in relay mcp-idempotent; do
	file=$(for f in "$dir/stat/$b".*; do
		printf '%s %s\n' "$(awk -F, '$3 == "task-clock" {print $1}' "$f")" "$f"
	done | sort -g | tail -1 | cut -d' ' -f2)
	awk -F, -v b="$b" -v n="$n" '
		$3 == "task-clock" { v["cpu"] = $1 * 1000 / n }
		$3 ~ /^(context-switches|page-faults)$/ || $3 ~ /^syscalls:/ { v[$3] = $1 / n }
		END {
			printf "%-15s %9.1f %9.2f %9.2f %7.2f %7.2f %7.2f %9.2f %7.2f\n", b, v["cpu"],
				v["context-switches"], v["page-faults"], v["syscalls:sys_enter_read"],
				v["syscalls:sys_enter_write"], v["syscalls:sys_enter_futex"],
				v["syscalls:sys_enter_nanosleep"], v["syscalls:sys_enter_epoll_pwait"]
		}' "$file"
done
