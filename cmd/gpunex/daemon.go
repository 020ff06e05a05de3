package main

// The daemon: `gpunex node run`. This file and gpus.go (local GPU detection) are the only
// ones of the CLI that link the daemon (package node); every client command talks to a
// running node through node/api.

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gpunex/gpunex/node"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/spf13/cobra"
)

func nodeCommand() *cobra.Command {
	c := &cobra.Command{Use: "node", Short: "Run the daemon"}
	var level string
	run := &cobra.Command{
		Use:   "run --home DIR",
		Short: "Run the node in the foreground (logs to stderr; SIGTERM or SIGINT stops it)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runNode(home(cmd), level)
		},
	}
	run.Flags().StringVar(&level, "log-level", "", "override log.level: debug, info, warn, error")
	c.AddCommand(run)
	return c
}

func newLogger(cfg config.LogConfig, override string) (*slog.Logger, error) {
	lvl := cfg.Level
	if override != "" {
		lvl = override
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(lvl)); err != nil {
		return nil, fmt.Errorf("log level %q: use debug, info, warn or error", lvl)
	}
	opts := &slog.HandlerOptions{Level: l}
	if cfg.Format == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
}

func runNode(h config.Home, level string) error {
	// A home of a newer format is refused before anything reads it.
	if err := h.CheckFormat(); err != nil {
		return err
	}
	cfg, err := h.Config()
	if err != nil {
		return err
	}
	if err := h.WriteFormat(api.Version); err != nil {
		return err
	}
	log, err := newLogger(cfg.Log, level)
	if err != nil {
		return err
	}
	key, err := h.Identity()
	if err != nil {
		return err
	}
	token, err := h.Token()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	n, err := node.New(ctx, cfg, key, node.Deps{DataDir: h.Path(config.DataDir), JobsDir: h.Path("jobs"), Logger: log, Home: h.Dir})
	if err != nil {
		return err
	}
	srv, err := n.ServeAPI(cfg.API.Listen, token)
	if err != nil {
		n.Close(context.Background())
		return err
	}
	if err := h.WriteAPIAddr(srv.Addr()); err != nil {
		n.Close(context.Background())
		return err
	}
	log.Info("API listening", "addr", "http://"+srv.Addr(), "metrics", "http://"+srv.Addr()+"/metrics")
	<-ctx.Done()
	log.Info("shutting down")
	h.RemoveAPIAddr()
	// The API and the node each get their own time to stop: a slow API client must not
	// eat the node's time to withdraw its offer and send its reports.
	actx, cancelAPI := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancelAPI()
	srv.Close(actx)
	sctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	if err := n.Close(sctx); err != nil {
		log.Warn("shutdown incomplete", "err", err)
	}
	log.Info("stopped")
	return nil
}
