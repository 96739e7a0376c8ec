// Package sqlitestore is the SQLite record.Store: durable on one host, shared
// by several proxy processes through one database file.
//
// The database runs in WAL mode. Every change is made in a transaction begun
// with BEGIN IMMEDIATE, which takes the database's single write lock at its
// start: the read that decides a reservation and the write that records it
// see no other writer in between, whether that writer is a goroutine of this
// process or another process on the host. Within a process, writes go
// through one connection; the reservations and transitions that wait for it
// go together in one transaction (batch.go), which commits them at once:
// each in the one statement that makes it, or in a savepoint of its own
// when it makes more than one change. Reads use a pool of their own and
// never wait for a writer.
//
// With the default synchronous=NORMAL a committed change survives the crash
// of any process (kill -9 included); Options.Sync "full" makes it survive a
// power loss too, at the cost of an fsync per commit.
//
// The schema (version 2) is created on first use, and a file of version 1
// is upgraded when opened:
//
//	records         one row per execution: id (primary key), key, holder (1
//	                for the one record that currently holds its key: a
//	                partial unique index on key keeps it unique), state,
//	                history/result/error as JSON text, times as INTEGER unix
//	                nanoseconds (NULL when unset), retention in nanoseconds,
//	                awaiting (who is asked to approve; '' when none; added in
//	                version 2)
//	secrets         the fingerprint secret, created once by whichever process
//	                asks first
//	allowances      one row per upstream account that shares its allowance
//	                through the file: when its bucket is next full, in unix
//	                nanoseconds (see retry.Allowance.TakeAt); each take is a
//	                BEGIN IMMEDIATE transaction of its own
//	schema_version  the schema's version, so a later one can migrate
//
// A build that finds a newer version refuses the file. The partial index
// of the executions in flight, by owner, is rebuilt on open when its
// states are not those of record.State.InFlight.
package sqlitestore
