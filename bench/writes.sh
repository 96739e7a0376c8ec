#!/usr/bin/env bash
# writes.sh: what each durable store makes durable for a new execution,
# before its answer and after, and for a replay, one call at a time,
# against the goals: two synced commits or round trips before the answer,
# and a replay that reads only.
#
# It runs each store's BenchmarkSteps (answer: the reservation with its
# dispatch, then completed; execution: those and delivered; replay):
#   sqlite    fsync calls of the process, with every commit synced
#             (sync=full), counted by perf around runs of two lengths, so
#             that opening the file counts for nothing;
#   postgres  WAL syncs and bytes of the server (pg_stat_wal);
#   redis     round trips, and keys left under the store's prefix.
# delivered's figure is execution's less answer's.
#
# Usage: bench/writes.sh [sqlite] [redis] [postgres]
# Environment: MCPI_REDIS_URL and MCPI_POSTGRES_URL, as for the tests; N
# (executions a run, default 300). The SQLite rows need perf, allowed to
# read tracepoints (as root, or with kernel.perf_event_paranoid at -1).
# PostgreSQL's count every process's WAL: run it on a quiet server.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
n=${N:-300}
stores=("$@")
if ((${#stores[@]} == 0)); then
	stores=(sqlite postgres redis)
fi

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

for store in "${stores[@]}"; do
	case $store in
	sqlite | redis) pkg=./internal/record/${store}store ;;
	postgres) pkg=./internal/record/pgstore ;;
	*) echo "writes.sh: unknown store $store (sqlite, redis, postgres)" >&2; exit 2 ;;
	esac
	(cd "$here" && go test -c -o "$dir/$store.test" "$pkg")
done

# bench runs STORE's BenchmarkSteps/STEP for N executions, its output in
# $dir/STORE.STEP.
bench() {
	local store=$1 step=$2 out=$dir/$1.$2
	MCPI_REQUIRE_SERVICES=1 "$dir/$store.test" -test.run '^$' -test.bench "^BenchmarkSteps\$/^$step\$" \
		-test.benchtime "${n}x" >"$out" 2>&1 ||
		{ cat "$out" >&2; echo "writes.sh: the $store store's BenchmarkSteps/$step failed" >&2; exit 1; }
}

# metric prints the value of UNIT in the output of STORE's STEP.
metric() {
	local store=$1 step=$2 unit=$3
	awk -v u="$unit" '/^BenchmarkSteps/ { for (i = 3; i < NF; i++) if ($(i + 1) == u) print $i }' "$dir/$store.$step"
}

# fsyncs prints the fsync and fdatasync calls of a run of the SQLite
# store's STEP for COUNT executions.
fsyncs() {
	local step=$1 count=$2
	perf stat -x, -e syscalls:sys_enter_fsync,syscalls:sys_enter_fdatasync -o "$dir/perf" \
		"$dir/sqlite.test" -test.run '^$' -test.bench "^BenchmarkSteps\$/^$step\$" -test.benchtime "${count}x" >"$dir/out" ||
		{ cat "$dir/out" >&2; echo "writes.sh: the SQLite store's BenchmarkSteps/$step failed" >&2; exit 1; }
	awk -F, '/syscalls:/ { n += $1 } END { print n + 0 }' "$dir/perf"
}

# row prints one line of the table: store, what, the figure, its goal
# and, if LIMIT is given, whether the figure is under it.
row() {
	local store=$1 what=$2 figure=$3 goal=$4 limit=${5:-}
	awk -v s="$store" -v w="$what" -v f="$figure" -v g="$goal" -v l="$limit" 'BEGIN {
		verdict = l == "" ? "-" : (f == "n/a" ? "?" : (f + 0 < l + 0 ? "met" : "NOT met"))
		printf "%-9s %-36s %9s  %-16s %s\n", s, w, f == "n/a" ? f : sprintf("%.2f", f), g, verdict
	}'
}

printf '%-9s %-36s %9s  %-16s %s\n' store "what, one call at a time" measured "goal (issue 20)" ""
for store in "${stores[@]}"; do
	case $store in
	sqlite)
		if ! command -v perf >/dev/null || ! perf stat -e syscalls:sys_enter_fsync true >/dev/null 2>&1; then
			echo "writes.sh: perf cannot count system calls here; the SQLite rows need it" >&2
			for what in "fsyncs before the answer" "fsyncs for delivered, after it" "fsyncs a replay"; do
				row sqlite "$what" n/a "-"
			done
			continue
		fi
		declare -A per
		for step in answer execution replay; do
			a=$(fsyncs "$step" "$n")
			b=$(fsyncs "$step" $((3 * n)))
			per[$step]=$(awk -v a="$a" -v b="$b" -v n="$n" 'BEGIN { print (b - a) / (2 * n) }')
		done
		row sqlite "fsyncs before the answer" "${per[answer]}" 2 2.5
		row sqlite "fsyncs for delivered, after it" "$(awk -v e="${per[execution]}" -v a="${per[answer]}" 'BEGIN { print e - a }')" "off the path"
		row sqlite "fsyncs a replay" "${per[replay]}" "0: reads only" 0.1
		;;
	postgres)
		for step in answer execution replay; do bench postgres "$step"; done
		answer=$(metric postgres answer wal-syncs/op)
		execution=$(metric postgres execution wal-syncs/op)
		row postgres "WAL syncs before the answer" "$answer" 2 2.5
		row postgres "WAL syncs for delivered, after it" "$(awk -v e="$execution" -v a="$answer" 'BEGIN { print e - a }')" "off the path"
		row postgres "WAL syncs a replay" "$(metric postgres replay wal-syncs/op)" "0: reads only" 0.1
		row postgres "WAL bytes a replay" "$(metric postgres replay wal-B/op)" "-"
		;;
	redis)
		for step in answer execution replay; do bench redis "$step"; done
		answer=$(metric redis answer round-trips/op)
		execution=$(metric redis execution round-trips/op)
		row redis "round trips before the answer" "$answer" 2 2.5
		row redis "round trips for delivered, after it" "$(awk -v e="$execution" -v a="$answer" 'BEGIN { print e - a }')" "off the path"
		row redis "round trips a replay" "$(metric redis replay round-trips/op)" "1: a read"
		row redis "keys left a replay" "$(metric redis replay keys/op)" 0 0.001
		;;
	esac
done
echo "(N=$n executions a run; sqlite: fsyncs of runs of $n and $((3 * n)), sync=full;"
echo " postgres: pg_stat_wal, attach counts written in batches; redis: round trips from the client)"
