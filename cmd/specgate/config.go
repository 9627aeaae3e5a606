package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/specgate/specgate/gateway"
	"github.com/specgate/specgate/medusa"
)

func init() {
	register("config", "config check FILE (what serve would refuse, with key and line) | config default (print the default config)", runConfig)
}

const configUsage = `usage: specgate config check FILE   check FILE as serve would load it: YAML keys and
                                    types, values, model and draft directories (relative
                                    to FILE), key_env variables, the data directory;
                                    every problem with its key and line; exit 1 if any
       specgate config default      print the default config (what serve uses without --config)
`

var errUsageConfig = usageError("usage: specgate config check FILE | specgate config default")

func runConfig(args []string) error {
	fs := flag.NewFlagSet("config", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), configUsage) }
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		fs.Usage()
		return errUsageConfig
	}
	switch pos[0] {
	case "check":
		if len(pos) != 2 {
			return errUsageConfig
		}
		return configCheck(pos[1], os.Getenv)
	case "default":
		b, err := yaml.Marshal(gateway.DefaultConfig())
		if err != nil {
			return err
		}
		_, err = os.Stdout.Write(b)
		return err
	}
	return errUsageConfig
}

// configCheck loads path exactly as serve --config does and reports every
// problem serve would refuse, each with its key and line.
func configCheck(path string, getenv func(string) string) error {
	cfg, err := gateway.LoadConfigFile(path)
	if err != nil {
		return err
	}
	if err := cfg.ApplyEnv(getenv); err != nil {
		return gateway.AnnotateConfigError(path, fmt.Errorf("%s (after environment overrides): %w", path, err))
	}
	if errs := cfg.Preflight(getenv); len(errs) > 0 {
		return gateway.ConfigProblems(path, errs)
	}
	var warn []string
	for i, u := range cfg.Upstreams {
		if u.APIKeyEnv != "" && getenv(u.APIKeyEnv) == "" {
			warn = append(warn, fmt.Sprintf("upstreams[%d].api_key_env: %s is not set; requests to %s go without a key", i, u.APIKeyEnv, u.Name))
		}
	}
	for _, w := range gateway.AnnotateKeyErrors(path, toErrors(warn)) {
		fmt.Printf("%s: warning: %v\n", path, w)
	}
	var models []string
	for _, m := range cfg.Models {
		s := m.Name + " = " + m.Path
		if m.Speculative.Method != "none" {
			dir := m.Draft
			if m.Speculative.Method == "medusa" {
				dir = m.MedusaHeads()
				if medusa.Kind(dir) == "hydra" {
					dir += " [Hydra heads]"
				}
			}
			s += " (" + m.Speculative.Method + " " + dir + ", " + strings.TrimPrefix(m.Speculative.Mode(), m.Speculative.Method+" ") + ")"
		}
		models = append(models, s)
	}
	fmt.Printf("%s: ok: listen %s; %d models [%s]; %d upstreams; %d api keys; cache store %s, index %s, embedder %s\n",
		path, cfg.Server.Addr, len(cfg.Models), strings.Join(models, "; "), len(cfg.Upstreams), len(cfg.Auth.Keys), cfg.Cache.Store, cfg.Cache.Index, cfg.Cache.Embedder)
	return nil
}

func toErrors(msgs []string) []error {
	out := make([]error, len(msgs))
	for i, m := range msgs {
		out[i] = fmt.Errorf("%s", m)
	}
	return out
}
