// Package pgstore is the PostgreSQL record.Store: shared, durable and
// queryable. Every proxy that opens the same database and schema shares
// one set of reservations.
//
// # Tables
//
// Open takes a schema (default "mcp_idempotent") and creates, on first use
// and under an advisory lock so that proxies starting together do not race
// (the same lock under which a schema an older build made is upgraded):
//
//   - records: one row per execution, keyed by id. The columns are the
//     Record's fields; history is a jsonb array of transitions, result and
//     error are json (kept byte for byte as they came, but for bytes that
//     are not UTF-8, kept as U+FFFD), times are timestamptz, retention is
//     an interval. holds_key marks the one record
//     that currently holds its key: a partial unique index on key where
//     holds_key is what makes a reservation atomic. watched marks a
//     record that a Wait or WaitDecided waits for. awaiting names who is
//     asked to approve a record in accepted (schema version 3).
//   - secrets: the fingerprint HMAC key, one row.
//   - allowances: one row per upstream account whose allowance the proxies
//     share: when its bucket is next full, in unix nanoseconds (see
//     retry.Allowance.TakeAt). A take is one INSERT ... ON CONFLICT DO
//     UPDATE, whose row lock serializes concurrent takes (schema version 2).
//   - schema_version: the layout's version.
//
// # Atomicity
//
// Every step is one statement, so it is atomic on its own and needs no
// transaction held across round trips. The first statements of
// concurrent calls are sent together and commit in one transaction
// (batch.go), all or none; a batch of reservations, or of updates of
// records the Store wrote last, goes as one statement (set.go). A reservation is an INSERT ... ON
// CONFLICT (key) WHERE holds_key DO NOTHING, and in the same statement a
// read of the holder, attached to when it may be matched: the unique
// index lets exactly one of any number of concurrent callers insert. An
// orphan or a replaceable holder is dealt with by a compare-and-set UPDATE
// (only one caller's succeeds: the row lock serializes them and the losers'
// WHERE no longer matches), after which the reservation is tried again.
// Update is a compare-and-set on the current state as well.
//
// # Waiting
//
// Wait marks the record watched. A trigger on records (notifyDDL) runs
// pg_notify(schema, id) when a watched record leaves the in-flight states,
// or leaves accepted while it awaited an approval (WaitDecided), in the
// transaction of the statement that changed it, whichever statement that
// was (an operator's UPDATE included). Records nobody waits for are
// not notified: a commit that notifies is serialized with every other
// such commit in the database. Each Store keeps one listening connection,
// opened by the first Wait, that wakes the in-process waiters of that id;
// waiters also poll on a backoff from 10 ms to 1 s, so a lost connection
// or notification only delays them.
//
// All times come from Options.Now, never from the server's clock.
package pgstore
