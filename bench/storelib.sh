# storelib.sh: what the scripts of the durable stores share. Sourced, not
# run. The caller sets script (its name, for errors), here and base (the
# two trees; writes.sh has only here), stores (the stores asked for) and
# dir (a scratch directory).

# storePackage prints the package of STORE's tests; it fails, naming the
# stores there are, for any other.
storePackage() {
	case $1 in
	sqlite | redis) echo "./internal/record/${1}store" ;;
	postgres) echo ./internal/record/pgstore ;;
	*) echo "$script: unknown store $1 (sqlite, redis, postgres)" >&2; return 2 ;;
	esac
}

# buildStores builds each store's test binary of both trees into dir, as
# STORE.base and STORE.this.
buildStores() {
	local store pkg
	for store in "${stores[@]}"; do
		pkg=$(storePackage "$store") || exit 2
		(cd "$base" && go test -c -o "$dir/$store.base" "$pkg")
		(cd "$here" && go test -c -o "$dir/$store.this" "$pkg")
	done
}

# median prints the median of the numbers on its input.
median() {
	sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
