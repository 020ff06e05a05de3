package main

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpunex/gpunex/node/api"

	"github.com/spf13/cobra"
)

func jobCommand() *cobra.Command {
	c := &cobra.Command{Use: "job", Short: "Rent GPUs: run jobs on providers, follow and manage them"}
	var req api.JobRequest
	var hours float64
	var detach bool
	var file, output string
	run := &cobra.Command{
		Use: "run (--provider PEER | --offer ID | --model M [--region R] [--tier T] [--tries N]) --gpus N --max-hours H [--max-price P] " +
			"(--image REF | --image-archive FILE.tar) [--env K=V] [--egress] [--output DIR] [--detach] [-f JOB.toml] -- CMD ARGS...",
		Short: "Negotiate a job with a provider, run it, stream its output; exits with the job's exit code",
		Long: "Negotiate a job with a provider, run it, stream its output; exits with the job's exit code.\n\n" +
			"With --model and no provider or offer, the job goes to the best offer by merit (as `gpunex offers search`\n" +
			"orders them) among those of that model matching --region, --tier, --egress, --max-price and --gpus; an\n" +
			"offer whose provider refuses or does not answer passes it to the next, --tries offers at most.\n" +
			"-f reads the job from a TOML file (docs/api.md, \"Job files\"); flags override it.",
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Args = args
			if file != "" {
				f, err := readJobFile(file)
				if err != nil {
					return err
				}
				f.fill(cmd, &req, &hours, &output)
			}
			if hours <= 0 || math.IsNaN(hours) || hours > 24*30 {
				return errors.New("--max-hours (hours in a job file): a positive number of hours, at most 720")
			}
			req.MaxSeconds = int64(math.Ceil(hours * 3600))
			if req.ImageArchive != "" {
				abs, err := filepath.Abs(req.ImageArchive)
				if err != nil {
					return err
				}
				req.ImageArchive = abs
			}
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
			v, err := cl.ProposeJob(cmd.Context(), req)
			if err != nil {
				return err
			}
			if pl := v.Placement; pl != nil {
				fmt.Fprintf(errOut, "placement: %d offer(s) match %s\n", pl.Matched, pl.Search)
				for _, a := range pl.Attempts[:len(pl.Attempts)-1] {
					fmt.Fprintf(errOut, "  passed over %s, %s: %s: %s\n", a.Offer, a.Why, a.Outcome, a.Error)
				}
				fmt.Fprintf(errOut, "  %s\n", pl.Chosen)
			}
			fmt.Fprintf(errOut, "job %s started on %s: %d x %s at %s USDC/GPU-hour, until %s\n", v.ID, v.Peer, v.GPUs, v.Model, v.PriceUSDC,
				v.EndsAt.Local().Format(time.DateTime))
			printPath(cmd, cl, v.Peer)
			if detach {
				if output != "" {
					fmt.Fprintf(errOut, "its output is not fetched with --detach: gpunex job fetch %s %s, once it ended\n", v.ID, output)
				}
				fmt.Fprintln(out, v.ID)
				return nil
			}
			if err := cl.JobLogs(cmd.Context(), v.ID, true, out); err != nil {
				return fmt.Errorf("following the output: %w (the job goes on: gpunex job logs -f %s)", err, v.ID)
			}
			v, err = cl.Job(cmd.Context(), v.ID)
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
		},
	}
	f := run.Flags()
	f.StringVarP(&file, "file", "f", "", "read the job from a TOML file (docs/api.md, \"Job files\"); flags override it")
	f.StringVar(&req.Provider, "provider", "", "provider peer ID")
	f.StringVar(&req.Offer, "offer", "", "offer ID (<peer ID>/<MODEL>), as 'gpunex offers search' shows")
	f.StringVar(&req.Model, "model", "", "GPU model: without --provider or --offer, run on the best offer of it that takes the job")
	f.StringVar(&req.Region, "region", "", "with --model: only offers in this region")
	f.StringVar(&req.Tier, "tier", "", "with --model: only offers certified at this tier (community or enterprise)")
	f.IntVar(&req.Tries, "tries", 0, fmt.Sprintf("with --model: how many offers to propose the job to at most, best first (default %d, at most %d)", api.DefaultTries, api.MaxTries))
	f.IntVar(&req.GPUs, "gpus", 1, "how many GPUs")
	f.Float64Var(&hours, "max-hours", 0, "longest the job may run, in hours (the lease ends then); required, here or as hours in a job file")
	f.StringVar(&req.MaxPrice, "max-price", "", "most USDC per GPU-hour you pay (default: the offer's price)")
	f.StringVar(&req.Image, "image", "", "image reference the provider pulls")
	f.StringVar(&req.ImageArchive, "image-archive", "", "OCI image archive streamed to the provider")
	f.StringArrayVar(&req.Env, "env", nil, "K=V environment variable (repeatable)")
	f.BoolVar(&req.Egress, "egress", false, "let the job reach the network")
	f.StringVarP(&output, "output", "o", "", "when the job ends, download what it wrote to /output into this folder")
	f.BoolVar(&detach, "detach", false, "print the job ID and return once the job started")

	var asJSON bool
	list := &cobra.Command{
		Use:   "list [--json]",
		Short: "List the jobs this node rented or runs, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			js, err := cl.Jobs(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), js)
			}
			if len(js) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "no jobs")
				return nil
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 2, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tSIDE\tSTATE\tGPUS\tMODEL\tSECONDS\tCOST USDC\tEXIT\tPEER")
			for _, j := range js {
				exit := "-"
				if j.State == "ended" {
					exit = fmt.Sprintf("%d %s", j.ExitCode, j.ExitReason)
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%d\t%s\t%s\t%s\n", j.ID, j.Side, j.State, j.GPUs, j.Model, j.Seconds, j.CostUSDC, exit, j.Peer)
			}
			return w.Flush()
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")

	status := &cobra.Command{
		Use:   "status ID",
		Short: "Show a job (asking its provider when this node rented it)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			v, err := cl.Job(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printJSON(cmd.OutOrStdout(), v)
		},
	}
	var follow bool
	logs := &cobra.Command{
		Use:   "logs ID [-f]",
		Short: "Print a job's output; -f follows it until the job ends",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			return cl.JobLogs(cmd.Context(), args[0], follow, cmd.OutOrStdout())
		},
	}
	logs.Flags().BoolVarP(&follow, "follow", "f", false, "follow the output until the job ends")
	cancel := &cobra.Command{
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
	fetch := &cobra.Command{
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
	c.AddCommand(run, list, status, logs, cancel, fetch)
	return c
}

// fetchOutput downloads what a job wrote to /output into dir and says how many files it
// wrote.
func fetchOutput(cmd *cobra.Command, cl *api.Client, id, dir string) (int, error) {
	pr, pw := io.Pipe()
	defer pr.Close() // a fetch still writing when untar stops ends
	go func() { pw.CloseWithError(cl.FetchOutput(cmd.Context(), id, pw)) }()
	return untar(pr, dir)
}

// untar extracts regular files and folders into dir, on this machine: every path is
// resolved inside dir (os.Root), so neither "..", an absolute name nor a link already in
// dir leads out of it, and no file already there is written over. Links, devices and
// other entries are skipped.
func untar(r io.Reader, dir string) (int, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return 0, err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	n := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		name := filepath.Clean(filepath.FromSlash(h.Name))
		if filepath.IsAbs(name) || name == ".." || strings.HasPrefix(name, ".."+string(filepath.Separator)) {
			return n, fmt.Errorf("archive entry %q leaves the folder", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o755); err != nil {
				return n, err
			}
		case tar.TypeReg:
			if err := root.MkdirAll(filepath.Dir(name), 0o755); err != nil {
				return n, err
			}
			// Never over a file already there: a provider's output (or a job file shared
			// by someone else naming a folder such as ~) cannot replace this machine's files.
			f, err := root.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o644)
			if errors.Is(err, fs.ErrExist) {
				return n, fmt.Errorf("%s is already in %s: a job's output never replaces a file; fetch it into a new folder", name, dir)
			}
			if err != nil {
				return n, err
			}
			_, err = io.Copy(f, tr)
			f.Close()
			if err != nil {
				return n, err
			}
			n++
		}
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

func peersCommand() *cobra.Command {
	c := &cobra.Command{Use: "peers", Short: "How this node is connected to other peers"}
	var asJSON bool
	show := &cobra.Command{
		Use:   "show PEER_ID [--json]",
		Short: "Say whether this node is connected to a peer directly or through a relay, and over which addresses",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			v, err := cl.Peer(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), v)
			}
			path := v.Path
			if path == "" {
				path = "not connected"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", v.ID, path)
			for _, c := range v.Conns {
				fmt.Fprintf(cmd.OutOrStdout(), "  %s\n", c)
			}
			return nil
		},
	}
	show.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	c.AddCommand(show)
	return c
}
