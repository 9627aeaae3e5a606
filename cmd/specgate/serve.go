package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/specgate/specgate/cache"
	"github.com/specgate/specgate/gateway"
)

func init() {
	register("serve", "run the OpenAI-compatible gateway: serve [MODEL_DIR] [--draft DIR] [--addr HOST:PORT] [--config FILE]; the default command", runServe)
}

func newLogger(cfg *gateway.Config, w io.Writer) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(cfg.Server.LogLevel))
	opts := &slog.HandlerOptions{Level: lvl}
	if cfg.Server.LogFormat == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

func runServe(args []string) error {
	f, err := parseServeFlags(args)
	if err != nil {
		return err
	}
	cfg, err := buildServeConfig(f, os.Getenv)
	if err != nil {
		return err
	}
	if errs := cfg.Preflight(os.Getenv); len(errs) > 0 {
		return gateway.ConfigProblems(f.config, errs)
	}
	log := newLogger(cfg, os.Stderr)
	reg := prometheus.NewRegistry()

	stopProgress := loadingProgress(os.Stderr, cfg)
	models, closeModels, err := loadModels(cfg, log)
	stopProgress(err)
	if err != nil {
		return err
	}
	defer closeModels()

	opts := gateway.Options{Config: cfg, Models: models, Registry: reg, Logger: log}
	if cfg.Cache.CacheEnabled() {
		c, emb, closeCache, err := gateway.OpenCache(cfg, reg, log)
		if err != nil {
			return err
		}
		defer closeCache()
		opts.Cache = c
		opts.Embedders = map[string]cache.Embedder{cfg.Cache.EmbeddingModel: emb}
	}
	srv, err := gateway.New(opts)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Server.Addr)
	if err != nil {
		return fmt.Errorf("serve: listen %s: %w", cfg.Server.Addr, err)
	}
	log.Info("specgate listening", "addr", ln.Addr().String(), "models", len(models), "upstreams", len(cfg.Upstreams), "cache", cfg.Cache.CacheEnabled())
	announce(os.Stderr, ln, cfg)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	defer signal.Stop(sig)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case s := <-sig:
		log.Info("shutting down", "signal", s.String(), "deadline", cfg.Server.ShutdownTimeout.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Server.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		log.Warn("shutdown incomplete", "err", err)
	}
	log.Info("stopped")
	return nil
}

// loadModels loads every configured local model and starts its engine
// (gateway.LoadModels; tests adjust the engines through testEngineOptions).
func loadModels(cfg *gateway.Config, log *slog.Logger) ([]*gateway.LocalModel, func(), error) {
	return gateway.LoadModels(cfg, gateway.LoadOptions{Logger: log, EngineOptions: testEngineOptions})
}
