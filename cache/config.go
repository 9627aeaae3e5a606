package cache

import (
	"errors"
	"fmt"
	"time"
)

// ErrConfig reports an invalid cache configuration.
var ErrConfig = errors.New("cache: invalid config")

// DefaultThreshold is the default cosine threshold of the semantic tier for
// the built-in lexical embedder, chosen on the train split of
// testdata/paraphrases.jsonl (see docs/cache.md and `specgate cache-eval`).
const DefaultThreshold float32 = 0.55

// NamespaceConfig holds the per-tenant knobs. In Config.Tenants a zero field
// inherits the value of Config.Default.
type NamespaceConfig struct {
	// Threshold is the minimum cosine similarity for a semantic hit, in (0, 1].
	// A value above 1 disables the semantic tier.
	Threshold float32 `yaml:"threshold" json:"threshold"`
	// TTL of stored entries; 0 = no expiry.
	TTL time.Duration `yaml:"ttl" json:"ttl"`
	// MaxEntries and MaxBytes bound each namespace; 0 = unbounded.
	MaxEntries int   `yaml:"max_entries" json:"max_entries"`
	MaxBytes   int64 `yaml:"max_bytes" json:"max_bytes"`
	// Policy names the eviction policy: "lru" (default), "lfu", "fifo",
	// "s3fifo", "wtinylfu", "gdsf" (package policy).
	Policy string `yaml:"policy" json:"policy"`
	// AllowTemperature lets requests with temperature > 0 be served from and
	// stored in the cache. In a tenant override, true enables it; false
	// inherits the default.
	AllowTemperature bool `yaml:"allow_temperature" json:"allow_temperature"`
}

// Config configures a Cache.
type Config struct {
	Default NamespaceConfig `yaml:"default" json:"default"`
	// Tenants overrides Default per tenant name.
	Tenants map[string]NamespaceConfig `yaml:"tenants" json:"tenants"`
	// KeyMode selects the key text; "" = KeyLastUser.
	KeyMode KeyMode `yaml:"key_mode" json:"key_mode"`
	// CaseFold folds case in the exact-tier normalization.
	CaseFold bool `yaml:"case_fold" json:"case_fold"`
	// DisableSemantic turns off the vector tier (exact tier only).
	DisableSemantic bool `yaml:"disable_semantic" json:"disable_semantic"`
	// DisableGuard turns off the false-positive guard (not recommended).
	DisableGuard bool `yaml:"disable_guard" json:"disable_guard"`
	// TopK is how many neighbours the semantic tier checks; 0 = 4.
	TopK int `yaml:"top_k" json:"top_k"`
	// MaxKeyBytes bounds the key text; longer requests bypass the cache. 0 = 32 KiB.
	MaxKeyBytes int `yaml:"max_key_bytes" json:"max_key_bytes"`
	// MaxResponseBytes bounds stored responses; larger ones are not stored. 0 = 4 MiB.
	MaxResponseBytes int `yaml:"max_response_bytes" json:"max_response_bytes"`
	// SweepInterval is how often expired entries are purged; 0 = 1 minute.
	SweepInterval time.Duration `yaml:"sweep_interval" json:"sweep_interval"`
	// HotBytes bounds the in-memory hot tier in front of the store (all
	// namespaces together): hot entries are served without a store read,
	// with their response pre-rendered. 0 = DefaultHotBytes; negative = off.
	HotBytes int64 `yaml:"hot_bytes" json:"hot_bytes"`
	// HotPolicy is the hot tier's eviction policy (package policy names);
	// "" = "s3fifo".
	HotPolicy string `yaml:"hot_policy" json:"hot_policy"`
}

// DefaultHotBytes is the default bound of the hot tier (128 MiB).
const DefaultHotBytes = 128 << 20

// DefaultConfig returns the recommended configuration.
func DefaultConfig() Config {
	return Config{
		Default: NamespaceConfig{Threshold: DefaultThreshold, Policy: "lru"},
	}
}

func (c *Config) withDefaults() {
	if c.Default.Threshold == 0 {
		c.Default.Threshold = DefaultThreshold
	}
	if c.Default.Policy == "" {
		c.Default.Policy = "lru"
	}
	if c.KeyMode == "" {
		c.KeyMode = KeyLastUser
	}
	if c.TopK == 0 {
		c.TopK = 4
	}
	if c.MaxKeyBytes == 0 {
		c.MaxKeyBytes = 32 << 10
	}
	if c.MaxResponseBytes == 0 {
		c.MaxResponseBytes = 4 << 20
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = time.Minute
	}
	if c.HotBytes == 0 {
		c.HotBytes = DefaultHotBytes
	}
	if c.HotPolicy == "" {
		c.HotPolicy = "s3fifo"
	}
}

func (n NamespaceConfig) validate(field string) error {
	if n.Threshold < 0 {
		return fmt.Errorf("%w: %s.threshold %v < 0", ErrConfig, field, n.Threshold)
	}
	if n.TTL < 0 || n.MaxEntries < 0 || n.MaxBytes < 0 {
		return fmt.Errorf("%w: %s: negative ttl, max_entries or max_bytes", ErrConfig, field)
	}
	if n.Policy != "" && !knownPolicy(n.Policy) {
		return fmt.Errorf("%w: %s.policy %q unknown", ErrConfig, field, n.Policy)
	}
	return nil
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	if err := c.Default.validate("default"); err != nil {
		return err
	}
	for t, n := range c.Tenants {
		if err := n.validate("tenants." + t); err != nil {
			return err
		}
	}
	switch c.KeyMode {
	case "", KeyLastUser, KeyConversation:
	default:
		return fmt.Errorf("%w: key_mode %q (want %q or %q)", ErrConfig, c.KeyMode, KeyLastUser, KeyConversation)
	}
	if c.TopK < 0 || c.TopK > 64 {
		return fmt.Errorf("%w: top_k %d not in [0, 64]", ErrConfig, c.TopK)
	}
	if c.HotPolicy != "" && !knownPolicy(c.HotPolicy) {
		return fmt.Errorf("%w: hot_policy %q unknown", ErrConfig, c.HotPolicy)
	}
	if c.MaxKeyBytes < 0 || c.MaxResponseBytes < 0 || c.SweepInterval < 0 {
		return fmt.Errorf("%w: negative max_key_bytes, max_response_bytes or sweep_interval", ErrConfig)
	}
	return nil
}

// For returns the effective configuration of a tenant.
func (c *Config) For(tenant string) NamespaceConfig {
	n := c.Default
	o, ok := c.Tenants[tenant]
	if !ok {
		return n
	}
	if o.Threshold != 0 {
		n.Threshold = o.Threshold
	}
	if o.TTL != 0 {
		n.TTL = o.TTL
	}
	if o.MaxEntries != 0 {
		n.MaxEntries = o.MaxEntries
	}
	if o.MaxBytes != 0 {
		n.MaxBytes = o.MaxBytes
	}
	if o.Policy != "" {
		n.Policy = o.Policy
	}
	n.AllowTemperature = n.AllowTemperature || o.AllowTemperature
	return n
}
