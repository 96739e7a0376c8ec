#!/usr/bin/env bash
# inflight.sh: build the proxy, the bare relay and the bench server, keep 32
# distinct tools/calls in flight through each chain in turns, and print the
# calls per second of each with the ratio proxy/relay.
#
# Usage: bench/inflight.sh
# Environment: COUNT (rounds, default 5), BENCHTIME (calls per chain and
# round, default 4000x), MCP_IDEMPOTENT_BENCH_INFLIGHT (default 32),
# MCP_IDEMPOTENT_BENCH_BLOCK (calls per turn, default 500),
# MCP_IDEMPOTENT_BENCH_PROXY_FLAGS (flags put before the proxy's --, such as
# --store), MCP_IDEMPOTENT_BENCH_BASELINE (another build of the proxy, run
# as a chain of its own with the same flags, and compared).
set -euo pipefail

cd "$(dirname "$0")/.."
count=${COUNT:-5}
benchtime=${BENCHTIME:-4000x}

bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/benchserver" ./bench/benchserver
go build -o "$bin/relay" ./bench/relay
go build -o "$bin/mcp-idempotent" ./cmd/mcp-idempotent
go test -c -o "$bin/bench.test" ./bench

out=$bin/bench.txt
for ((round = 1; round <= count; round++)); do
	echo "== round $round/$count (load: $(cut -d' ' -f1-3 /proc/loadavg))"
	(cd bench && MCP_IDEMPOTENT_BENCH_BIN=$bin "$bin/bench.test" -test.run '^$' \
		-test.bench '^BenchmarkInFlight$' -test.benchtime "$benchtime" -test.count 1 \
		-test.timeout 30m) | tee -a "$out"
done

echo
echo "median over $count rounds (-benchtime $benchtime each); $(nproc) CPUs; ${MCP_IDEMPOTENT_BENCH_INFLIGHT:-32} calls in flight"
awk '
function median(list,    a, n, i, j, t) {
	n = split(list, a, " ")
	for (i = 2; i <= n; i++) {
		t = a[i] + 0
		for (j = i - 1; j >= 1 && a[j] + 0 > t; j--) a[j + 1] = a[j]
		a[j + 1] = t
	}
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
/^BenchmarkInFlight/ {
	split("", round)
	for (i = 3; i < NF; i += 2) if ($(i + 1) ~ /-calls\/s$/) {
		name = $(i + 1)
		sub(/-calls\/s$/, "", name)
		vals[name] = vals[name] " " $i
		# The ratio of each round, so that a load swing between rounds
		# does not skew it.
		round[name] = $i
	}
	if (round["relay"] > 0 && round["proxy"] > 0) ratios = ratios " " round["proxy"] / round["relay"]
	if (round["baseline"] > 0 && round["proxy"] > 0) gains = gains " " round["proxy"] / round["baseline"]
}
END {
	printf "%-10s %10s\n", "chain", "calls/s"
	n = split("direct relay proxy baseline", order, " ")
	for (k = 1; k <= n; k++) if (order[k] in vals) printf "%-10s %10.0f\n", order[k], median(vals[order[k]])
	if (ratios != "") {
		r = median(ratios)
		printf "\nproxy/relay, median of the rounds: %.2f (goal >= 0.90: %s)\n", r, r >= 0.9 ? "met" : "NOT met"
		n = split(ratios, each, " ")
		printf "proxy/relay by round:"
		for (i = 1; i <= n; i++) printf " %.2f", each[i]
		print ""
	}
	if (gains != "") printf "proxy/baseline, median of the rounds: %.2f\n", median(gains)
}' "$out"
