#!/usr/bin/env bash
# stores.sh: new executions per second of each durable store, one at a
# time and 32 at once, in this tree and in another (TREE), side by side.
#
# It builds each store's tests in both trees and runs their
# BenchmarkReserveComplete (a reservation with its dispatch, then
# completed, then delivered) in interleaved rounds, so that both builds
# meet the same moments of a shared machine's load, and prints the
# medians and their ratio.
#
# Usage: TREE=/path/to/other/checkout bench/stores.sh [sqlite] [redis] [postgres]
# Environment: ROUNDS (default 5), BENCHTIME (default 1s); MCPI_REDIS_URL
# and MCPI_POSTGRES_URL for those stores, as for the tests.
# To compare with a commit: git worktree add /tmp/base COMMIT.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
base=${TREE:?"stores.sh: set TREE to the checkout to compare with (git worktree add /tmp/base COMMIT)"}
rounds=${ROUNDS:-5}
benchtime=${BENCHTIME:-1s}
stores=("$@")
if ((${#stores[@]} == 0)); then
	stores=(sqlite redis postgres)
fi

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

script=stores.sh
. "$here/bench/storelib.sh"
buildStores

# run prints "store build inflight ns/op" for each benchmark of one binary.
# The PostgreSQL store's older benchmarks name the 32 at once
# ReserveCompleteParallel; the others have serial and parallel32.
run() {
	local store=$1 build=$2
	MCPI_REQUIRE_SERVICES=1 "$dir/$store.$build" -test.run '^$' -test.bench '^BenchmarkReserveComplete' \
		-test.benchtime "$benchtime" | awk -v s="$store" -v b="$build" '
		/^BenchmarkReserveComplete/ {
			n = ($1 ~ /Parallel|parallel32/) ? 32 : 1
			print s, b, n, $3
		}'
}

for ((r = 1; r <= rounds; r++)); do
	for store in "${stores[@]}"; do
		run "$store" base | sed "s/^/$r /"
		run "$store" this | sed "s/^/$r /"
	done
done >"$dir/results"

# Each line of results: round store build inflight ns/op. The ratio is
# of the medians; the range is of each round's own ratio, base and this
# run back to back, which shows how far the machine's swings moved it.
# The goal is 5x at 32 in flight against 9674f06, the build it was set
# at: judged only when TREE is that build.
against=0
if [[ $(git -C "$base" rev-parse HEAD 2>/dev/null) == 9674f06* ]]; then
	against=1
fi

echo "new executions/s, medians of $rounds interleaved rounds ($benchtime each)"
echo "base: $base"
echo "this: $here"
printf '%-9s %9s %12s %12s %7s %15s  %s\n' store "in flight" base this ratio "rounds' ratios" "goal (issue 20)"
awk '{ print $2, $4 }' "$dir/results" | sort -u -k1,1 -k2,2n | while read -r store inflight; do
	b=$(awk -v s="$store" -v n="$inflight" '$2 == s && $3 == "base" && $4 == n { print $5 }' "$dir/results" | median)
	t=$(awk -v s="$store" -v n="$inflight" '$2 == s && $3 == "this" && $4 == n { print $5 }' "$dir/results" | median)
	spread=$(awk -v s="$store" -v n="$inflight" '
		$2 == s && $4 == n { ns[$1, $3] = $5; r[$1] = 1 }
		END {
			for (k in r) if ((k, "base") in ns && (k, "this") in ns) {
				x = ns[k, "base"] / ns[k, "this"]
				if (lo == "" || x < lo) lo = x
				if (hi == "" || x > hi) hi = x
			}
			printf "%.2f-%.2fx", lo, hi
		}' "$dir/results")
	awk -v s="$store" -v n="$inflight" -v b="$b" -v t="$t" -v spread="$spread" -v against="$against" '
		BEGIN {
			goal = "-"
			if (n == 32) goal = against ? sprintf("5x: %s", b / t >= 5 ? "met" : "NOT met") : "5x against 9674f06"
			printf "%-9s %9d %12.0f %12.0f %6.2fx %15s  %s\n", s, n, 1e9 / b, 1e9 / t, b / t, spread, goal
		}'
done
