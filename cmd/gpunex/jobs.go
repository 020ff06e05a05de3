package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"time"

	"github.com/gpunex/gpunex/node/api"

	"github.com/spf13/cobra"
)

// `gpunex job`: a renter's jobs (run, follow, cancel, fetch the output) and a provider's
// list of those it runs.

func jobCommand() *cobra.Command {
	c := &cobra.Command{Use: "job", Short: "Rent GPUs: run jobs on providers, follow and manage them"}
	c.AddCommand(jobRunCommand(), jobListCommand(), jobStatusCommand(), jobLogsCommand(), jobCancelCommand(), jobFetchCommand(), jobExecCommand(), jobForwardCommand())
	c.AddCommand(jobExtendCommand()) // jobextend.go
	return c
}

// jobOutputHelp says how a job's output is printed on a terminal (jobOutput).
const jobOutputHelp = "On a terminal, the control characters of the job's output (ESC and the others but newline, tab and\n" +
	"carriage return) are shown as escapes such as \\x1b: a job cannot move the cursor, rewrite the screen or\n" +
	"send the terminal other commands."

// jobRun is what `gpunex job run` was asked: the job, and what to do while and after it
// runs.
type jobRun struct {
	req          api.JobRequest
	hours        float64
	detach       bool
	forward      bool // forward the job's ports from this machine's loopback once it starts
	file, output string
}

func jobRunCommand() *cobra.Command {
	var o jobRun
	c := &cobra.Command{
		Use: "run (--provider PEER | --offer ID | --model M [--region R] [--tier T] [--tries N]) --gpus N --max-hours H [--max-price P] " +
			"(--image REF | --image-archive FILE.tar) [--env K=V] [--egress] [--input PATH] [--port N [--forward]] [--output DIR] [--detach] [-f JOB.toml] -- CMD ARGS...",
		Short: "Negotiate a job with a provider, run it, stream its output; exits with the job's exit code",
		Long: "Negotiate a job with a provider, run it, stream its output; exits with the job's exit code.\n\n" +
			"With --model and no provider or offer, the job goes to the best offer by merit (as `gpunex offers search`\n" +
			"orders them) among those of that model matching --region, --tier, --egress, --max-price and --gpus; an\n" +
			"offer whose provider refuses or does not answer passes it to the next, --tries offers at most.\n" +
			"-f reads the job from a TOML file (docs/api.md, \"Job files\"); flags override it.\n\n" +
			"--input sends a file or a folder (links inside it kept; links leaving it, devices and pipes refused) before\n" +
			"the job starts; the job reads it at /input/NAME and cannot change it. Only what the provider does not hold\n" +
			"already is sent: a second job with the same data, or an upload that was cut, sends only what is missing.\n\n" +
			"--port declares a TCP port the job serves: only you reach it, over the link to the provider (gpunex job\n" +
			"forward JOB PORT); --forward forwards each declared port from this machine's loopback as soon as the job\n" +
			"starts, and prints the local address.\n\n" + jobOutputHelp,
		RunE: func(cmd *cobra.Command, args []string) error { return runJob(cmd, args, o) },
	}
	f := c.Flags()
	f.StringVarP(&o.file, "file", "f", "", "read the job from a TOML file (docs/api.md, \"Job files\"); flags override it")
	f.StringVar(&o.req.Provider, "provider", "", "provider peer ID")
	f.StringVar(&o.req.Offer, "offer", "", "offer ID (<peer ID>/<MODEL>), as 'gpunex offers search' shows")
	f.StringVar(&o.req.Model, "model", "", "GPU model: without --provider or --offer, run on the best offer of it that takes the job")
	f.StringVar(&o.req.Region, "region", "", "with --model: only offers in this region")
	f.StringVar(&o.req.Tier, "tier", "", "with --model: only offers certified at this tier (community or enterprise)")
	f.IntVar(&o.req.Tries, "tries", 0, fmt.Sprintf("with --model: how many offers to propose the job to at most, best first (default %d, at most %d)", api.DefaultTries, api.MaxTries))
	f.IntVar(&o.req.GPUs, "gpus", 1, "how many GPUs")
	f.Float64Var(&o.hours, "max-hours", 0, "longest the job may run, in hours (the lease ends then); required, here or as hours in a job file")
	f.StringVar(&o.req.MaxPrice, "max-price", "", "most USDC per GPU-hour you pay (default: the offer's price)")
	f.StringVar(&o.req.Image, "image", "", "image reference the provider pulls")
	f.StringVar(&o.req.ImageArchive, "image-archive", "", "OCI image archive streamed to the provider")
	f.StringArrayVar(&o.req.Env, "env", nil, "K=V environment variable (repeatable)")
	f.BoolVar(&o.req.Egress, "egress", false, "let the job reach the network")
	f.StringVarP(&o.output, "output", "o", "", "when the job ends, download what it wrote to /output into this folder")
	f.StringArrayVar(&o.req.Inputs, "input", nil, "file or folder sent to the provider before the job starts, read-only at /input/NAME (repeatable)")
	f.IntSliceVar(&o.req.Ports, "port", nil, "TCP port the job serves you (repeatable); reach it with gpunex job forward")
	f.BoolVar(&o.forward, "forward", false, "once the job starts, forward its ports from 127.0.0.1 and print the local addresses (not with --detach)")
	f.BoolVar(&o.detach, "detach", false, "print the job ID and return once the job started")
	return c
}

