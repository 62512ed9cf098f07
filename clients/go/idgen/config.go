// Config of a Router and its defaults (docs/routing-protocol.md §5: retry_limit,
// refresh_interval, LISTEN).
//
// Invariant: a zero field means its default, so Config{Routes: ..., Shards: ...} is a working
// configuration; the settings whose zero is a meaningful value of their own say how to ask for
// it (Retries(0), NoRefreshPoll, NoListen).

package idgen

import (
	"errors"
	"time"

	"github.com/jackc/pgx/v4/pgxpool"
)

// Defaults of the Config fields left zero.
const (
	DefaultRetryLimit         = 20
	DefaultRefreshInterval    = time.Second
	DefaultBackoffBase        = 5 * time.Millisecond
	DefaultBackoffMax         = 200 * time.Millisecond
	DefaultMaxConns           = 8
	DefaultConnectTimeout     = 10 * time.Second
	DefaultCoordinatorTimeout = 10 * time.Second
	DefaultShardTimeout       = 60 * time.Second
)

// NoRefreshPoll as Config.RefreshInterval turns the version poll off (LISTEN only).
const NoRefreshPoll time.Duration = -1

// Config of a Router.
type Config struct {
	// Routes is the coordinator's DSN (libpq key=value, or a postgres:// URL).
	Routes string
	// Shards maps each shard name (as id_gen.route_map names it) to its DSN.
	Shards map[string]string
	// RetryLimit is the number of retries after the first attempt (nil: 20). Retries(0) makes
	// one attempt.
	RetryLimit *int
	// RefreshInterval is the time between polls of the route version besides LISTEN (0: 1 s;
	// NoRefreshPoll: no poll).
	RefreshInterval time.Duration
	// NoListen: do not LISTEN on id_gen_routes (a coordinator reached through a
	// transaction-mode pooler); the poll alone then notices route changes.
	NoListen bool
	// BackoffBase and BackoffMax: the wait before retry n is min(base * 2^n, max), jittered
	// (0: 5 ms and 200 ms).
	BackoffBase, BackoffMax time.Duration
	// MaxConns is the size of each shard's pool (0: 8).
	MaxConns int
	// ConnectTimeout bounds each connect, where the DSN sets no connect_timeout (0: 10 s).
	ConnectTimeout time.Duration
	// CoordinatorTimeout bounds each route read, version poll and LISTEN (0: 10 s).
	CoordinatorTimeout time.Duration
	// ShardTimeout bounds what the router itself sends to a shard or waits for there: a free
	// connection, the probe of the claim form, the claim, COMMIT, ROLLBACK and Execute's
	// statement (0: 60 s). A shard that does not answer within it counts as a lost connection
	// (retried before COMMIT was sent, ErrCommitOutcomeUnknown after); no free connection within
	// it is returned, not retried. The body's own statements run under the caller's context
	// alone.
	ShardTimeout time.Duration
	// ConfigureShardPool, when set, adjusts each shard's pool configuration after the router
	// made it (for example to use prepared statements on direct connections).
	ConfigureShardPool func(shard string, config *pgxpool.Config)
}

// Retries is a RetryLimit of n retries (Retries(0): one attempt, no retry).
func Retries(n int) *int { return &n }

// settings are a Config with its defaults filled in.
type settings struct {
	Config
	retryLimit int
}

func (c Config) settings() (settings, error) {
	if c.Routes == "" {
		return settings{Config: c}, errors.New("idgen: Config.Routes (the coordinator's DSN) is required")
	}
	if len(c.Shards) == 0 {
		return settings{Config: c}, errors.New("idgen: Config.Shards (shard name to DSN) is required")
	}
	return c.withDefaults()
}

// withDefaults is c with its zero fields defaulted and checked; Routes and Shards may be empty.
func (c Config) withDefaults() (settings, error) {
	s := settings{Config: c, retryLimit: DefaultRetryLimit}
	if c.RetryLimit != nil {
		if *c.RetryLimit < 0 {
			return s, errors.New("idgen: Config.RetryLimit counts retries after the first attempt: 0 or more")
		}
		s.retryLimit = *c.RetryLimit
	}
	orDefault := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		}
	}
	orDefault(&s.RefreshInterval, DefaultRefreshInterval)
	orDefault(&s.BackoffBase, DefaultBackoffBase)
	orDefault(&s.BackoffMax, DefaultBackoffMax)
	orDefault(&s.ConnectTimeout, DefaultConnectTimeout)
	orDefault(&s.CoordinatorTimeout, DefaultCoordinatorTimeout)
	orDefault(&s.ShardTimeout, DefaultShardTimeout)
	if s.MaxConns == 0 {
		s.MaxConns = DefaultMaxConns
	}
	if s.BackoffBase < 0 || s.BackoffMax < s.BackoffBase || s.MaxConns < 0 || s.ConnectTimeout < 0 ||
		s.CoordinatorTimeout < 0 || s.ShardTimeout < 0 || (s.RefreshInterval < 0 && s.RefreshInterval != NoRefreshPoll) {
		return s, errors.New("idgen: a negative duration or size in Config (or BackoffMax below BackoffBase)")
	}
	return s, nil
}
