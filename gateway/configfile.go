package gateway

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
)

// The config file as serve and config check load it: paths relative to
// the file, every error with the file, its key and line (configlines.go),
// and the checks across sections that need the file system or the
// environment (Preflight).

// LoadConfigFile is LoadConfig with the file's model, draft, Medusa heads
// and BERT paths resolved against the file's directory (as a user reading
// the file expects; data_dir and the cache's file paths stay relative to
// the working directory) and its errors annotated with the line of the key
// they name.
func LoadConfigFile(path string) (*Config, error) {
	c, err := LoadConfig(path)
	if err != nil {
		return nil, AnnotateConfigError(path, err)
	}
	c.resolvePaths(filepath.Dir(path))
	return c, nil
}

// resolvePaths makes the model, draft, Medusa heads and BERT paths
// relative to dir absolute.
func (c *Config) resolvePaths(dir string) {
	abs := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		if a, err := filepath.Abs(filepath.Join(dir, p)); err == nil {
			return a
		}
		return filepath.Join(dir, p)
	}
	for i := range c.Models {
		c.Models[i].Path = abs(c.Models[i].Path)
		c.Models[i].Draft = abs(c.Models[i].Draft)
		c.Models[i].Speculative.Heads = abs(c.Models[i].Speculative.Heads)
	}
	c.Cache.Bert.Path = abs(c.Cache.Bert.Path)
}

// Preflight checks what serve needs before it loads anything and returns
// every problem found (not just the first), each naming its config key:
// each model's directories (serving's ModelConfig.Check); key_env
// variables set (getenv: os.Getenv); the BERT directory; the data
// directory creatable; Milvus compiled in when the index is milvus; a port
// in server.addr. serve refuses the config when this returns errors.
func (c *Config) Preflight(getenv func(string) string) []error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	for i, m := range c.Models {
		errs = append(errs, m.Check(fmt.Sprintf("models[%d]", i))...)
	}
	for i, k := range c.Auth.Keys {
		if k.KeyEnv != "" && getenv(k.KeyEnv) == "" {
			add("auth.keys[%d].key_env: environment variable %s is not set", i, k.KeyEnv)
		}
	}
	if c.Cache.CacheEnabled() && c.Cache.Embedder == "bert" {
		if st, err := os.Stat(c.Cache.Bert.Path); err != nil || !st.IsDir() {
			add("cache.bert.path: %s: directory not found", c.Cache.Bert.Path)
		}
	}
	if c.Cache.CacheEnabled() && c.Cache.Store == "sqlite" && c.Cache.SQLite.Path == "" {
		if err := creatableDir(c.Server.DataDir); err != nil {
			add("server.data_dir: %s: %v", c.Server.DataDir, err)
		}
	}
	if c.Cache.CacheEnabled() && c.Cache.Index == "milvus" {
		if err := MilvusSupport(); err != nil {
			add("cache.index: milvus: %v", err)
		}
	}
	if _, port, err := net.SplitHostPort(c.Server.Addr); err == nil && port == "" {
		add("server.addr: %q has no port", c.Server.Addr)
	}
	return errs
}

// creatableDir reports whether dir exists as a directory or could be made
// (its nearest existing ancestor is a directory).
func creatableDir(dir string) error {
	for d := dir; ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err == nil {
			if !st.IsDir() {
				return fmt.Errorf("%s is not a directory", d)
			}
			return nil
		}
		if filepath.Dir(d) == d {
			return err
		}
	}
}

// ConfigProblems is the error of a config with problems (Preflight's):
// one per line under a heading naming file ("" when the config came from
// flags), each prefixed with its key's line in file.
func ConfigProblems(file string, errs []error) error {
	if file != "" {
		errs = AnnotateKeyErrors(file, errs)
	}
	var b strings.Builder
	if file != "" {
		fmt.Fprintf(&b, "%s: ", file)
	}
	fmt.Fprintf(&b, "%d problem(s):", len(errs))
	for _, e := range errs {
		fmt.Fprintf(&b, "\n  %v", e)
	}
	return errors.New(b.String())
}
