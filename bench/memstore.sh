#!/usr/bin/env bash
# memstore.sh: what the memory store costs per record it keeps and per
# call, this checkout against another commit, side by side in one run.
#
# Each round runs, for each build in turn, the memstore benchmarks
# (BenchmarkRetained: live heap and collector CPU per retained record;
# BenchmarkReserveComplete: a new execution; BenchmarkReplay) and
# bench/retained, which fills a store with N records and reports the live
# heap per record, and whose peak resident set /usr/bin/time reports. It
# prints the median of each figure over the rounds and the ratio of this
# checkout's to the base's. The times move with the machine's load; the
# bytes do not.
#
# Usage: BASE=COMMIT bench/memstore.sh
# Environment: BASE, a commit that has bench/retained (e2ea03f or later;
# default e2ea03f, the store before its records were packed); COUNT
# rounds (default 5); N records for the resident set (default 1000000).
set -euo pipefail

cd "$(dirname "$0")/.."
base=${BASE:-e2ea03f}
count=${COUNT:-5}
n=${N:-1000000}

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir "$dir/base"
git archive "$base" | tar -x -C "$dir/base"
for build in base new; do
	tree=.
	[[ $build == base ]] && tree=$dir/base
	(cd "$tree" && go test -c -o "$dir/$build.test" ./internal/record/memstore &&
		go build -o "$dir/$build.retained" ./bench/retained)
done

# figures prints "build benchmark unit value" for each figure of a round.
figures() {
	local build=$1
	"$dir/$build.test" -test.run '^$' -test.bench 'Retained' -test.benchtime 3x
	"$dir/$build.test" -test.run '^$' -test.bench 'ReserveComplete|Replay' -test.benchmem
	/usr/bin/time -f 'BenchmarkRetainedProcess 1 %M peak-RSS-kB' -o "$dir/time" "$dir/$build.retained" -n "$n" |
		awk '/^live heap\/record/ {print "BenchmarkRetainedProcess 1", $3, "heap-B/record"}'
	cat "$dir/time"
}

for ((round = 1; round <= count; round++)); do
	for build in base new; do
		figures "$build" | awk -v b="$build" '/^Benchmark/ {
			name = $1; sub(/-[0-9]+$/, "", name)
			for (i = 3; i < NF; i += 2) if ($(i + 1) != "ns/op" || $i != 0) print b, name, $(i + 1), $i
		}'
	done
done >"$dir/figures"

printf '%-40s %-14s %12s %12s %7s\n' benchmark unit base new new/base
sort -k2,2 -k3,3 -k1,1 -k4,4g "$dir/figures" | awk '
	function median(   m) { m = int((cnt + 1) / 2); return (cnt % 2) ? v[m] : (v[m] + v[m + 1]) / 2 }
	function flush() {
		if (cnt == 0) return
		med[key, build] = median(); keys[key] = 1; cnt = 0
	}
	{
		k = $2 " " $3
		if (k != key || $1 != build) { flush(); key = k; build = $1 }
		v[++cnt] = $4
	}
	END {
		flush()
		for (k in keys) {
			split(k, p, " ")
			b = med[k, "base"]; c = med[k, "new"]
			printf "%-40s %-14s %12.1f %12.1f %7.2f\n", p[1], p[2], b, c, (b ? c / b : 0)
		}
	}' | sort
echo "(medians of $count rounds; base $base, new the checkout)"

# The goals (issue 20), judged on the checkout's medians: a retained
# record's live heap, and the resident set at a million records.
newMedian() {
	awk -v u="$1" '$1 == "new" && $2 == "BenchmarkRetainedProcess" && $3 == u { print $4 }' "$dir/figures" |
		sort -g | awk '{ v[NR] = $1 } END { if (NR) print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
heap=$(newMedian heap-B/record)
rss=$(newMedian peak-RSS-kB)
if [[ -z $heap || -z $rss ]]; then
	echo "memstore.sh: bench/retained gave no live heap or resident set to judge" >&2
	exit 1
fi
# Records whose retention ran out while the proxy is idle go at its next
# lease renewal, not at its next call: the checkout's store, filled with
# records of a second's retention, then idle for four seconds.
"$dir/new.retained" -n 100000 -retention 1s -lease 3s -idle 4s >"$dir/idle"
left=$(awk '/^records left/ { print $3 }' "$dir/idle")
idleHeap=$(awk '/^live heap\/record/ && /idle/ { print $3 }' "$dir/idle")
if [[ -z $left || -z $idleHeap ]]; then
	cat "$dir/idle" >&2
	echo "memstore.sh: bench/retained -idle gave no count of the records left" >&2
	exit 1
fi
awk -v h="$heap" -v r="$rss" -v n="$n" -v left="$left" -v idle="$idleHeap" 'BEGIN {
	printf "goal: live heap a record (results of 200 B) %.0f B, at most 700 (500 plus the result): %s\n", h, h <= 700 ? "met" : "NOT met"
	if (n == 1000000) printf "goal: resident at 1,000,000 records %.2f GB, at most 0.7: %s\n", r * 1024 / 1e9, r * 1024 / 1e9 <= 0.7 ? "met" : "NOT met"
	else printf "goal: resident at 1,000,000 records: not judged (N=%d)\n", n
	printf "goal: records left of 100,000 after their retention, idle 4 s: %d, at most 0: %s (%s B a record still live)\n",
		left, left == 0 ? "met" : "NOT met", idle
}'
