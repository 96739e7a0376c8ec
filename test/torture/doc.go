// Package torture runs the built mcp-idempotent binary through the failures
// it exists for, at volume: storms of duplicate calls through four proxy
// processes on one store, kill -9 of the proxy at random moments in a
// call's life, an upstream that exits after its side effect, a store killed
// under load, and hostile input on the wire. Every side effect is a line in
// a ledger file the upstream (ledgerserver) writes, so a duplicate is
// counted after the processes that made it are gone.
//
// Run:
//
//	go test -race ./test/torture/                       # small: a few minutes on 2 cores
//	MCPI_TORTURE_SIZE=full go test -race -timeout 60m ./test/torture/
//
// Environment:
//
//	MCPI_TORTURE_SIZE=full  the full size: storms of 2,500 intents sent
//	                        through each of 4 proxies (10,000 calls per
//	                        store), 30 kill -9 loops per store, and more of
//	                        every other case (see sizes).
//	MCPI_TORTURE_SEED=N     replay a run: every random choice comes from
//	                        this seed, which each test logs.
//	MCPI_REDIS_URL, MCPI_POSTGRES_URL
//	                        the shared stores, as test/e2e reads them; a
//	                        test on a store that is not given is skipped.
//	MCPI_REQUIRE_SERVICES=1 fail, rather than skip, when a store or
//	                        redis-server is missing.
//
// Each test keeps its records apart: its own sqlite file, Redis key prefix
// and PostgreSQL schema (dropped at the end).
//
// The tests kill process groups and send signals: they run on Unix.
package torture
