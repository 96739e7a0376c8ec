#!/usr/bin/env bash
# footprint.sh: how many lines of code and of data (64-byte cache lines) one
# tools/call touches in the proxy, counted by valgrind's cachegrind, so that
# a change to the path can be judged by a number that does not move with the
# machine's load.
#
# It runs BenchmarkPathCold (internal/proxy) under cachegrind, whose
# simulated caches the benchmark empties before each call, twice: with N1
# and with N2 calls. The misses of the larger run less those of the smaller,
# divided by N2-N1, are what one call touches, the set-up left out.
#
# Usage: bench/footprint.sh [mode ...]   (modes: new-execution replay read-only; default all)
# Environment: N1 (default 20), N2 (default 120).
# Needs valgrind (apt install valgrind).
set -euo pipefail

cd "$(dirname "$0")/.."
n1=${N1:-20}
n2=${N2:-120}
modes=("$@")
if ((${#modes[@]} == 0)); then
	modes=(new-execution replay read-only)
fi
command -v valgrind >/dev/null || { echo "footprint.sh: valgrind is not installed (apt install valgrind)" >&2; exit 2; }

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
go test -c -o "$dir/proxy.test" ./internal/proxy

# The evicting loop in BenchmarkPathCold touches this many data lines per
# call; they are taken out of the data count.
evicted=$(((4 << 20) / 64))

# misses runs the mode's benchmark with n calls and prints the totals of
# code and data misses in the last-level cache (1 MiB, as a core's L2 here).
misses() {
	local mode=$1 n=$2 out=$dir/cg.$1.$2
	# Asynchronous preemption sends signals that cachegrind need not see.
	# Valgrind reports a processor with RDTSCP but cannot run the
	# instruction, which the runtime then uses (SIGILL on some hosts). The
	# binary's linker turns off the sampling of allocations for a memory
	# profile, as nothing in it reads one; a test binary's keeps it on
	# (internal/deptest's TestNoMemoryProfile).
	GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off,memprofilerate=0 valgrind --tool=cachegrind --cache-sim=yes \
		--I1=32768,8,64 --D1=32768,8,64 --LL=1048576,16,64 \
		--cachegrind-out-file="$out" "$dir/proxy.test" -test.run '^$' \
		-test.bench "^BenchmarkPathCold/$mode\$" -test.benchtime "${n}x" >"$out.log" 2>&1 ||
		{ cat "$out.log" >&2; exit 1; }
	awk '/^summary:/ {print $4, $7 + $10}' "$out" # ILmr, DLmr + DLmw: see its "events:" line
}

printf '%-14s %12s %12s\n' mode "code lines" "data lines"
for mode in "${modes[@]}"; do
	read -r i1 d1 < <(misses "$mode" "$n1")
	read -r i2 d2 < <(misses "$mode" "$n2")
	awk -v m="$mode" -v i1="$i1" -v i2="$i2" -v d1="$d1" -v d2="$d2" -v n="$((n2 - n1))" -v e="$evicted" \
		'BEGIN { printf "%-14s %12.0f %12.0f\n", m, (i2 - i1) / n, (d2 - d1) / n - e }'
done
echo "(per call, each line 64 bytes; from cachegrind with N1=$n1, N2=$n2)"
