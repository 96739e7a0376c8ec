// Package redisstore is the Redis (and Valkey) record.Store: shared across
// processes and hosts.
package redisstore

import _ "github.com/redis/go-redis/v9"
