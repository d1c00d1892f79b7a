package main

import (
	"io"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/eventstore/redisconn"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// /readyz (both modes) reports ready only once the first complete table is published.
func TestReadyOnlyAfterTableSync(t *testing.T) {
	h := &routing.Holder{}
	check := readiness{holder: h, draining: new(atomic.Bool)}.tableSynced
	req := httptest.NewRequest("GET", "/readyz", nil)
	if err := check(req); err == nil {
		t.Fatal("ready before the routing table synced")
	}
	routing.NewRegistry(h).Start()
	if err := check(req); err != nil {
		t.Fatalf("not ready after sync: %v", err)
	}
}

func TestFlagValidation(t *testing.T) {
	for args, want := range map[string]string{
		"--idempotency-ttl=1h":          "at least 24h",
		"--max-concurrent-executions=0": "must be positive",
		"--max-events-per-execution=3":  "at least 4",
		"--max-output-bytes=0":          "must be positive",
		"--read-timeout=0s":             "must be positive",
		"--idle-timeout=-1s":            "must be positive",
		"--execution-lease=0s":          "must be positive",
		"--watch-namespaces=Bad_Name":   "RFC 1123 label",
		"--auth=ldap":                   "unknown mode",
		"--auth=static":                 "needs --auth-tokens-file",
		"--shutdown-grace=-1s":          "must be positive",
		"stray":                         "unexpected arguments",

		// 0 is no limit; only a negative count is refused.
		"--max-reservations-per-principal=-1":                   "must be positive",
		"--stream-token-key-rotation=10m":                       "at least --stream-token-ttl",
		"--stream-token-key-rotation=1h30m0.5s":                 "whole seconds",
		"--tls-cert-file=/etc/tls/tls.crt":                      "go together",
		"--tls-key-file=/etc/tls/tls.key":                       "go together",
		"--manifests=/m --metrics-cert-path=/etc/metrics-certs": "needs cluster mode with --metrics-secure",
		"--metrics-secure=false --metrics-cert-path=/etc/m":     "needs cluster mode with --metrics-secure",
	} {
		_, err := parseFlags(strings.Fields(args), &strings.Builder{})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseFlags(%s) = %v, want %q", args, err, want)
		}
	}
	if _, err := parseFlags(nil, &strings.Builder{}); err != nil {
		t.Errorf("defaults rejected: %v", err)
	}
	if _, err := parseFlags([]string{"--max-reservations-per-principal=0"}, &strings.Builder{}); err != nil {
		t.Errorf("no limit of reservations rejected: %v", err)
	}
}

// /metrics is bound to loopback by default only where nothing checks who scrapes it:
// standalone mode with --auth=none.
func TestMetricsBindAddressDefault(t *testing.T) {
	for args, want := range map[string]string{
		"--manifests=/m":                                     "127.0.0.1:8443",
		"--manifests=/m --auth=none":                         "127.0.0.1:8443",
		"--manifests=/m --auth=static --auth-tokens-file=/t": ":8443",
		"":            ":8443",
		"--auth=none": ":8443",
		"--manifests=/m --metrics-bind-address=0.0.0.0:9000": "0.0.0.0:9000",
		"--manifests=/m --metrics-bind-address=0":            "0",
	} {
		o, err := parseFlags(strings.Fields(args), &strings.Builder{})
		if err != nil {
			t.Fatalf("parseFlags(%s): %v", args, err)
		}
		if o.metricsAddr != want {
			t.Errorf("parseFlags(%s): metrics on %q, want %q", args, o.metricsAddr, want)
		}
	}
}

func TestAuthFloodFlagValidation(t *testing.T) {
	for args, want := range map[string]string{
		"--auth-reviews-in-flight=0":     "--auth-reviews-in-flight must be positive",
		"--auth-failures-per-address=-1": "--auth-failures-per-address not negative",
	} {
		_, err := parseFlags(strings.Fields(args), &strings.Builder{})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseFlags(%s) = %v, want %q", args, err, want)
		}
	}
	if _, err := parseFlags([]string{"--auth-failures-per-address=0"}, &strings.Builder{}); err != nil {
		t.Errorf("--auth-failures-per-address=0 (no limit) rejected: %v", err)
	}
}

// TestOpenStoreAnnouncer: the Redis store's wake-ups carry the events they announce, so
// it reaches the HTTP API as the Announcer too, once timed as well; the memory store
// has none.
func TestOpenStoreAnnouncer(t *testing.T) {
	for store, want := range map[string]bool{"memory": false, "redis": true} {
		args := []string{"--event-store=" + store}
		if store == "redis" && os.Getenv(redisconn.EnvURL) == "" {
			args = append(args, "--redis-url=redis://127.0.0.1:6379/0")
		}
		o, err := parseFlags(args, io.Discard)
		if err != nil {
			t.Fatalf("parseFlags(%s): %v", args, err)
		}
		s, closeStore, err := openStore(t.Context(), o, logr.Discard())
		if err != nil {
			t.Fatalf("openStore(%s): %v", store, err)
		}
		timed := s.timed(func(eventstore.Op, time.Duration) {})
		closeStore()
		if got := s.announcer != nil && timed.announcer == s.announcer; got != want {
			t.Errorf("%s store: announcer %v, timed %v; want one: %v", store, s.announcer, timed.announcer, want)
		}
	}
}