// request completes the job request: the command after --, the job file under the flags,
// the lease's length, the image archive's absolute path.
func (o *jobRun) request(cmd *cobra.Command, args []string) error {
	o.req.Args = args
	if o.file != "" {
		f, err := readJobFile(o.file)
		if err != nil {
			return err
		}
		f.fill(cmd, &o.req, &o.hours, &o.output)
	}
	if o.hours <= 0 || math.IsNaN(o.hours) || o.hours > 24*30 {
		return errors.New("--max-hours (hours in a job file): a positive number of hours, at most 720")
	}
	o.req.MaxSeconds = int64(math.Ceil(o.hours * 3600))
	if o.req.ImageArchive != "" {
		abs, err := filepath.Abs(o.req.ImageArchive)
		if err != nil {
			return err
		}
		o.req.ImageArchive = abs
	}
	var err error
	o.req.Inputs, err = absPaths(o.req.Inputs) // jobinput.go
	return err
}

// runJob proposes the job, then follows its output until it ends (unless --detach) and
// exits with its exit code.
func runJob(cmd *cobra.Command, args []string, o jobRun) error {
	if err := o.request(cmd, args); err != nil {
		return err
	}
	cl, err := client(cmd)
	if err != nil {
		return err
	}
	out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
	stopProgress := func() {}
	if len(o.req.Inputs) > 0 { // the input's hashing and upload, shown as they go (jobinput.go)
		o.req.Progress = progressName()
		stopProgress = followUpload(cmd.Context(), cl, o.req.Progress, errOut, stderrIsTerminal(errOut))
	}
	v, err := cl.ProposeJob(cmd.Context(), o.req)
	stopProgress()
	if err != nil {
		return err
	}
	printPlacement(errOut, v)
	fmt.Fprintf(errOut, "job %s started on %s: %d x %s at %s USDC/GPU-hour, until %s\n", v.ID, v.Peer, v.GPUs, v.Model, v.PriceUSDC,
		v.EndsAt.Local().Format(time.DateTime))
	printPath(cmd, cl, v.Peer)
	if o.forward && !o.detach {
		ctx, stop := context.WithCancel(cmd.Context())
		defer stop()
		for _, port := range v.Ports { // jobforward.go
			go forwardPort(ctx, cl, v.ID, port, "", errOut)
		}
	}
	if o.detach {
		if o.output != "" {
			fmt.Fprintf(errOut, "its output is not fetched with --detach: gpunex job fetch %s %s, once it ended\n", v.ID, o.output)
		}
		fmt.Fprintln(out, v.ID)
		return nil
	}
	logs, done := jobOutput(out)
	err = cl.JobLogs(cmd.Context(), v.ID, true, logs)
	done()
	if err != nil {
		return fmt.Errorf("following the output: %w (the job goes on: gpunex job logs -f %s)", err, v.ID)
	}
	return endJob(cmd, cl, v.ID, o.output)
}

// printPlacement says, for a job placed by model, which offers matched, which passed it
// over and why, and which took it.
func printPlacement(errOut io.Writer, v api.JobView) {
	pl := v.Placement
	if pl == nil {
		return
	}
	fmt.Fprintf(errOut, "placement: %d offer(s) match %s\n", pl.Matched, pl.Search)
	for _, a := range pl.Attempts[:len(pl.Attempts)-1] {
		fmt.Fprintf(errOut, "  passed over %s, %s: %s: %s\n", a.Offer, a.Why, a.Outcome, a.Error)
	}
	fmt.Fprintf(errOut, "  %s\n", pl.Chosen)
}

