package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// benchDatabase is the form of the database -postgres-url may name. The bench drops and
// creates that database around its round, so it must be one kept for the bench: a
// name beginning with sb_bench cannot be an application's database by accident, and
// needs no quoting in SQL.
var benchDatabase = regexp.MustCompile(`^sb_bench[a-z0-9_]{0,54}$`)

// parsePostgresURL checks -postgres-url: a URL or DSN the runtime's pool reads (so
// pool_max_conns may size the runtime's pool), naming a database of the form
// benchDatabase. Its errors never repeat the URL, which may hold a password.
func parsePostgresURL(url string) (*pgx.ConnConfig, error) {
	pool, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, errors.New("-postgres-url: not a PostgreSQL URL or key/value DSN")
	}
	cfg := pool.ConnConfig
	if !benchDatabase.MatchString(cfg.Database) {
		return nil, fmt.Errorf("-postgres-url: database %q: want a name beginning with sb_bench (lower-case letters, digits, underscores): the bench drops and creates it", cfg.Database)
	}
	return cfg, nil
}

// pgBench is the PostgreSQL server of a throughput round: a connection to its
// maintenance database "postgres", from which the bench database is dropped and
// created, and the server's processes found.
type pgBench struct {
	admin    *pgx.Conn
	database string
	addr     string
}

// openPGBench connects to the maintenance database of the server cfg names. When no
// server answers there it returns nil and says why; a server that answers with an
// error (authentication, a missing "postgres" database) is an error.
func openPGBench(ctx context.Context, cfg *pgx.ConnConfig) (*pgBench, string, error) {
	admin := cfg.Copy()
	admin.Database = "postgres"
	admin.ConnectTimeout = 5 * time.Second
	addr := fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)
	conn, err := pgx.ConnectConfig(ctx, admin)
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			return nil, "", fmt.Errorf("postgres at %s: %s (SQLSTATE %s)", addr, pgErr.Message, pgErr.Code)
		}
		return nil, fmt.Sprintf("no PostgreSQL answers at %s", addr), nil
	}
	return &pgBench{admin: conn, database: cfg.Database, addr: addr}, "", nil
}

// recreate drops the bench database, left over from a run that was killed, and
// creates it empty; the runtime then creates its schema there.
func (p *pgBench) recreate(ctx context.Context) error {
	if err := p.drop(ctx); err != nil {
		return err
	}
	if _, err := p.admin.Exec(ctx, "CREATE DATABASE "+p.database); err != nil {
		return fmt.Errorf("postgres at %s: create database %s: %w", p.addr, p.database, err)
	}
	return nil
}

// drop drops the bench database, ending any session still connected to it.
func (p *pgBench) drop(ctx context.Context) error {
	if _, err := p.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+p.database+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("postgres at %s: drop database %s: %w", p.addr, p.database, err)
	}
	return nil
}

func (p *pgBench) close() { _ = p.admin.Close(context.Background()) }
