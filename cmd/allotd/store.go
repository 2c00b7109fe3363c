package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/allot-ipam/allot/core/config"
	"github.com/allot-ipam/allot/core/store"
	"github.com/spf13/cobra"
)

// Exit codes of allotd and its subcommands.
const (
	exitError = 1
	// exitStoreUnusable: the store file is damaged, truncated, foreign or of another schema
	// (allotd refuses to start on it; `allotd store check` found damage). Restarting
	// does not help: the file needs `allotd store salvage` or to be moved aside.
	exitStoreUnusable = 3
)

// codeError carries an exit code through cobra.
type codeError struct {
	code int
	err  error
}

func (e *codeError) Error() string { return e.err.Error() }
func (e *codeError) Unwrap() error { return e.err }

// exitCode is the exit code for err: 3 when the store is unusable, else 1.
func exitCode(err error) int {
	var ce *codeError
	if errors.As(err, &ce) {
		return ce.code
	}
	if errors.Is(err, store.ErrUnusable) || errors.Is(err, store.ErrCorrupt) {
		return exitStoreUnusable
	}
	return exitError
}

// storeAdvice is what an operator does about an unusable store: printed after the
// error, once, instead of a stack trace.
func storeAdvice(err error, path string) string {
	if !errors.Is(err, store.ErrUnusable) && !errors.Is(err, store.ErrCorrupt) {
		return ""
	}
	var ue *store.UnusableError
	if errors.As(err, &ue) {
		path = ue.Path
	}
	return fmt.Sprintf(`allotd does not start on a damaged store: a lost record could hand out an address twice.
  1. see the damage:     allotd store check --store-path %[1]s
  2. save what is left:  allotd store salvage --store-path %[1]s --out %[1]s.salvaged
     (it lists the records it could not read; their pods may need restarting)
  3. put it in place:    mv %[1]s %[1]s.damaged && mv %[1]s.salvaged %[1]s
In agent mode, store.onCorruption: rebuild (the default) moves the file aside and rebuilds from the API server.`, path)
}

// newStoreCommand is `allotd store check|salvage|compact`: offline tools for the store file.
// They take the file's lock (shared for check, exclusive for compact), so they refuse to
// run beside an allotd that has the store open.
func newStoreCommand() *cobra.Command {
	var (
		path    string
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "store check|salvage|compact",
		Short: "check, salvage or compact the store file (offline: allotd must be stopped)",
		Long: `Offline tools for allotd's store file. Each takes the file's lock and refuses to run
while allotd has the store open (waiting at most --lock-timeout): stop allotd first.

Exit codes: 0 success, 1 error (including a locked file), 3 the store is damaged.`,
		Args: cobra.NoArgs,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&path, "store-path", config.Defaults().Store.Path, "path of the store file")
	pf.DurationVar(&timeout, "lock-timeout", 2*time.Second, "how long to wait for the file's lock")
	opts := func() store.InspectOptions { return store.InspectOptions{LockTimeout: timeout} }

	check := offline("check", "report damage to the store file (exit 3 when damaged)",
		`Reads the store file without changing it: bbolt's meta pages, every page of the tree
(each checked against the file's size and its parent), the schema, and every record
(strictly decoded), then bbolt's own consistency check. Prints every problem and what is
lost; exits 3 if there is any.`,
		func(cmd *cobra.Command) error {
			rep, err := store.Inspect(cmd.Context(), path, opts())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			printReport(out, rep)
			if !rep.OK() {
				return &codeError{exitStoreUnusable, fmt.Errorf("store %s is damaged (%d problems); `allotd store salvage --store-path %s --out %s.salvaged` saves what is readable", path, len(rep.Problems), path, path)}
			}
			fmt.Fprintf(out, "ok: %s holds %d records, no damage found\n", path, len(rep.Records))
			return nil
		})

	var outPath string
	salvage := offline("salvage --out FILE", "copy every readable record into a new store file (the damaged one is not changed)",
		`Copies every record that can still be read from the store file into the new store file
--out (which must not exist), and lists what could not be read. The damaged file is only
read. Besides the records the tree reaches, it recovers records found in pages the tree
no longer reaches (when the file is damaged); some of these may have been deleted before
the damage: they hold their addresses until released (DEL, CNI GC, or in agent mode the
reclaim of pods that are gone), which is safe, where losing one is not.`,
		func(cmd *cobra.Command) error {
			rep, err := store.Salvage(cmd.Context(), path, outPath, opts())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			printReport(out, rep)
			fmt.Fprintf(out, "salvaged %d records into %s (%d read through the tree and the write-ahead log, whose %d frames were applied; %d recovered from other pages); %d losses listed above\n",
				len(rep.Records)+len(rep.Recovered), outPath, len(rep.Records), rep.Logged, len(rep.Recovered), len(rep.Lost))
			fmt.Fprintf(out, "to use it, with allotd stopped:\n  mv %[1]s %[1]s.damaged && mv %[2]s %[1]s\n", path, outPath)
			return nil
		})
	salvage.Flags().StringVar(&outPath, "out", "", "new store file to write (required; must not exist)")
	_ = salvage.MarkFlagRequired("out")

	compact := offline("compact", "rewrite the store file without its free pages (bbolt compact)",
		`Rewrites the store file without its free space (bbolt.Compact) into a temporary file
beside it and renames that over it, holding the file's lock throughout. A damaged file is
refused: salvage it first.`,
		func(cmd *cobra.Command) error {
			res, err := store.Compact(cmd.Context(), path, opts())
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "compacted %s: %d -> %d bytes\n", path, res.Before, res.After)
			return nil
		})
	cmd.AddCommand(check, salvage, compact)
	return cmd
}

// offline is one `allotd store` subcommand: no arguments, and errors printed once by main.
func offline(use, short, long string, run func(*cobra.Command) error) *cobra.Command {
	return &cobra.Command{
		Use: use, Short: short, Long: long,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE:          func(cmd *cobra.Command, _ []string) error { return run(cmd) },
	}
}

func printReport(out io.Writer, rep *store.Report) {
	fmt.Fprintf(out, "file %s: %d bytes, page size %d, transaction %d, %d pages reached, schema %d\n",
		rep.Path, rep.Size, rep.PageSize, rep.TxID, rep.Pages, rep.Schema)
	for _, p := range rep.Problems {
		fmt.Fprintf(out, "problem: %s\n", p)
	}
	for _, l := range rep.Lost {
		fmt.Fprintf(out, "lost: %s\n", l)
	}
	if n := len(rep.Recovered); n > 0 {
		owners := make([]string, 0, n)
		for _, r := range rep.Recovered {
			owners = append(owners, r.Owner.String())
		}
		fmt.Fprintf(out, "recovered from pages outside the tree: %s\n", strings.Join(owners, ", "))
	}
}
