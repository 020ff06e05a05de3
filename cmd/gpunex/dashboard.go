package main

import (
	"fmt"
	"html"
	"os"
	"os/exec"
	"runtime"

	"github.com/spf13/cobra"
)

func dashboardCommand() *cobra.Command {
	var open bool
	c := &cobra.Command{
		Use:   "dashboard [--open]",
		Short: "Print a one-time login link to this node's web dashboard (or open it in the browser)",
		Long: "Asks the running node for a login link to its dashboard, served on its local API address. " +
			"The link opens one browser session, once, within 5 minutes; the session lasts 30 days, across the node's restarts.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			link, err := cl.DashboardLink(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), link.URL)
			if open {
				if err := openBrowser(link.URL); err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "could not open a browser (%v): open the link above\n", err)
				}
			}
			return nil
		},
	}
	c.Flags().BoolVar(&open, "open", false, "open the link in the desktop's browser")
	return c
}

// openBrowser hands a login link to the desktop's browser through a page only this user
// can read, which forwards to it: on a command line, any user of the machine could read
// the link (/proc/PID/cmdline) and open the session first.
func openBrowser(url string) error {
	f, err := os.CreateTemp("", "gpunex-dashboard-*.html")
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := fmt.Fprintf(f, "<!doctype html><meta http-equiv=\"refresh\" content=\"0;url=%s\"><title>gpunex</title>\n", html.EscapeString(url)); err != nil {
		return err
	}
	page := f.Name() // CreateTemp makes it 0600
	switch runtime.GOOS {
	case "darwin":
		return exec.Command("open", page).Start()
	case "windows":
		return exec.Command("rundll32", "url.dll,FileProtocolHandler", page).Start()
	default:
		return exec.Command("xdg-open", page).Start()
	}
}
