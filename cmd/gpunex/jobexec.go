package main

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/gpunex/gpunex/node/api"
)

// gpunex job exec: a process in a running job's container, through the node.

func jobExecCommand() *cobra.Command {
	var interactive, tty bool
	c := &cobra.Command{
		Use:   "exec ID [-it] -- COMMAND [ARG...]",
		Short: "Run a command (a shell with -it) in a running job of yours",
		Long: "Run a command in a running job of yours, in its container, as the job's user and within its limits.\n" +
			"-i passes your standard input to it; -t gives it a terminal (your terminal in raw mode, its window size\n" +
			"followed; Ctrl-C goes to the command). Its output is not the job's log. The command's exit status is\n" +
			"gpunex's.\n\n" + jobOutputHelp + " (Not with -t: a terminal's session is its own.)",
		Example: "  gpunex job exec 0123456789abcdef -it -- sh\n  gpunex job exec 0123456789abcdef -- nvidia-smi",
		Args:    cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			code, err := runJobExec(cmd, cl, args[0], args[1:], interactive, tty)
			if err != nil {
				return err
			}
			if code != 0 {
				return exitError{code}
			}
			return nil
		},
	}
	c.Flags().BoolVarP(&interactive, "interactive", "i", false, "pass standard input to the command")
	c.Flags().BoolVarP(&tty, "tty", "t", false, "give the command a terminal (needs a terminal here)")
	return c
}

// runJobExec runs the command and returns its exit status. With a terminal and -i, this one
// is in raw mode meanwhile and its size changes are passed on; else Ctrl-C, SIGTERM and
// SIGHUP are passed on to the command as signals.
func runJobExec(cmd *cobra.Command, cl *api.Client, id string, argv []string, interactive, tty bool) (int, error) {
	req := api.ExecRequest{Args: argv}
	x := api.ExecIO{Stdout: cmd.OutOrStdout(), Stderr: cmd.ErrOrStderr()}
	if interactive {
		x.Stdin = cmd.InOrStdin()
	}
	stdin := int(os.Stdin.Fd())
	req.TTY = tty && term.IsTerminal(stdin)
	if req.TTY {
		if cols, rows, err := term.GetSize(int(os.Stdout.Fd())); err == nil {
			req.Cols, req.Rows = uint16(cols), uint16(rows)
		}
	}
	if req.TTY && interactive {
		// Raw: each key goes to the command's terminal as typed, Ctrl-C too (its terminal
		// makes it SIGINT).
		state, err := term.MakeRaw(stdin)
		if err != nil {
			return 0, err
		}
		defer term.Restore(stdin, state)
		resize := make(chan [2]uint16, 1)
		winch := make(chan os.Signal, 1)
		notifyResize(winch) // the terminal's window size changed (Unix only)
		defer signal.Stop(winch)
		go func() {
			for range winch {
				if cols, rows, err := term.GetSize(int(os.Stdout.Fd())); err == nil {
					select {
					case resize <- [2]uint16{uint16(cols), uint16(rows)}:
					default:
					}
				}
			}
		}()
		x.Resize = resize
	} else {
		if !req.TTY {
			out, done := jobOutput(x.Stdout)
			defer done()
			errOut, errDone := jobOutput(x.Stderr)
			defer errDone()
			x.Stdout, x.Stderr = out, errOut
		}
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
		defer signal.Stop(sigs)
		names := make(chan string, 1)
		go func() {
			for s := range sigs {
				name := map[os.Signal]string{os.Interrupt: "INT", syscall.SIGTERM: "TERM", syscall.SIGHUP: "HUP"}[s]
				select {
				case names <- name:
				default:
				}
			}
		}()
		x.Signal = names
	}
	return cl.Exec(cmd.Context(), id, req, x)
}
