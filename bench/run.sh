#!/usr/bin/env bash
# run.sh: build the proxy, the bare relay and the bench server, time 2,000
# sequential tools/call round trips through each chain side by side, and print
# p50/p99 with the ratios proxy/relay and proxy/direct.
#
# Usage: bench/run.sh [extra test binary flags, e.g. -test.cpu 1...]
# Environment: COUNT (default 5), BENCHTIME (default 2000x),
#              MCP_IDEMPOTENT_BENCH_PROXY_FLAGS (flags put before the proxy's --),
#              MCP_IDEMPOTENT_BENCH_WINDOW=N (also log each chain's p50 of
#              every N calls in turn: a new process's first calls apart),
#              PIN=CPUS (run every process on those processors, taskset's
#              list, with GOMAXPROCS as given or the processors online;
#              see bench/README.md).
set -euo pipefail

cd "$(dirname "$0")/.."
count=${COUNT:-5}
benchtime=${BENCHTIME:-2000x}

pin=()
if [[ -n ${PIN:-} ]]; then
	command -v taskset >/dev/null || { echo "run.sh: PIN needs taskset (util-linux)" >&2; exit 2; }
	taskset -c "$PIN" true || { echo "run.sh: PIN=$PIN: taskset cannot run on those processors" >&2; exit 2; }
	# Go sizes its processors by the CPUs a process may use: on one, a
	# read blocked in the kernel holds the only one.
	pin=(taskset -c "$PIN" env GOMAXPROCS="${GOMAXPROCS:-$(getconf _NPROCESSORS_ONLN)}")
fi

bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT

go build -o "$bin/benchserver" ./bench/benchserver
go build -o "$bin/relay" ./bench/relay
if ! go build -o "$bin/mcp-idempotent" ./cmd/mcp-idempotent; then
	echo "run.sh: the proxy does not build; only direct and relay will be measured" >&2
fi

# What a page fault costs here, which the proxy's process takes more of
# than the relay's: on a virtual machine that has just booted, several
# times what it costs once the machine has run a while (bench/firsttouch).
if go build -o "$bin/firsttouch" ./bench/firsttouch; then
	echo "page faults here: $("$bin/firsttouch" | paste -sd ';' | sed 's/;/; /g')"
fi

# One process per round, each round running every chain once, so that the
# chains are measured side by side: a load spike on this machine lands on one
# round of all chains rather than on every run of one chain.
go test -c -o "$bin/bench.test" ./bench
out=$bin/bench.txt
: >"$out"
for ((round = 1; round <= count; round++)); do
	echo "== round $round/$count (load: $(cut -d' ' -f1-3 /proc/loadavg))"
	(cd bench && MCP_IDEMPOTENT_BENCH_BIN=$bin ${pin[@]+"${pin[@]}"} "$bin/bench.test" -test.run '^$' \
		-test.bench '^BenchmarkCall$' -test.benchtime "$benchtime" -test.count 1 \
		-test.timeout 30m "$@") | tee -a "$out"
done

echo
echo "median over $count rounds (-benchtime $benchtime each); $(nproc) CPUs; cpu = CPU time of the whole chain per call;"
echo "faults = minor page faults of the chain's first process per timed call"
awk -v pin="${PIN:-}" '
function median(list,    a, n, i, j, t) {
	n = split(list, a, " ")
	for (i = 2; i <= n; i++) {          # insertion sort, any awk
		t = a[i] + 0
		for (j = i - 1; j >= 1 && a[j] + 0 > t; j--) a[j + 1] = a[j]
		a[j + 1] = t
	}
	if (n == 0) return ""
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function ratio(x, y) { return (x == "" || y == "" || y == 0) ? "n/a" : sprintf("%.2f", x / y) }
function us(x) { return x == "" ? "n/a" : sprintf("%.1f", x / 1000) }
/^BenchmarkCall\// {
	name = $1
	sub(/^BenchmarkCall\//, "", name)
	sub(/-[0-9]+$/, "", name)
	runs[name]++
	for (i = 3; i < NF; i += 2) vals[name, $(i + 1)] = vals[name, $(i + 1)] " " $i
}
END {
	n = split("direct relay proxy proxy-replay", order, " ")
	printf "%-14s %10s %10s %10s %10s %10s %6s\n", "chain", "p50 us", "p99 us", "cpu us", "faults", "upstream", "runs"
	for (k = 1; k <= n; k++) {
		c = order[k]
		p50[c] = median(vals[c, "p50-ns"]); p99[c] = median(vals[c, "p99-ns"])
		up = median(vals[c, "upstream-calls/op"])
		f = median(vals[c, "faults/op"])
		printf "%-14s %10s %10s %10s %10s %10s %6d\n", c, us(p50[c]), us(p99[c]), us(median(vals[c, "cpu-ns/op"])),
			f == "" ? "n/a" : sprintf("%.2f", f), up == "" ? "n/a" : sprintf("%.2f", up), runs[c]
	}
	print ""
	printf "%-20s %6s %6s\n", "ratio", "p50", "p99"
	printf "%-20s %6s %6s\n", "proxy/relay", ratio(p50["proxy"], p50["relay"]), ratio(p99["proxy"], p99["relay"])
	printf "%-20s %6s %6s\n", "proxy/direct", ratio(p50["proxy"], p50["direct"]), ratio(p99["proxy"], p99["direct"])
	printf "%-20s %6s %6s\n", "proxy-replay/relay", ratio(p50["proxy-replay"], p50["relay"]), ratio(p99["proxy-replay"], p99["relay"])
	printf "%-20s %6s %6s\n", "relay/direct", ratio(p50["relay"], p50["direct"]), ratio(p99["relay"], p99["direct"])
	# The ratio of each round: where the three processes of a chain fall
	# on the processors moves the p50 of a round, so the spread says how
	# far to trust the median.
	np = split(vals["proxy", "p50-ns"], pr, " ")
	if (np > 0 && np == split(vals["relay", "p50-ns"], rr, " ")) {
		line = ""
		for (i = 1; i <= np; i++) line = line " " ratio(pr[i], rr[i])
		printf "p50 proxy/relay by round:%s\n", line
	}
	if (pin != "") {
		printf "\npinned to processors %s: the goal is judged unpinned\n", pin
	} else if (p50["proxy"] != "" && p50["relay"] != "") {
		r = p50["proxy"] / p50["relay"]
		printf "\ngoal p50 proxy/relay <= 1.10: %s (%.2f)\n", r <= 1.10 ? "met" : "NOT met", r
	}
}' "$out"

if command -v benchstat >/dev/null 2>&1; then
	echo
	benchstat "$out"
fi
