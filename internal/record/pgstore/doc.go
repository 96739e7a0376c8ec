// Package pgstore is the PostgreSQL record.Store: shared, durable and
// queryable.
package pgstore

import _ "github.com/jackc/pgx/v5"
