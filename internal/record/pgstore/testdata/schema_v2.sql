-- The schema at version 2, as internal/record/pgstore/schema.go made it
-- before version 3 (its ddl, then ddl2): TestMigrateFromVersion2 opens it.
-- {schema} stands for the quoted schema name.

CREATE SCHEMA {schema};
CREATE TABLE {schema}.schema_version (version integer NOT NULL);

CREATE TABLE {schema}.records (
	id          text COLLATE "C" PRIMARY KEY,
	key         text COLLATE "C" NOT NULL,
	holds_key   boolean NOT NULL,
	fingerprint text NOT NULL,
	actor       text NOT NULL,
	scope       text NOT NULL,
	upstream    text NOT NULL,
	tool        text NOT NULL,
	state       text NOT NULL,
	history     jsonb NOT NULL,
	attempts    integer NOT NULL,
	attached    integer NOT NULL,
	result      json,
	error       json,
	retention   interval NOT NULL,
	expires_at  timestamptz,
	owner       text NOT NULL,
	lease_until timestamptz,
	watched     boolean NOT NULL DEFAULT false
) WITH (fillfactor = 80);

-- The reservation: at most one record holds a key.
CREATE UNIQUE INDEX records_key_holder ON {schema}.records (key) WHERE holds_key;
-- Renew: an owner's records in flight.
CREATE INDEX records_owner_in_flight ON {schema}.records (owner) WHERE state IN ('accepted', 'dispatched');
-- Purge: settled records by expiry.
CREATE INDEX records_expires_at ON {schema}.records (expires_at) WHERE expires_at IS NOT NULL;

CREATE TABLE {schema}.secrets (
	name  text PRIMARY KEY,
	value bytea NOT NULL
);

-- Waiters listen on the channel named after the schema. The notification
-- is sent at the commit of whatever statement settled the record, if a
-- waiter marked it watched: a commit that notifies takes a lock that
-- serializes it with every other such commit in the database, which the
-- many records that nobody waits for need not pay.
CREATE FUNCTION {schema}.notify_settled() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_notify(TG_TABLE_SCHEMA, NEW.id);
	RETURN NULL;
END
$$;
CREATE TRIGGER records_settled AFTER UPDATE OF state ON {schema}.records FOR EACH ROW
	WHEN (NEW.watched AND OLD.state IN ('accepted', 'dispatched') AND NEW.state NOT IN ('accepted', 'dispatched'))
	EXECUTE FUNCTION {schema}.notify_settled();

INSERT INTO {schema}.schema_version (version) VALUES (1);

CREATE TABLE {schema}.allowances (
	account   text COLLATE "C" PRIMARY KEY,
	full_at   bigint NOT NULL,
	last_took boolean NOT NULL
);

INSERT INTO {schema}.schema_version (version) VALUES (2);
