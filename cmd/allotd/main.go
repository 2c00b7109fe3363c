// Command allotd is the allot node daemon.
//
// Exit codes: 0 after a clean stop, 1 on an error, 3 when the store file is unusable
// (damaged, truncated, foreign or of another schema: restarting does not help; the
// message says which `allotd store` commands to run).
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/allot-ipam/allot/core/config"
	"github.com/allot-ipam/allot/core/daemon"
	"github.com/allot-ipam/allot/plugins/builtin"
	"github.com/spf13/cobra"
)

func main() {
	var cfgPath string
	// storePath is the configured store file, for the advice printed when it is unusable.
	storePath := config.Defaults().Store.Path
	cmd := &cobra.Command{
		Use:           "allotd",
		Short:         "allot IPAM node daemon",
		Version:       daemon.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(cfgPath, cmd.Flags())
			if err != nil {
				return err
			}
			storePath = cfg.Store.Path
			log, err := newLogger(cfg.Log)
			if err != nil {
				return err
			}
			slog.SetDefault(log)
			for _, w := range cfg.Warnings {
				log.Warn(w)
			}
			// The composition root: the built-in plugins this binary links in, passed into
			// core, which imports none of them.
			builtins := builtin.Registry()
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			switch cfg.Mode {
			case "agent":
				d, err := daemon.NewAgent(ctx, cfg, builtins, log)
				if err != nil {
					return err
				}
				return d.Serve(ctx)
			case "operator":
				return daemon.RunOperator(ctx, cfg, builtins, log)
			}
			d, err := daemon.New(ctx, cfg, builtins, log)
			if err != nil {
				return err
			}
			return d.Serve(ctx)
		},
	}
	cmd.Flags().StringVarP(&cfgPath, "config", "c", os.Getenv("ALLOT_CONFIG"), "configuration file (YAML); env ALLOT_CONFIG")
	config.RegisterFlags(cmd.Flags())
	cmd.AddCommand(newInstallCNICommand(), newAcceptRACommand(), newStoreCommand())
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "allotd:", err)
		if advice := storeAdvice(err, storePath); advice != "" && cmd.CalledAs() == "allotd" {
			fmt.Fprintln(os.Stderr, advice)
		}
		os.Exit(exitCode(err))
	}
}

func newLogger(c config.LogConfig) (*slog.Logger, error) {
	level, err := config.ParseLevel(c.Level)
	if err != nil {
		return nil, fmt.Errorf("log.level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
}
