#!/usr/bin/env bash
# storecpu.sh: the CPU time one new execution costs at 32 in flight, in the
# client (the benchmark's process) and in the server, in this tree and in
# another (TREE), runs of the two alternating.
#
# At 32 in flight the stores are bound by CPU, the client's and the
# server's on one machine, and CPU time per execution moves far less with
# a shared machine's load than executions per second do. It runs each
# store's BenchmarkReserveComplete at 32 in flight for N executions and
# takes the CPU time of the process (/usr/bin/time) and, for the servers:
#   postgres  the CPU of the backends that served it, which exit with its
#             connections and are counted in the postmaster's children's
#             time (/proc/PID/stat), so the server must run on this host;
#   redis     the server's own count (INFO cpu).
# Anything else using the server meanwhile is counted too: compare the
# medians. SQLite runs in the client's process.
#
# Usage: TREE=/path/to/other/checkout bench/storecpu.sh [sqlite] [redis] [postgres]
# Environment: ROUNDS (default 5), N (executions a run, default 6000);
# MCPI_REDIS_URL and MCPI_POSTGRES_URL, as for the tests.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
base=${TREE:?"storecpu.sh: set TREE to the checkout to compare with (git worktree add /tmp/base COMMIT)"}
rounds=${ROUNDS:-5}
n=${N:-6000}
stores=("$@")
if ((${#stores[@]} == 0)); then
	stores=(sqlite redis postgres)
fi
[[ -x /usr/bin/time ]] || { echo "storecpu.sh: needs /usr/bin/time (apt install time)" >&2; exit 2; }
tick=$(getconf CLK_TCK)

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
script=storecpu.sh
. "$here/bench/storelib.sh"
buildStores

# serverCPU prints the server's CPU time so far, in microseconds.
serverCPU() {
	case $1 in
	postgres)
		local pm
		pm=$(pgrep -o -x postgres) || { echo "storecpu.sh: no postgres process on this host" >&2; exit 2; }
		awk -v t="$tick" '{ printf "%.0f\n", ($16 + $17) * 1e6 / t }' "/proc/$pm/stat"
		;;
	redis)
		redis-cli -u "${MCPI_REDIS_URL:?}" INFO cpu | tr -d '\r' |
			awk -F: '$1 == "used_cpu_sys" || $1 == "used_cpu_user" { s += $2 } END { printf "%.0f\n", s * 1e6 }'
		;;
	*) echo 0 ;;
	esac
}

# run prints "store build client-us server-us" per execution for one run.
run() {
	local store=$1 build=$2 bench s0 s1
	case $store in
	postgres) bench='^BenchmarkReserveCompleteParallel$' ;;
	*) bench='^BenchmarkReserveComplete$/^parallel32$' ;;
	esac
	s0=$(serverCPU "$store")
	MCPI_REQUIRE_SERVICES=1 /usr/bin/time -f '%U %S' -o "$dir/time" "$dir/$store.$build" -test.run '^$' \
		-test.bench "$bench" -test.benchtime "${n}x" >"$dir/out" 2>&1 || { cat "$dir/out" >&2; exit 1; }
	sleep 0.5 # for the postmaster to reap the backends
	s1=$(serverCPU "$store")
	awk -v s="$store" -v b="$build" -v n="$n" -v s0="$s0" -v s1="$s1" \
		'{ printf "%s %s %.0f %.0f\n", s, b, ($1 + $2) * 1e6 / n, (s1 - s0) / n }' "$dir/time"
}

for ((r = 1; r <= rounds; r++)); do
	for store in "${stores[@]}"; do
		run "$store" base
		run "$store" this
	done
done >"$dir/results"

echo "CPU us per new execution at 32 in flight, medians of $rounds alternating runs of $n"
echo "base: $base"
echo "this: $here"
printf '%-9s %12s %12s %12s %12s\n' store "client base" "client this" "server base" "server this"
for store in "${stores[@]}"; do
	col() { awk -v s="$store" -v b="$1" -v c="$2" '$1 == s && $2 == b { print $c }' "$dir/results" | median; }
	printf '%-9s %12.0f %12.0f %12.0f %12.0f\n' "$store" "$(col base 3)" "$(col this 3)" "$(col base 4)" "$(col this 4)"
done
