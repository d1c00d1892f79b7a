package postgres

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// migrations are the schema's versions, applied in order: migrations/NNNN_name.sql,
// NNNN the version (spec/postgres.md, "Migrations"). A released file never changes; a
// change of schema is a new file.
//
//go:embed migrations/*.sql
var migrations embed.FS

// migrationLock is the key of the advisory lock that migrations run under, so that
// replicas starting at once apply each migration once: the others wait for the lock
// and then find it applied.
const migrationLock int64 = 0x5377_6974_6368 // "Switch"

// migration is one version of the schema.
type migration struct {
	version int
	name    string
	sql     string
}

// loadMigrations reads the embedded migrations in version order.
func loadMigrations() ([]migration, error) {
	files, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, f := range files {
		base := path.Base(f)
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must start with a positive version and an underscore", base)
		}
		body, err := migrations.ReadFile(f)
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: base, sql: string(body)})
	}
	slices.SortFunc(ms, func(a, b migration) int { return a.version - b.version })
	for i := 1; i < len(ms); i++ {
		if ms[i].version == ms[i-1].version {
			return nil, fmt.Errorf("migrations %s and %s share version %d", ms[i-1].name, ms[i].name, ms[i].version)
		}
	}
	return ms, nil
}

// migrate creates the store's schema if needed and applies the migrations it lacks, all
// in one transaction holding the migration lock, recording each in schema_migrations.
// Either every missing migration is applied or none is.
func (s *Store) migrate(ctx context.Context) error {
	ms, err := loadMigrations()
	if err != nil {
		return fmt.Errorf("postgres migrations: %w", err)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return dbError("migrate schema "+s.schema, err)
	}
	defer rollback(tx)
	stmts := []string{
		"SELECT pg_advisory_xact_lock($1)",
		"CREATE SCHEMA IF NOT EXISTS " + s.schema,
		"SET LOCAL search_path TO " + s.schema,
		`CREATE TABLE IF NOT EXISTS schema_migrations (
			version    integer PRIMARY KEY,
			name       text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now())`,
	}
	for i, q := range stmts {
		var args []any
		if i == 0 {
			args = []any{migrationLock}
		}
		if _, err := tx.Exec(ctx, q, args...); err != nil {
			return dbError("migrate schema "+s.schema, err)
		}
	}
	rows, err := tx.Query(ctx, "SELECT version FROM schema_migrations")
	if err != nil {
		return dbError("migrate schema "+s.schema, err)
	}
	applied, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return dbError("migrate schema "+s.schema, err)
	}
	for _, m := range ms {
		if slices.Contains(applied, int32(m.version)) {
			continue
		}
		if _, err := tx.Exec(ctx, m.sql); err != nil {
			return dbError("apply migration "+m.name+" to schema "+s.schema, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", m.version, m.name); err != nil {
			return dbError("record migration "+m.name, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return dbError("migrate schema "+s.schema, err)
	}
	return nil
}
