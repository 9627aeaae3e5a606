package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/specgate/specgate/cache"
	"github.com/specgate/specgate/serving"
)

// Config is the whole specgate configuration: one YAML file, then the
// environment overrides SPECGATE_ADDR, SPECGATE_DATA_DIR and
// SPECGATE_API_KEYS ("key1=tenantA,key2=tenantB").
type Config struct {
	Server    ServerConfig     `yaml:"server"`
	Auth      AuthConfig       `yaml:"auth"`
	Models    []ModelConfig    `yaml:"models"`
	Upstreams []UpstreamConfig `yaml:"upstreams"`
	Cache     CacheConfig      `yaml:"cache"`
}

// ServerConfig is the HTTP server section.
type ServerConfig struct {
	Addr            string        `yaml:"addr"`
	DataDir         string        `yaml:"data_dir"`
	MaxBodyBytes    int           `yaml:"max_body_bytes"`
	ReadTimeout     time.Duration `yaml:"read_timeout"`
	IdleTimeout     time.Duration `yaml:"idle_timeout"`
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	MaxN            int           `yaml:"max_n"`
	LogLevel        string        `yaml:"log_level"`  // debug|info|warn|error
	LogFormat       string        `yaml:"log_format"` // json|text
	CORS            CORSConfig    `yaml:"cors"`       // cors.go
}

// AuthConfig lists API keys. With no keys, requests need no key and belong
// to the tenant "default".
type AuthConfig struct {
	Keys []KeyConfig `yaml:"keys"`
	// Defaults apply to keys that set no limit of their own (and to
	// SPECGATE_API_KEYS keys).
	Defaults Limits `yaml:"defaults"`
	// AdminKey (or the environment variable named by AdminKeyEnv, or
	// SPECGATE_ADMIN_KEY) protects the operator endpoints: /metrics,
	// /stats, /stats/history and the dashboard. Send it as a bearer token
	// (Prometheus: authorization.credentials) or as the password of HTTP
	// Basic auth (browsers prompt for it). With API keys configured and no
	// admin key those endpoints are closed (401), unless PublicMetrics is
	// set; with neither they are open.
	AdminKey      string `yaml:"admin_key"`
	AdminKeyEnv   string `yaml:"admin_key_env"`
	PublicMetrics bool   `yaml:"public_metrics"`
}

// KeyConfig is one API key. Either Key or KeyEnv (the name of an
// environment variable holding the key) is set.
type KeyConfig struct {
	Key    string  `yaml:"key"`
	KeyEnv string  `yaml:"key_env"`
	Tenant string  `yaml:"tenant"`
	Limits *Limits `yaml:"limits"`
}

// Limits are per-key rate limits; 0 = unlimited.
type Limits struct {
	RequestsPerSecond float64 `yaml:"requests_per_second"`
	Burst             int     `yaml:"burst"`
	TokensPerMinute   int     `yaml:"tokens_per_minute"`
}

// ModelConfig is one local model: the `models:` section is owned by
// package serving (its fields, defaults, validation and the loading it
// configures).
type ModelConfig = serving.ModelConfig

// SpeculativeConfig is a model's `speculative:` section (serving).
type SpeculativeConfig = serving.SpeculativeConfig

// DraftsConfig is a model's `drafts:` section (serving).
type DraftsConfig = serving.DraftsConfig

// UpstreamConfig is one OpenAI-compatible server the gateway fronts.
type UpstreamConfig struct {
	Name      string            `yaml:"name"`
	BaseURL   string            `yaml:"base_url"` // e.g. https://api.example.com/v1
	APIKeyEnv string            `yaml:"api_key_env"`
	Models    []string          `yaml:"models"`
	Aliases   map[string]string `yaml:"aliases"` // alias -> upstream model name
	// Timeout bounds the wait for the upstream's response headers, once
	// per request: retries and backoff included (JSON and streams alike).
	Timeout time.Duration `yaml:"timeout"`
	// IdleTimeout bounds every wait for more of the body once the headers
	// arrived: between stream events, or within a JSON body (default 60s).
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	Retries     int           `yaml:"retries"`
	Backoff     time.Duration `yaml:"backoff"` // first retry delay; doubles each retry
	// DefaultMaxTokens is the completion length reserved from a key's
	// tokens-per-minute budget when a request gives no max_tokens
	// (default 1024); the reservation is settled with the upstream's usage.
	DefaultMaxTokens int `yaml:"default_max_tokens"`
}

// CacheConfig is the `cache:` section, owned by the cache package
// (cache.Section: its fields, defaults and validation).
type CacheConfig = cache.Section

// DefaultModelPath is the shipped target model, served when no config names a model.
const DefaultModelPath = "models/specgate-target"

// DefaultConfig is what `specgate serve` uses without --config: the shipped
// target model on CPU at 127.0.0.1:8080 and an SQLite cache in ./data.
func DefaultConfig() *Config {
	c := &Config{}
	c.Models = []ModelConfig{{Name: "specgate-target", Path: DefaultModelPath, Backend: "cpu"}}
	c.applyDefaults()
	return c
}

