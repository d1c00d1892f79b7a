// Package redisconn makes the Redis client of the redis event store from the operator's
// configuration (spec/redis.md): one URL, given on the command line, in a file or in the
// environment; TLS with rediss://; optionally Sentinel. It checks that Redis answers
// before the runtime uses it.
//
// The URL usually holds a password, so nothing this package returns shows it: errors
// name where the URL came from (the flag, the file, the environment variable), never
// its text, and Target.String masks the password.
package redisconn

import (
	"context"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/switchboard-dev/switchboard/runtime/internal/urlsource"
)

// EnvURL is the environment variable read for the URL when neither --redis-url nor
// --redis-url-file is given.
const EnvURL = "SWITCHBOARD_REDIS_URL"

// DefaultPingTimeout bounds the check that Redis answers when Config.PingTimeout is 0.
const DefaultPingTimeout = 5 * time.Second

// Config is how to reach Redis. The zero value is valid once one URL source is set.
type Config struct {
	// URL is the Redis URL from --redis-url: redis://[user:password@]host[:port][/db],
	// or rediss:// for TLS, with go-redis query options (dial_timeout, pool_size, …).
	// A password here shows in process listings; URLFile and EnvURL do not.
	URL string
	// URLFile names a file holding the URL (--redis-url-file), such as a mounted
	// Secret; surrounding whitespace is ignored.
	URLFile string
	// CAFile names a PEM file of the CA certificates that verify the server with
	// rediss:// (--redis-ca-file); empty means the system roots.
	CAFile string
	// SentinelMaster is the name of the master to ask the Sentinels for
	// (--redis-sentinel-master). The URL then gives only the credentials, database, TLS
	// and options; its host and port are not dialled.
	SentinelMaster string
	// SentinelAddrs are the Sentinels' host:port addresses (--redis-sentinel-addrs).
	SentinelAddrs []string
	// SentinelPasswordFile names a file holding the Sentinels' own password
	// (--redis-sentinel-password-file), for Sentinels that require one.
	SentinelPasswordFile string
	// PingTimeout bounds the check that Redis answers (default DefaultPingTimeout).
	PingTimeout time.Duration
}

// RegisterFlags registers c's flags on fs, with c's current values as defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.URL, "redis-url", c.URL,
		"Redis URL for --event-store=redis: redis://[user:password@]host[:port][/db], rediss:// for TLS. "+
			"A password given here shows in process listings: prefer --redis-url-file or $"+EnvURL+".")
	fs.StringVar(&c.URLFile, "redis-url-file", c.URLFile,
		"File holding the Redis URL (surrounding whitespace ignored), e.g. a mounted Secret. Not together with --redis-url.")
	fs.StringVar(&c.CAFile, "redis-ca-file", c.CAFile,
		"PEM file of the CA certificates that verify the Redis server with a rediss:// URL (default: the system roots).")
	fs.StringVar(&c.SentinelMaster, "redis-sentinel-master", c.SentinelMaster,
		"Reach Redis through Sentinel: the master name (needs --redis-sentinel-addrs). "+
			"The Redis URL then gives only credentials, database, TLS and options; its host is not dialled.")
	fs.Func("redis-sentinel-addrs",
		"Comma-separated host:port addresses of the Sentinels, with --redis-sentinel-master (may be repeated).",
		func(s string) error {
			addrs, err := splitAddrs(s)
			if err != nil {
				return err
			}
			c.SentinelAddrs = append(c.SentinelAddrs, addrs...)
			return nil
		})
	fs.StringVar(&c.SentinelPasswordFile, "redis-sentinel-password-file", c.SentinelPasswordFile,
		"File holding the Sentinels' own password, when they require one (their requirepass, not the Redis password).")
}

// splitAddrs splits a comma-separated list of host:port addresses, skipping empty
// elements, and checks each one.
func splitAddrs(s string) ([]string, error) {
	var addrs []string
	for a := range strings.SplitSeq(s, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if err := checkAddr(a); err != nil {
			return nil, err
		}
		addrs = append(addrs, a)
	}
	return addrs, nil
}