// endJob reports how a followed job ended, fetches its output into output (when given) and
// exits with the job's exit code.
func endJob(cmd *cobra.Command, cl *api.Client, id, output string) error {
	errOut := cmd.ErrOrStderr()
	v, err := cl.Job(cmd.Context(), id)
	if err != nil {
		return err
	}
	fmt.Fprintf(errOut, "job %s %s: %s, exit code %d, %d s, cost %s USDC\n", v.ID, v.State, v.ExitReason, v.ExitCode, v.Seconds, v.CostUSDC)
	printPath(cmd, cl, v.Peer)
	if v.Disputed {
		fmt.Fprintf(errOut, "the provider's receipt was disputed: %s (the coordinator decides; %d s were countersigned as the job ran)\n", v.Error, v.MeteredSeconds)
	}
	if output != "" {
		n, err := fetchOutput(cmd, cl, v.ID, output)
		if err != nil && v.ExitCode == 0 {
			return fmt.Errorf("fetching the job's output: %w (again: gpunex job fetch %s %s)", err, v.ID, output)
		} else if err != nil {
			fmt.Fprintf(errOut, "fetching the job's output: %v (again: gpunex job fetch %s %s)\n", err, v.ID, output)
		} else {
			fmt.Fprintf(errOut, "%d files of its /output written to %s\n", n, output)
		}
	}
	if v.ExitCode != 0 {
		code := v.ExitCode
		if code < 0 || code > 255 {
			code = 1
		}
		return exitError{code}
	}
	return nil
}

func jobListCommand() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "list [--json]",
		Short: "List the jobs this node rented or runs, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return ask(cmd, asJSON, (*api.Client).Jobs, printJobs)
		},
	}
	jsonArrayFlag(c, &asJSON)
	return c
}

func printJobs(out io.Writer, js []api.JobView) error {
	if len(js) == 0 {
		fmt.Fprintln(out, "no jobs")
		return nil
	}
	w := newTable(out)
	fmt.Fprintln(w, "ID\tSIDE\tSTATE\tGPUS\tMODEL\tSECONDS\tCOST USDC\tEXIT\tPEER")
	for _, j := range js {
		exit := "-"
		if j.State == "ended" {
			exit = fmt.Sprintf("%d %s", j.ExitCode, j.ExitReason)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%d\t%s\t%s\t%s\n", j.ID, j.Side, j.State, j.GPUs, j.Model, j.Seconds, j.CostUSDC, exit, j.Peer)
	}
	return w.Flush()
}

func jobStatusCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "status ID",
		Short: "Show a job (asking its provider when this node rented it)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			job := func(cl *api.Client, ctx context.Context) (api.JobView, error) { return cl.Job(ctx, args[0]) }
			return ask(cmd, true, job, nil) // always JSON
		},
	}
}

func jobLogsCommand() *cobra.Command {
	var follow bool
	c := &cobra.Command{
		Use:   "logs ID [-f]",
		Short: "Print a job's output; -f follows it until the job ends",
		Long: "Print a job's output; -f follows it until the job ends.\n\n" + jobOutputHelp + "\n" +
			"Piped or redirected to a file, the output is written byte for byte.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			out, done := jobOutput(cmd.OutOrStdout())
			err = cl.JobLogs(cmd.Context(), args[0], follow, out)
			if derr := done(); err == nil {
				err = derr
			}
			return err
		},
	}
	c.Flags().BoolVarP(&follow, "follow", "f", false, "follow the output until the job ends")
	return c
}

func jobCancelCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "cancel ID",
		Short: "Stop a job; the provider writes the final receipt",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			if _, err := cl.CancelJob(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "job %s: cancel sent\n", args[0])
			return nil
		},
	}
}

func jobFetchCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "fetch ID DIR",
		Short: "Download what the job wrote to /output into DIR",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			n, err := fetchOutput(cmd, cl, args[0], args[1])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d files written to %s\n", n, args[1])
			return nil
		},
	}
}

// printPath says how the renter is connected to the provider: directly, or only through a
// relay (a provider behind a NAT that hole punching cannot cross).
func printPath(cmd *cobra.Command, cl *api.Client, provider string) {
	p, err := cl.Peer(cmd.Context(), provider)
	switch {
	case err != nil || p.Path == "":
	case p.Path == "direct":
		fmt.Fprintln(cmd.ErrOrStderr(), "connection to the provider: direct")
	default:
		fmt.Fprintln(cmd.ErrOrStderr(), "connection to the provider: relayed (a hole punch through its NAT did not succeed; the job's data goes through the coordinator's relay, within its limits)")
	}
}
