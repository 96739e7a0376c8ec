// Package redisstore is the Redis (and Valkey) record.Store: shared across
// processes and hosts.
//
// # Keys
//
// With P the key prefix (Options.Prefix, "mcpi:" by default) and T the hex
// of the first 16 bytes of SHA-256 of a record key, the store writes:
//
//	P{T}:k        string: the id of the record holding the key
//	P{T}:r:<id>   hash: one record (its fields are listed in codec.go)
//	Pi:<id>       string: T, so that a process that never saw the record's
//	              key can find it by id
//	Psecret       string: the fingerprint key, 32 bytes
//	Psettled      pub/sub channel: the id of each record that settled, or
//	              that left accepted with a decision (see Waiting)
//	Pa:<account>  string: when an upstream account's shared allowance is
//	              next full, unix nanoseconds (retry.Allowance.TakeAt); a
//	              take is one script, and the key expires once the
//	              allowance is full again
//
// Everything a reservation or an update touches carries the hash tag {T},
// so each script works on keys of one Redis Cluster slot, but for one key:
// the reservation script writes the index Pi:<id> when it wins, so that a
// replay or an attach writes none. The holder's record key is built inside
// the reservation script from the holder's id; it shares the tag, so it is
// in the same slot (Redis checks the slot, not the KEYS list). On a Redis
// Cluster the script cannot write the index, and the won reservation
// writes it in a step of its own (cluster.go). Every other command that
// names a key names one, or is a script of one tag; the pipelines that
// mix tags (an update and its index, renewals) are split by the Cluster
// client, each command on its own master.
//
// # Atomicity
//
// Reserve, Update, Wait's check, Renew and TakeAllowance are Lua scripts,
// run as the functions of one library (FCALL) where the server has Redis
// Functions, else with EVALSHA (EVAL when the server has forgotten them;
// functions.go). Redis runs a script alone, so
// reading the holder, settling an orphan, matching or replacing the holder
// and writing the new record happen as one step, in one round trip. Every
// time the scripts write or compare comes from Options.Now, passed as unix
// nanoseconds; the server's clock is never read. Go-redis is set never to
// resend a command (MaxRetries -1): a script that timed out may have run.
//
// An update of a record the Store knows (known.go) that settles it in a
// new execution's common life, dispatched to completed or completed to
// delivered, runs the settle script: the client works out the change,
// and the script only checks that the record is in the state, with a
// history of the length, that the Store knows, and writes; or answers
// that it moved on (settle.go).
//
// The scripts of Reserve and Update are sent in batches: what callers
// queued while the senders were busy goes in one pipeline, up to 64
// calls, and a call alone goes at once (batch.go). A pipeline is not a
// transaction: each script still runs alone, and answers its caller
// alone.
//
// # Finding a record by id
//
// Update, Get and Wait name a record by its id alone, and its keys need its
// tag. The store remembers the tag of every record it has reserved, matched
// or read (a bounded cache, plus the records its owners keep in flight), so
// these calls make one round trip. A process that has only the id reads the
// index key Pi:<id> first. The reservation script writes that index, and
// Update writes it in the same pipeline as its script (the settle script
// writes it itself, outside a Cluster), so a record is findable by id
// alone from its reservation on.
//
// # Expiry
//
// A settled record, its holder key and its index get a TTL of the record's
// retention plus one minute, so Redis drops them itself: no purge pass is
// needed. A record in flight and its holder key get a TTL that ends that
// long after the record's lease, which Renew and every new claim move on
// with the lease: a record whose owner died and that no one asks for again
// (no one settles it as an orphan) is dropped when it would have expired
// had it been settled at its lease's end. A record in flight without a
// lease, which cannot become an orphan, has none. The index of a record in
// flight has a TTL of a day, which Renew extends. Matching never relies on
// the TTL: a settled record stops matching when Options.Now passes its
// ExpiresAt. The extra minute lets a waiter woken by the settle read the
// record even with a zero retention, and covers clocks of proxies a little
// behind the server's.
//
// # Waiting
//
// Each settle is published, from inside the script, on Psettled with the id
// as payload. A Store holds one subscription and wakes its in-process
// waiters of that id at once (they share one channel). A waiter also checks
// on a backoff from 10 ms to 1 s, so a missed message or a lost subscription
// only delays it, and by its lease's end, when it settles the orphan.
//
// A record leaving accepted is published on the same channel when it had
// awaited an approval or goes anywhere but dispatched: that wakes an
// owner waiting for the decision (record.Decider). A plain dispatch, every
// execution's, is not published; a WaitDecided on one finds it by its
// backoff.
//
// # Listing
//
// List (record.Lister) scans the keys under the prefix, on every master
// of a Cluster: its cost grows with the database, which suits the
// activity commands, not the request path.
//
// # Sentinel, Cluster and replicas
//
// A URL with master_name= names a master that Sentinels watch; go-redis's
// failover client asks them for it, and again after a failover
// (connect.go). A URL with cluster=true names a Redis Cluster, which
// go-redis's cluster client serves (cluster.go). Redis replicates
// asynchronously; with Options.WaitReplicas every pipeline that writes
// ends with WAIT, on each master it wrote to (replicas.go).
//
// # Leases
//
// Renew extends, in one pipeline of one script per record, the records in
// flight that this Store reserved or claimed for the owner. An owner is a
// proxy process with its own Store, so these are all of the owner's records.
package redisstore