func checkAddr(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil || host == "" {
		return fmt.Errorf("sentinel address %q is not host:port", a)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Errorf("sentinel address %q: port %q is not a number from 1 to 65535", a, port)
	}
	return nil
}

// Client resolves c (see Resolve), connects and checks that Redis answers (see
// Target.Connect). getenv reads the environment; nil means os.Getenv.
func (c *Config) Client(ctx context.Context, getenv func(string) string) (goredis.UniversalClient, error) {
	t, err := c.Resolve(getenv)
	if err != nil {
		return nil, err
	}
	return t.Connect(ctx)
}

// Target is a resolved Config: the client options, where the URL came from and a
// description without the password.
type Target struct {
	source      string
	desc        string
	opts        *goredis.Options         // a single server; nil with Sentinel
	failover    *goredis.FailoverOptions // Sentinel; nil without
	pingTimeout time.Duration
}

// String describes the target for logs, with the password masked:
// "redis://:***@redis:6379/0", or "sentinel master mymaster via a:26379,b:26379, db 0".
func (t *Target) String() string { return t.desc }

// Source names where the URL came from: "--redis-url", "--redis-url-file <path>" or
// "$SWITCHBOARD_REDIS_URL"; empty with Sentinel and no URL.
func (t *Target) Source() string { return t.source }

// Resolve picks the URL, reads the files it needs and builds the client options, without
// connecting. The URL comes from exactly one place: --redis-url or --redis-url-file
// (both given is an error), else EnvURL. With Sentinel the URL is optional. getenv
// reads the environment; nil means os.Getenv.
func (c *Config) Resolve(getenv func(string) string) (*Target, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	sentinel := c.SentinelMaster != "" || len(c.SentinelAddrs) > 0 || c.SentinelPasswordFile != ""
	if sentinel {
		if err := c.checkSentinel(); err != nil {
			return nil, err
		}
	}
	source, raw, err := c.rawURL(getenv)
	if err != nil {
		return nil, err
	}
	if raw == "" && !sentinel {
		return nil, fmt.Errorf("no Redis URL: set --redis-url-file, $%s or --redis-url", EnvURL)
	}

	opts := &goredis.Options{}
	var u *url.URL
	if raw != "" {
		if u, opts, err = parse(raw); err != nil {
			return nil, fmt.Errorf("%s: %w", source, err)
		}
	}
	if c.CAFile != "" {
		if opts.TLSConfig == nil {
			return nil, fmt.Errorf("--redis-ca-file %s needs a rediss:// URL", c.CAFile)
		}
		pool, err := readCAs(c.CAFile)
		if err != nil {
			return nil, err
		}
		opts.TLSConfig.RootCAs = pool
	}

	t := &Target{source: source, pingTimeout: c.PingTimeout}
	if t.pingTimeout <= 0 {
		t.pingTimeout = DefaultPingTimeout
	}
	if !sentinel {
		t.opts = opts
		t.desc = describe(u, opts)
		return t, nil
	}
	if opts.TLSConfig != nil {
		// ParseURL names the URL's host as the TLS server, "localhost" when there is
		// none; with Sentinel the URL's host is not dialled, so an empty one leaves
		// the dialled host to be verified.
		opts.TLSConfig.ServerName = u.Hostname()
	}
	t.failover = failoverOptions(opts, c.SentinelMaster, c.SentinelAddrs)
	if c.SentinelPasswordFile != "" {
		pw, err := urlsource.ReadTrimmed(c.SentinelPasswordFile)
		if err != nil {
			return nil, fmt.Errorf("--redis-sentinel-password-file %s: %w", c.SentinelPasswordFile, err)
		}
		t.failover.SentinelPassword = pw
	}
	t.desc = fmt.Sprintf("sentinel master %s via %s, db %d", c.SentinelMaster, strings.Join(c.SentinelAddrs, ","), opts.DB)
	if opts.TLSConfig != nil {
		t.desc += ", tls"
	}
	return t, nil
}

