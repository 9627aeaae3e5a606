package main

import (
	"errors"
	"fmt"
	"os"

	"gopkg.in/yaml.v3"

	"github.com/specgate/specgate/gateway"
)

func init() {
	register("config", "config check FILE (validate; names a bad key and its line) | config default (print the default config)", runConfig)
}

var errUsageConfig = errors.New("usage: specgate config check FILE | specgate config default")

func runConfig(args []string) error {
	if len(args) == 0 {
		return errUsageConfig
	}
	switch args[0] {
	case "check":
		if len(args) != 2 {
			return errUsageConfig
		}
		cfg, err := gateway.LoadConfig(args[1])
		if err != nil {
			return err
		}
		if err := cfg.ApplyEnv(os.Getenv); err != nil {
			return fmt.Errorf("%s (after environment overrides): %w", args[1], err)
		}
		fmt.Printf("%s: ok (%d models, %d upstreams, %d api keys, cache store %s, index %s, embedder %s)\n",
			args[1], len(cfg.Models), len(cfg.Upstreams), len(cfg.Auth.Keys), cfg.Cache.Store, cfg.Cache.Index, cfg.Cache.Embedder)
		return nil
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
