#!/usr/bin/env bash
# writes.sh: what each durable store makes durable for a new execution,
# before its answer and after, and for a replay, one call at a time,
# against the goals: two synced commits or round trips before the answer,
# and a replay that reads only.
#
# It runs each store's BenchmarkSteps (answer: the reservation with its
# dispatch, then completed; execution: those and delivered; replay):
#   sqlite    fsync calls of the process, with every commit synced
#             (sync=full), counted by perf;
#   postgres  WAL syncs and bytes of the server (pg_stat_wal);
#   redis     round trips, and keys left under the store's prefix.
# SQLite's and PostgreSQL's figures are the difference of runs of N and
# 3N executions, so that what a run does once (opening the store,
# writing its replays' attach counts at its close) drops out.
# delivered's figure is execution's less answer's.
#
# Usage: bench/writes.sh [sqlite] [postgres] [redis]
# Environment: MCPI_REDIS_URL and MCPI_POSTGRES_URL, as for the tests; N
# (default 300). The SQLite rows need perf, allowed to read tracepoints
# (as root, or with kernel.perf_event_paranoid at -1). PostgreSQL's count
# every process's WAL: run it on a quiet server.
set -euo pipefail
shopt -s inherit_errexit # a failure in $(...) fails the script too

here=$(cd "$(dirname "$0")/.." && pwd)
n=${N:-300}
stores=("$@")
if ((${#stores[@]} == 0)); then
	stores=(sqlite postgres redis)
fi

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

script=writes.sh
. "$here/bench/storelib.sh"
for store in "${stores[@]}"; do
	pkg=$(storePackage "$store") || exit 2
	(cd "$here" && go test -c -o "$dir/$store.test" "$pkg")
done

# bench runs STORE's BenchmarkSteps/STEP for COUNT executions, its output
# in $dir/STORE.STEP.COUNT.
bench() {
	local store=$1 step=$2 count=$3 out=$dir/$1.$2.$3
	MCPI_REQUIRE_SERVICES=1 "$dir/$store.test" -test.run '^$' -test.bench "^BenchmarkSteps\$/^$step\$" \
		-test.benchtime "${count}x" >"$out" 2>&1 ||
		{ cat "$out" >&2; echo "writes.sh: the $store store's BenchmarkSteps/$step failed" >&2; exit 1; }
}

# metric prints the value of UNIT in the output of STORE's STEP run for
# COUNT executions, and fails if it has none.
metric() {
	local store=$1 step=$2 count=$3 unit=$4 out=$dir/$1.$2.$3
	awk -v u="$unit" '/^BenchmarkSteps/ { for (i = 3; i < NF; i++) if ($(i + 1) == u) { print $i; found = 1 } }
		END { exit !found }' "$out" ||
		{ cat "$out" >&2; echo "writes.sh: no $unit in the $store store's BenchmarkSteps/$step" >&2; exit 1; }
}

# perRun prints what UNIT of STORE's STEP comes to for one execution, from
# runs of N and 3N: what a run costs once (opening a store, closing it)
# drops out.
perRun() {
	local store=$1 step=$2 unit=$3 a b
	bench "$store" "$step" "$n"
	bench "$store" "$step" $((3 * n))
	a=$(metric "$store" "$step" "$n" "$unit")
	b=$(metric "$store" "$step" $((3 * n)) "$unit")
	awk -v a="$a" -v b="$b" -v n="$n" 'BEGIN { print (3 * n * b - n * a) / (2 * n) }'
}

# fsyncs prints the fsync and fdatasync calls of a run of the SQLite
# store's STEP for COUNT executions.
fsyncs() {
	local step=$1 count=$2
	perf stat -x, -e syscalls:sys_enter_fsync,syscalls:sys_enter_fdatasync -o "$dir/perf" \
		"$dir/sqlite.test" -test.run '^$' -test.bench "^BenchmarkSteps\$/^$step\$" -test.benchtime "${count}x" >"$dir/out" ||
		{ cat "$dir/out" >&2; echo "writes.sh: the SQLite store's BenchmarkSteps/$step failed" >&2; exit 1; }
	# A count perf could not make is a word (<not counted>), not a number.
	awk -F, '/syscalls:/ { if ($1 !~ /^[0-9]+$/) exit 1; n += $1; events++ } END { if (events != 2) exit 1; print n }' "$dir/perf" ||
		{ cat "$dir/perf" >&2; echo "writes.sh: perf did not count the fsync calls" >&2; exit 1; }
}

# row prints one line of the table: store, what, the figure, its goal
# and, if LO and HI are given, whether LO <= figure < HI. Two syncs
# before an answer are the goal; fewer would mean a step not made
# durable, or not counted.
row() {
	local store=$1 what=$2 figure=$3 goal=$4 lo=${5:-} hi=${6:-}
	awk -v s="$store" -v w="$what" -v f="$figure" -v g="$goal" -v lo="$lo" -v hi="$hi" 'BEGIN {
		verdict = hi == "" ? "-" : (f + 0 >= lo + 0 && f + 0 < hi + 0 ? "met" : "NOT met")
		printf "%-9s %-36s %9.2f  %-16s %s\n", s, w, f, g, verdict
	}'
}

# delivered prints execution's figure less answer's.
delivered() { awk -v e="$1" -v a="$2" 'BEGIN { print e - a }'; }

for store in "${stores[@]}"; do
	if [[ $store == sqlite ]] && ! perf stat -e syscalls:sys_enter_fsync true >/dev/null 2>&1; then
		echo "writes.sh: perf cannot count system calls here, which the SQLite rows need (apt install linux-perf, as root);" \
			"bench/writes.sh postgres redis leaves them out" >&2
		exit 2
	fi
done

printf '%-9s %-36s %9s  %-16s %s\n' store "what, one call at a time" measured "goal (issue 20)" ""
for store in "${stores[@]}"; do
	case $store in
	sqlite)
		declare -A per
		for step in answer execution replay; do
			a=$(fsyncs "$step" "$n")
			b=$(fsyncs "$step" $((3 * n)))
			per[$step]=$(awk -v a="$a" -v b="$b" -v n="$n" 'BEGIN { print (b - a) / (2 * n) }')
		done
		row sqlite "fsyncs before the answer" "${per[answer]}" 2 1.5 2.5
		row sqlite "fsyncs for delivered, after it" "$(delivered "${per[execution]}" "${per[answer]}")" "off the path"
		row sqlite "fsyncs a replay" "${per[replay]}" "0: reads only" 0 0.1
		;;
	postgres)
		answer=$(perRun postgres answer wal-syncs/op)
		execution=$(perRun postgres execution wal-syncs/op)
		replay=$(perRun postgres replay wal-syncs/op)
		row postgres "WAL syncs before the answer" "$answer" 2 1.5 2.5
		row postgres "WAL syncs for delivered, after it" "$(delivered "$execution" "$answer")" "off the path"
		row postgres "WAL syncs a replay" "$replay" "0: reads only" 0 0.1
		row postgres "WAL bytes a replay" "$(awk -v a="$(metric postgres replay "$n" wal-B/op)" \
			-v b="$(metric postgres replay $((3 * n)) wal-B/op)" -v n="$n" 'BEGIN { print (3 * n * b - n * a) / (2 * n) }')" "0" 0 1
		;;
	redis)
		for step in answer execution replay; do bench redis "$step" "$n"; done
		answer=$(metric redis answer "$n" round-trips/op)
		row redis "round trips before the answer" "$answer" 2 1.5 2.5
		row redis "round trips for delivered, after it" "$(delivered "$(metric redis execution "$n" round-trips/op)" "$answer")" "off the path"
		row redis "round trips a replay" "$(metric redis replay "$n" round-trips/op)" "1: a read" 0.5 1.5
		row redis "keys left a replay" "$(metric redis replay "$n" keys/op)" 0 0 0.001
		;;
	esac
done
echo "(sqlite: fsync calls, sync=full, and postgres: pg_stat_wal, each from runs of $n and $((3 * n)) executions;"
echo " redis: round trips from the client and keys under the store's prefix, runs of $n)"