func (c *Config) checkSentinel() error {
	switch {
	case c.SentinelMaster == "" && len(c.SentinelAddrs) > 0:
		return errors.New("--redis-sentinel-addrs needs --redis-sentinel-master")
	case c.SentinelMaster == "" && c.SentinelPasswordFile != "":
		return errors.New("--redis-sentinel-password-file needs --redis-sentinel-master")
	case len(c.SentinelAddrs) == 0:
		return fmt.Errorf("--redis-sentinel-master %s needs --redis-sentinel-addrs", c.SentinelMaster)
	}
	for _, a := range c.SentinelAddrs {
		if err := checkAddr(a); err != nil {
			return fmt.Errorf("--redis-sentinel-addrs: %w", err)
		}
	}
	return nil
}

// rawURL returns the URL and the name of its source; an empty URL when none is set.
func (c *Config) rawURL(getenv func(string) string) (source, raw string, err error) {
	raw, source, err = urlsource.Sources{What: "Redis", Flag: c.URL, FlagName: "--redis-url",
		File: c.URLFile, FileName: "--redis-url-file", Env: EnvURL}.Resolve(getenv)
	return source, raw, err
}

func readCAs(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--redis-ca-file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("--redis-ca-file %s: no PEM certificate in it", path)
	}
	return pool, nil
}

// errMalformed is every error of a URL that url.Parse refuses or that would put part
// of the password in a message. url.Parse quotes what it refuses, which can be part of
// the password; so does go-redis when an unescaped '/', '?' or '#' in the password
// moves the rest of it into the URL's path or query.
var errMalformed = errors.New("not a valid redis:// or rediss:// URL " +
	"(not shown, since it may hold a password; check the host and port, and percent-encode / ? # @ % in the password)")

// parse parses a redis:// or rediss:// URL with go-redis, keeping the password out of
// every error.
func parse(raw string) (*url.URL, *goredis.Options, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Opaque != "" {
		return nil, nil, errMalformed
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return nil, nil, errors.New("the URL's scheme must be redis:// or rediss://")
	}
	// The '@' that ends the user information sits in the path, query or fragment when
	// the password holds an unescaped delimiter.
	if strings.Contains(u.EscapedPath(), "@") || strings.Contains(u.RawQuery, "@") || strings.Contains(u.Fragment, "@") {
		return nil, nil, errMalformed
	}
	// From here on go-redis's messages quote only the path and the query.
	opts, err := goredis.ParseURL(raw)
	if err != nil {
		return nil, nil, err
	}
	return u, opts, nil
}

// describe is the URL without its password, query or fragment.
func describe(u *url.URL, o *goredis.Options) string {
	var b strings.Builder
	b.WriteString(u.Scheme)
	b.WriteString("://")
	if o.Username != "" || o.Password != "" {
		b.WriteString(url.User(o.Username).String())
		if o.Password != "" {
			b.WriteString(":***")
		}
		b.WriteString("@")
	}
	b.WriteString(o.Addr)
	b.WriteString("/")
	b.WriteString(strconv.Itoa(o.DB))
	return b.String()
}

// failoverOptions carries what ParseURL read from the URL over to a failover client of
// master through the Sentinels at addrs.
func failoverOptions(o *goredis.Options, master string, addrs []string) *goredis.FailoverOptions {
	return &goredis.FailoverOptions{
		MasterName:    master,
		SentinelAddrs: addrs,

		ClientName: o.ClientName,
		Protocol:   o.Protocol,
		Username:   o.Username,
		Password:   o.Password,
		DB:         o.DB,

		MaxRetries:      o.MaxRetries,
		MinRetryBackoff: o.MinRetryBackoff,
		MaxRetryBackoff: o.MaxRetryBackoff,

		DialTimeout:  o.DialTimeout,
		ReadTimeout:  o.ReadTimeout,
		WriteTimeout: o.WriteTimeout,

		PoolFIFO:              o.PoolFIFO,
		PoolSize:              o.PoolSize,
		PoolTimeout:           o.PoolTimeout,
		MinIdleConns:          o.MinIdleConns,
		MaxIdleConns:          o.MaxIdleConns,
		MaxActiveConns:        o.MaxActiveConns,
		MaxConcurrentDials:    o.MaxConcurrentDials,
		ConnMaxIdleTime:       o.ConnMaxIdleTime,
		ConnMaxLifetime:       o.ConnMaxLifetime,
		ConnMaxLifetimeJitter: o.ConnMaxLifetimeJitter,

		PipelinePoolSize:        o.PipelinePoolSize,
		PipelineReadBufferSize:  o.PipelineReadBufferSize,
		PipelineWriteBufferSize: o.PipelineWriteBufferSize,

		TLSConfig: o.TLSConfig,
	}
}

