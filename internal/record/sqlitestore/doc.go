// Package sqlitestore is the SQLite record.Store: durable on one host, shared
// by several proxy processes through one database file.
package sqlitestore

import _ "modernc.org/sqlite" // the cgo-free driver
