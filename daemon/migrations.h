/*
 * migrations.h -- the tuning-db migrations embedded at build time
 * (tools/embed-sql.sh writes build/gen/migrations.c from
 * tuning-db/migrations/NNNN_*.sql).  Versions are 1, 2, ... in order;
 * after migration N, PRAGMA user_version = N.
 */
#ifndef FLYD_MIGRATIONS_H
#define FLYD_MIGRATIONS_H

#include <stddef.h>

struct flyd_migration {
	int version;      /* NNNN of the file name */
	const char *name; /* file name without .sql */
	const char *sql;  /* the whole script */
};

extern const struct flyd_migration flyd_migrations[];
extern const size_t flyd_nmigrations;
/* The fleet DB's (PostgreSQL) migrations, tuning-db/fleet/NNNN_*.sql;
 * after migration N, fleet_schema holds N (daemon/fleet.c). */
extern const struct flyd_migration flyd_fleet_migrations[];
extern const size_t flyd_fleet_nmigrations;
/* tuning-db/schema.sql: the whole current schema, for the schema test. */
extern const char flyd_schema_sql[];

#endif /* FLYD_MIGRATIONS_H */