// Connect makes the client and checks, within the ping timeout, that Redis answers and
// is not a Redis Cluster node, which the runtime does not support (spec/redis.md). The
// caller closes the client.
func (t *Target) Connect(ctx context.Context) (goredis.UniversalClient, error) {
	var client *goredis.Client
	if t.failover != nil {
		client = goredis.NewFailoverClient(t.failover)
	} else {
		client = goredis.NewClient(t.opts)
	}
	if err := t.check(ctx, client); err != nil {
		_ = client.Close()
		if t.source == "" {
			return nil, fmt.Errorf("redis %s (no URL): %w", t.desc, err)
		}
		return nil, fmt.Errorf("redis %s (URL from %s): %w", t.desc, t.source, err)
	}
	return client, nil
}

func (t *Target) check(ctx context.Context, client *goredis.Client) error {
	pctx, cancel := context.WithTimeout(ctx, t.pingTimeout)
	defer cancel()
	if err := client.Ping(pctx).Err(); err != nil {
		var report string
		if t.failover != nil && ctx.Err() == nil {
			report = " (" + t.askSentinels(ctx) + ")"
		}
		if ctx.Err() == nil && pctx.Err() != nil {
			return fmt.Errorf("no answer to PING within %s%s: %w", t.pingTimeout, report, err)
		}
		return fmt.Errorf("ping%s: %w", report, err)
	}
	// Some managed Redis services refuse INFO; only a positive answer counts.
	info, err := client.Info(pctx, "cluster").Result()
	if err == nil && strings.Contains(info, "cluster_enabled:1") {
		return errors.New("it is a Redis Cluster node, which the runtime does not support: use a standalone Redis or Sentinel")
	}
	return nil
}

// sentinelTimeout bounds each question of askSentinels.
const sentinelTimeout = time.Second

// askSentinels asks every Sentinel where the master is, for an error message that says
// why a failover client got no answer: it retries until the deadline and then reports
// only that.
func (t *Target) askSentinels(ctx context.Context) string {
	o := t.failover
	answers := make([]string, len(o.SentinelAddrs))
	var wg sync.WaitGroup
	for i, addr := range o.SentinelAddrs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, sentinelTimeout)
			defer cancel()
			s := goredis.NewSentinelClient(&goredis.Options{
				Addr:          addr,
				Username:      o.SentinelUsername,
				Password:      o.SentinelPassword,
				TLSConfig:     o.TLSConfig,
				DialTimeout:   sentinelTimeout,
				DialerRetries: 1,
				MaxRetries:    -1,
			})
			defer s.Close()
			hp, err := s.GetMasterAddrByName(ctx, o.MasterName).Result()
			switch {
			case errors.Is(err, goredis.Nil):
				answers[i] = fmt.Sprintf("sentinel %s does not know master %s", addr, o.MasterName)
			case err != nil:
				answers[i] = fmt.Sprintf("sentinel %s: %v", addr, err)
			case len(hp) != 2:
				answers[i] = fmt.Sprintf("sentinel %s: unexpected answer %q", addr, hp)
			default:
				answers[i] = fmt.Sprintf("sentinel %s names %s as master %s", addr, net.JoinHostPort(hp[0], hp[1]), o.MasterName)
			}
		})
	}
	wg.Wait()
	return strings.Join(answers, "; ")
}
