package main

import (
	"log/slog"
	"os"

	"github.com/allot-ipam/allot/core/cniinstall"
	"github.com/spf13/cobra"
)

// newInstallCNICommand is `allotd install-cni`: the DaemonSet's init container copies the
// CNI binaries onto the host with it (allot's image has no shell, so no cp).
func newInstallCNICommand() *cobra.Command {
	var (
		binDir, srcDir string
		plugins        []string
		uninstall      bool
	)
	cmd := &cobra.Command{
		Use:   "install-cni --bin-dir DIR [--src-dir DIR] [--plugins bridge,loopback,portmap] [--uninstall]",
		Short: "copy allot-cni (and listed CNI plugins) into a CNI bin directory, atomically",
		Long: `Copies allot-cni, and the plugins listed in --plugins, from --src-dir into --bin-dir:
each through a temporary file in --bin-dir and a rename, with mode 0755, so the container
runtime never executes a partial binary. Files already identical are left alone. The first
install records in --bin-dir/` + cniinstall.RecordDir + ` what each plugin replaced, so that
--uninstall removes allot-cni and puts the node's own plugins back.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("command", "install-cni")
			if uninstall {
				_, err := cniinstall.Uninstall(cniinstall.UninstallOptions{BinDir: binDir, SrcDir: srcDir, Logger: log})
				return err
			}
			_, err := cniinstall.Install(cniinstall.Options{BinDir: binDir, SrcDir: srcDir, Plugins: plugins, Logger: log})
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&binDir, "bin-dir", "", "CNI bin directory to install into (required; e.g. the host's /opt/cni/bin, mounted)")
	f.StringVar(&srcDir, "src-dir", cniinstall.DefaultSrcDir, "directory holding the binaries to copy")
	f.StringSliceVar(&plugins, "plugins", nil, "plugins to install besides allot-cni, comma-separated")
	f.BoolVar(&uninstall, "uninstall", false, "remove allot-cni and undo the recorded plugin installs instead")
	_ = cmd.MarkFlagRequired("bin-dir")
	return cmd
}
