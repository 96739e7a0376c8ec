# storelib.sh: what stores.sh and storecpu.sh share. Sourced, not run.
# The caller sets script (its name, for errors), here and base (the two
# trees), stores (the stores asked for) and dir (a scratch directory).

# buildStores builds each store's test binary of both trees into dir, as
# STORE.base and STORE.this.
buildStores() {
	local store pkg
	for store in "${stores[@]}"; do
		case $store in
		sqlite | redis) pkg=./internal/record/${store}store ;;
		postgres) pkg=./internal/record/pgstore ;;
		*) echo "$script: unknown store $store (sqlite, redis, postgres)" >&2; exit 2 ;;
		esac
		(cd "$base" && go test -c -o "$dir/$store.base" "$pkg")
		(cd "$here" && go test -c -o "$dir/$store.this" "$pkg")
	done
}

# median prints the median of the numbers on its input.
median() {
	sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