func (c *Config) applyDefaults() {
	s := &c.Server
	if s.Addr == "" {
		s.Addr = "127.0.0.1:8080"
	}
	if s.DataDir == "" {
		s.DataDir = "./data"
	}
	if s.MaxBodyBytes == 0 {
		s.MaxBodyBytes = 4 << 20
	}
	if s.ReadTimeout == 0 {
		s.ReadTimeout = 60 * time.Second
	}
	if s.IdleTimeout == 0 {
		s.IdleTimeout = 120 * time.Second
	}
	if s.ShutdownTimeout == 0 {
		s.ShutdownTimeout = 30 * time.Second
	}
	if s.MaxN == 0 {
		s.MaxN = 8
	}
	if s.LogLevel == "" {
		s.LogLevel = "info"
	}
	if s.LogFormat == "" {
		s.LogFormat = "json"
	}
	for i := range c.Models {
		c.Models[i].ApplyDefaults()
	}
	for i := range c.Upstreams {
		u := &c.Upstreams[i]
		if u.Timeout == 0 {
			u.Timeout = 120 * time.Second
		}
		if u.Backoff == 0 {
			u.Backoff = 100 * time.Millisecond
		}
		if u.IdleTimeout == 0 {
			u.IdleTimeout = 60 * time.Second
		}
		if u.DefaultMaxTokens == 0 {
			u.DefaultMaxTokens = 1024
		}
	}
	c.Cache.ApplyDefaults()
}

// LoadConfig reads and validates a YAML config file, then applies the
// environment overrides. Unknown keys are errors that name the key and its
// line.
func LoadConfig(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", path, ErrConfig, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 1<<20+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", path, ErrConfig, err)
	}
	if len(data) > 1<<20 {
		return nil, fmt.Errorf("%s: %w: file exceeds 1 MiB", path, ErrConfig)
	}
	c, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ParseConfig decodes YAML strictly (unknown keys are errors), applies
// defaults and validates. It does not read the environment; call
// ApplyEnv for that.
func ParseConfig(data []byte) (*Config, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	c := &Config{}
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: %s", ErrConfig, cleanYAMLError(err))
	}
	c.applyDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// cleanYAMLError turns yaml.v3's "field x not found in type gateway.T" into
// "unknown key x".
func cleanYAMLError(err error) string {
	msg := err.Error()
	msg = strings.TrimPrefix(msg, "yaml: unmarshal errors:\n")
	lines := strings.Split(msg, "\n")
	for i, l := range lines {
		l = strings.TrimSpace(l)
		if j := strings.Index(l, ": field "); j >= 0 && strings.Contains(l, " not found in type ") {
			key := l[j+len(": field "):]
			key = key[:strings.Index(key, " not found in type ")]
			l = l[:j] + ": unknown key \"" + key + "\""
		}
		lines[i] = l
	}
	return strings.Join(lines, "; ")
}

// Complete fills the defaults of a Config built in code and validates it.
func (c *Config) Complete() error {
	c.applyDefaults()
	return c.Validate()
}

// ApplyEnv applies SPECGATE_ADDR, SPECGATE_DATA_DIR and SPECGATE_API_KEYS
// from getenv (os.Getenv in production).
func (c *Config) ApplyEnv(getenv func(string) string) error {
	if v := getenv("SPECGATE_ADDR"); v != "" {
		c.Server.Addr = v
	}
	if v := getenv("SPECGATE_DATA_DIR"); v != "" {
		c.Server.DataDir = v
	}
	if v := getenv("SPECGATE_ADMIN_KEY"); v != "" {
		c.Auth.AdminKey, c.Auth.AdminKeyEnv = v, ""
	}
	if v := getenv("SPECGATE_API_KEYS"); v != "" {
		keys, err := ParseAPIKeys(v)
		if err != nil {
			return err
		}
		c.Auth.Keys = append(c.Auth.Keys, keys...)
	}
	return c.Validate()
}

// ParseAPIKeys parses "key1=tenantA,key2=tenantB".
func ParseAPIKeys(s string) ([]KeyConfig, error) {
	var out []KeyConfig
	for i, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, t, ok := strings.Cut(part, "=")
		k, t = strings.TrimSpace(k), strings.TrimSpace(t)
		if !ok || k == "" || t == "" {
			return nil, fmt.Errorf("%w: SPECGATE_API_KEYS entry %d: want key=tenant", ErrConfig, i+1)
		}
		out = append(out, KeyConfig{Key: k, Tenant: t})
	}
	return out, nil
}

