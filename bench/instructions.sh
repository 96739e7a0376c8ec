#!/usr/bin/env bash
# instructions.sh: how many instructions one tools/call costs the proxy,
# counted by valgrind (cachegrind, no cache simulation), which counts the
# same from run to run whatever else the machine is doing.
#
# It runs BenchmarkPath (internal/proxy: the session's own work for one
# round trip, in process, no pipes) twice, with N1 and with N2 calls; the
# instructions of the larger run less those of the smaller, divided by
# N2-N1, are what one call costs, the set-up left out. The collector's work
# falls where its cycles fall, which moves a count by a few percent from run
# to run and with N1 and N2: it counts RUNS times and prints the median and
# the range, and two builds are compared with the same N1 and N2.
#
# Usage: bench/instructions.sh [mode ...]   (modes: new-execution replay read-only; default all)
# Environment: N1 (default 500), N2 (default 1500), RUNS (default 3); TREE, a checkout of
# this repository to count instead of this one (to compare with another
# commit: git worktree add /tmp/base COMMIT; TREE=/tmp/base bench/instructions.sh).
# Needs valgrind (apt install valgrind).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
tree=${TREE:-$here}
n1=${N1:-500}
n2=${N2:-1500}
runs=${RUNS:-3}
modes=("$@")
if ((${#modes[@]} == 0)); then
	modes=(new-execution replay read-only)
fi
command -v valgrind >/dev/null || { echo "instructions.sh: valgrind is not installed (apt install valgrind)" >&2; exit 2; }

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
(cd "$tree" && go test -c -o "$dir/proxy.test" ./internal/proxy)

# count runs the mode's benchmark with n calls and prints the instructions
# the whole process ran, and those of them in SHA-256's block function.
count() {
	local mode=$1 n=$2 out=$dir/cg.$1.$2
	# As in footprint.sh: no asynchronous preemption signals, no RDTSCP,
	# which valgrind reports but cannot run, and no sampling of allocations
	# for a memory profile, which the binary does not do either.
	GOMAXPROCS=1 GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off,memprofilerate=0 valgrind --tool=cachegrind --cache-sim=no \
		--cachegrind-out-file="$out" "$dir/proxy.test" -test.run '^$' \
		-test.bench "^BenchmarkPath\$/^$mode\$" -test.benchtime "${n}x" >"$out.log" 2>&1 ||
		{ cat "$out.log" >&2; exit 1; }
	printf '%s ' "$(awk '/^summary:/ {print $2}' "$out")"
	cg_annotate --auto=no --threshold=0 "$out" | awk '
		$NF ~ /fips140\/sha256\.block/ { gsub(",", "", $1); sum += $1 }
		END { print sum + 0 }'
}

# goal prints issue 20's goal for a mode.
goal() {
	case $1 in
	new-execution) echo 35000 ;;
	replay) echo 30000 ;;
	read-only) echo 15000 ;;
	esac
}

# Valgrind offers the program no SHA extensions, so Go's SHA-256 runs its
# AVX2 block function under it: 2,188 instructions a block, hashed alone
# as the fingerprint's HMAC hashes them. A CPU with SHA-NI runs Go's
# other one, whose loop is 155 instructions a block. The last column
# counts the blocks that way: an estimate, which the goal is not judged on.
printf '%-14s %12s %8s %-8s %15s %9s %17s\n' mode instructions goal "" range "in SHA-256" "with SHA-NI, est."
for mode in "${modes[@]}"; do
	# One line a run: its count a call, and its SHA-256 block count a call.
	for ((run = 0; run < runs; run++)); do
		read -r i1 s1 < <(count "$mode" "$n1")
		read -r i2 s2 < <(count "$mode" "$n2")
		echo "$(((i2 - i1) / (n2 - n1))) $(((s2 - s1) / (n2 - n1)))"
	done | sort -n | awk -v m="$mode" -v g="$(goal "$mode")" '
		{ c[NR] = $1; sha[NR] = $2 }
		END {
			k = int((NR + 1) / 2) # the median run (the lower of two middle ones)
			printf "%-14s %12d %8d %-8s %15s %9d %17.0f\n", m, c[k], g, c[k] <= g ? "met" : "NOT met",
				c[1] "-" c[NR], sha[k], c[k] - sha[k] + sha[k] / 2188 * 155
		}'
done
echo "(per call, the median of $runs runs, in $tree; from cachegrind with N1=$n1, N2=$n2)"