// Validate checks cross-field rules and names the offending key. Each
// section is checked by its owner: the server, upstreams and auth sections
// here, the models section by package serving (names and aliases here:
// they are unique across models and upstreams), the cache section by
// package cache.
func (c *Config) Validate() error {
	if err := c.Server.validate(); err != nil {
		return err
	}
	names := map[string]string{}
	claim := func(name, where string) error {
		if name == "" {
			return badConfig("%s: empty model name", where)
		}
		if prev, dup := names[name]; dup {
			return badConfig("%s: model name %q already used by %s", where, name, prev)
		}
		names[name] = where
		return nil
	}
	for i := range c.Models {
		if err := validateModel(&c.Models[i], fmt.Sprintf("models[%d]", i), claim); err != nil {
			return err
		}
	}
	for i := range c.Upstreams {
		if err := c.Upstreams[i].validate(fmt.Sprintf("upstreams[%d]", i), claim); err != nil {
			return err
		}
	}
	if err := c.Auth.validate(); err != nil {
		return err
	}
	if err := c.Cache.Validate(); err != nil {
		var se *cache.SectionError
		if errors.As(err, &se) {
			return badConfig("cache.%s", se.Error())
		}
		return fmt.Errorf("%w: cache: %w", ErrConfig, err)
	}
	return nil
}

// badConfig is a config error naming its key.
func badConfig(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, args...))
}

func (s *ServerConfig) validate() error {
	if _, _, err := net.SplitHostPort(s.Addr); err != nil {
		return badConfig("server.addr %q: want HOST:PORT", s.Addr)
	}
	if s.MaxBodyBytes < 1024 {
		return badConfig("server.max_body_bytes %d: must be at least 1024", s.MaxBodyBytes)
	}
	if s.MaxN < 1 || s.MaxN > 128 {
		return badConfig("server.max_n %d: must be in [1,128]", s.MaxN)
	}
	switch s.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return badConfig("server.log_level %q: want debug|info|warn|error", s.LogLevel)
	}
	switch s.LogFormat {
	case "json", "text":
	default:
		return badConfig("server.log_format %q: want json|text", s.LogFormat)
	}
	return s.CORS.validate()
}

// validateModel claims the entry's name and aliases, then has package
// serving check its values; the messages name the key under where.
func validateModel(m *ModelConfig, where string, claim func(name, where string) error) error {
	if err := claim(m.Name, where+".name"); err != nil {
		return err
	}
	for j, a := range m.Aliases {
		if err := claim(a, fmt.Sprintf("%s.aliases[%d]", where, j)); err != nil {
			return err
		}
	}
	if err := m.Validate(where); err != nil {
		return badConfig("%s", err.Error())
	}
	return nil
}

func (u *UpstreamConfig) validate(where string, claim func(name, where string) error) error {
	bad := badConfig
	if u.Name == "" {
		return bad("%s.name: required", where)
	}
	pu, err := url.Parse(u.BaseURL)
	if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
		return bad("%s.base_url %q: want http(s)://host[/path]", where, u.BaseURL)
	}
	if len(u.Models) == 0 && len(u.Aliases) == 0 {
		return bad("%s.models: list at least one model", where)
	}
	for j, m := range u.Models {
		if err := claim(m, fmt.Sprintf("%s.models[%d]", where, j)); err != nil {
			return err
		}
	}
	for a, target := range u.Aliases {
		if err := claim(a, fmt.Sprintf("%s.aliases.%s", where, a)); err != nil {
			return err
		}
		if target == "" {
			return bad("%s.aliases.%s: empty target model", where, a)
		}
	}
	if u.Retries < 0 || u.Retries > 10 {
		return bad("%s.retries %d: must be in [0,10]", where, u.Retries)
	}
	if u.Timeout < 0 || u.IdleTimeout < 0 {
		return bad("%s: timeout and idle_timeout must be > 0", where)
	}
	if u.DefaultMaxTokens < 0 {
		return bad("%s.default_max_tokens %d: must be >= 0", where, u.DefaultMaxTokens)
	}
	return nil
}

func (a *AuthConfig) validate() error {
	bad := badConfig
	keys := map[string]bool{}
	for i, k := range a.Keys {
		where := fmt.Sprintf("auth.keys[%d]", i)
		if (k.Key == "") == (k.KeyEnv == "") {
			return bad("%s: set exactly one of key and key_env", where)
		}
		if k.Tenant == "" {
			return bad("%s.tenant: required", where)
		}
		if k.Key != "" {
			if keys[k.Key] {
				return bad("%s.key: duplicate key", where)
			}
			keys[k.Key] = true
		}
		if k.Limits != nil {
			if err := k.Limits.validate(where + ".limits"); err != nil {
				return err
			}
		}
	}
	if err := a.Defaults.validate("auth.defaults"); err != nil {
		return err
	}
	if a.AdminKey != "" && a.AdminKeyEnv != "" {
		return bad("auth: set at most one of admin_key and admin_key_env")
	}
	return nil
}

func (l *Limits) validate(where string) error {
	if l.RequestsPerSecond < 0 || l.Burst < 0 || l.TokensPerMinute < 0 {
		return fmt.Errorf("%w: %s: limits must be >= 0", ErrConfig, where)
	}
	return nil
}
