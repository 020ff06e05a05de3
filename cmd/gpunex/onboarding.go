package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/mail"
	"os"
	"os/user"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpunex/gpunex/node/api"

	"github.com/spf13/cobra"

	"github.com/gpunex/gpunex/protocol"
)

// applicationFile is the application as a provider writes it (gpunex apply --template).
type applicationFile struct {
	Name             string                    `toml:"name" json:"name"`
	Email            string                    `toml:"email" json:"email"`
	Company          string                    `toml:"company" json:"company,omitempty"`
	UPS              bool                      `toml:"ups" json:"ups"`
	CommitmentMonths int                       `toml:"commitment_months" json:"commitment_months"`
	MaintenanceNotes string                    `toml:"maintenance_notes" json:"maintenance_notes,omitempty"`
	GPUs             []protocol.ApplicationGPU `toml:"gpus" json:"gpus"`
}

const applicationTemplate = `# gpunex provider application. Fill it in, then: gpunex apply --home DIR --file FILE
# The coordinator reviews it; follow it with: gpunex apply status --home DIR

# Full legal name of the person responsible for the machines.
name = ""
# Where the coordinator's decisions are sent.
email = ""
# Company (optional).
company = ""
# Is the machine behind an uninterruptible power supply? (Enterprise tier needs one.)
ups = false
# How many months you commit to keep the GPUs available (1-60; Enterprise needs 12 or more).
commitment_months = 12
# Planned maintenance, e.g. "2 hours on the first Sunday of each month".
maintenance_notes = ""

# One [[gpus]] entry per GPU model and host. Supported models: %s.
# Another model may be applied for; it is reviewed case by case.
[[gpus]]
model = "H100-80GB"
count = 1
# System RAM of the host, in GB.
host_ram_gb = 256
# Internet bandwidth in Gbps (Enterprise needs 1 Gbps or more each way, upload at least 90%% of download).
internet_up_gbps = 1.0
internet_down_gbps = 1.0
# "24/7", or weekly windows with a time zone: "mon-fri 08:00-20:00, sat 10:00-14:00 (Europe/Paris)".
availability = "24/7"
[gpus.location]
city = ""
# Two-letter ISO country code.
country = "FR"
# Marketplace region renters search by, e.g. eu-west, us-east, ap-south.
region = "eu-west"
`

func supportedModels(models *protocol.ModelCatalogue) string {
	return strings.Join(models.SupportedNames(), ", ")
}

func readApplicationFile(path string) (applicationFile, error) {
	var f applicationFile
	return f, decodeTOMLFile(path, &f, "see gpunex apply --template")
}

func (f applicationFile) form() protocol.Application {
	return protocol.Application{
		Name: f.Name, Email: f.Email, Company: f.Company, UPS: f.UPS, CommitmentMonths: f.CommitmentMonths,
		MaintenanceNotes: f.MaintenanceNotes, GPUs: f.GPUs,
	}
}

func applyCommand() *cobra.Command {
	var file string
	var template, interactive bool
	c := &cobra.Command{
		Use:   "apply [--file application.toml | --template]",
		Short: "Apply to the coordinator to become a certified provider",
		Long: "Apply to the coordinator to become a certified provider. With --file, the application is\n" +
			"read from a TOML file (--template prints one to fill in); without it, each question is\n" +
			"asked on the terminal. The application is signed by the node and delivered to the\n" +
			"coordinator; if the coordinator is unreachable it is kept and retried until it arrives.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			if template {
				fmt.Fprintf(out, applicationTemplate, supportedModels(nodeModels(cmd)))
				return nil
			}
			var f applicationFile
			var err error
			switch {
			case file != "":
				if f, err = readApplicationFile(file); err != nil {
					return err
				}
			case interactive || isTerminal(os.Stdin):
				if f, err = askApplication(bufio.NewReader(cmd.InOrStdin()), out, nodeModels(cmd)); err != nil {
					return err
				}
			default:
				return errors.New("give --file FILE (gpunex apply --template prints one), or run on a terminal to answer questions")
			}
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			v, err := cl.Apply(cmd.Context(), f.form())
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "application %s signed and queued for coordinator %s\n", v.ID, v.Coordinator)
			if v.Application != nil {
				for _, d := range v.Application.Differences {
					fmt.Fprintf(out, "flagged for the reviewer: %s\n", d)
				}
			}
			fmt.Fprintf(out, "it is delivered (and retried) by the node; follow it with: gpunex apply status --home %s\n", home(cmd).Dir)
			return nil
		},
	}
	c.Flags().StringVar(&file, "file", "", "application TOML file")
	c.Flags().BoolVar(&template, "template", false, "print a commented application template")
	c.Flags().BoolVar(&interactive, "interactive", false, "ask the questions on standard input even when it is not a terminal")

	var asJSON bool
	status := &cobra.Command{
		Use:   "status [--json]",
		Short: "Show the application: queued, pending, info-requested (with the question), approved (with tier), rejected (with reason)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			v, err := cl.ApplyStatus(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), v)
			}
			printOwnApplication(cmd.OutOrStdout(), v)
			return nil
		},
	}
	status.Flags().BoolVar(&asJSON, "json", false, "print JSON")

	var message string
	answer := &cobra.Command{
		Use:   "answer --message TEXT",
		Short: "Answer the coordinator's request for more information",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			v, err := cl.Answer(cmd.Context(), message)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "answer signed and queued for delivery with application %s\n", v.ID)
			return nil
		},
	}
	answer.Flags().StringVar(&message, "message", "", "the answer")
	answer.MarkFlagRequired("message")
	c.AddCommand(status, answer)
	return c
}

func printOwnApplication(w io.Writer, v api.OwnApplicationView) {
	fmt.Fprintf(w, "application %s: %s", v.ID, v.Status)
	if v.Tier != "" {
		fmt.Fprintf(w, " (tier %s)", v.Tier)
	}
	fmt.Fprintln(w)
	switch v.Status {
	case api.StatusQueued:
		fmt.Fprintf(w, "not delivered yet: %d attempts, last error: %s (the node keeps retrying)\n", v.Attempts, v.LastError)
	case protocol.StatusPending:
		if !v.DecisionDue.IsZero() {
			// Due at the end of a day: shown as its last minute.
			fmt.Fprintf(w, "decision expected by %s\n", v.DecisionDue.Add(-time.Minute).Local().Format("Mon 2 Jan 2006 15:04 MST"))
		}
	case protocol.StatusInfoRequested:
		fmt.Fprintf(w, "the coordinator asks: %s\nreply with: gpunex apply answer --message \"...\"\n", v.Message)
	case protocol.StatusRejected, protocol.StatusRevoked, api.StatusRefused:
		fmt.Fprintf(w, "reason: %s\n", v.Message)
	case protocol.StatusApproved:
		if v.Message != "" {
			fmt.Fprintf(w, "note: %s\n", v.Message)
		}
	}
	if c := v.Certificate; c != nil {
		var gpus []string
		for _, g := range c.GPUs {
			gpus = append(gpus, fmt.Sprintf("%d x %s", g.Count, g.Model))
		}
		fmt.Fprintf(w, "certificate %d: %s, %s, commitment until %s, expires %s\n", c.Serial, c.Tier, strings.Join(gpus, ", "),
			c.CommitmentEnd.Format("2006-01-02"), c.ExpiresAt.Format("2006-01-02"))
	}
	fmt.Fprintf(w, "coordinator %s, submitted %s, updated %s\n", v.Coordinator, v.SubmittedAt.Local().Format(time.DateTime), v.UpdatedAt.Local().Format(time.DateTime))
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// asker asks questions on a terminal, asking again until the answer is valid.
type asker struct {
	in  *bufio.Reader
	out io.Writer
}

func (a asker) ask(question, def string, check func(string) error) (string, error) {
	for {
		if def != "" {
			fmt.Fprintf(a.out, "%s [%s]: ", question, def)
		} else {
			fmt.Fprintf(a.out, "%s: ", question)
		}
		line, err := a.in.ReadString('\n')
		if err != nil && (err != io.EOF || line == "") {
			return "", fmt.Errorf("no answer to %q: %w", question, err)
		}
		ans := strings.TrimSpace(line)
		if ans == "" {
			ans = def
		}
		if err := check(ans); err != nil {
			fmt.Fprintf(a.out, "  %v\n", err)
			continue
		}
		return ans, nil
	}
}

func required(s string) error {
	if s == "" {
		return errors.New("required")
	}
	return nil
}

func optional(string) error { return nil }

func intIn(lo, hi int) func(string) error {
	return func(s string) error {
		v, err := strconv.Atoi(s)
		if err != nil || v < lo || v > hi {
			return fmt.Errorf("a whole number from %d to %d", lo, hi)
		}
		return nil
	}
}

func gbps(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !(v > 0 && v <= 1000) {
		return errors.New("a number of Gbps above 0, at most 1000 (e.g. 1, 2.5, 10)")
	}
	return nil
}

func yesNo(s string) error {
	switch strings.ToLower(s) {
	case "y", "yes", "n", "no":
		return nil
	}
	return errors.New("yes or no")
}

// askApplication asks every question of the application, checking each answer.
func askApplication(in *bufio.Reader, out io.Writer, models *protocol.ModelCatalogue) (applicationFile, error) {
	a := asker{in, out}
	var f applicationFile
	var err error
	fmt.Fprintln(out, "gpunex provider application (press Enter to accept a [default])")
	if f.Name, err = a.ask("Full legal name", "", required); err != nil {
		return f, err
	}
	if f.Email, err = a.ask("E-mail", "", func(s string) error {
		if addr, err := mail.ParseAddress(s); err != nil || addr.Address != s {
			return errors.New("an e-mail address such as name@example.org")
		}
		return nil
	}); err != nil {
		return f, err
	}
	if f.Company, err = a.ask("Company (optional)", "", optional); err != nil {
		return f, err
	}
	for {
		var g protocol.ApplicationGPU
		fmt.Fprintf(out, "GPU entry %d (supported: %s; another model is reviewed case by case)\n", len(f.GPUs)+1, supportedModels(models))
		model, err := a.ask("  Model", "H100-80GB", required)
		if err != nil {
			return f, err
		}
		g.Model = protocol.NormalizeModel(model)
		if !models.Supported(g.Model) {
			fmt.Fprintf(out, "  %s is not on the supported list: it will be reviewed case by case\n", g.Model)
		}
		fields := []struct {
			q, def string
			check  func(string) error
			set    func(string)
		}{
			{"  Quantity", "1", intIn(1, protocol.MaxGPUsPerItem), func(s string) { g.Count, _ = strconv.Atoi(s) }},
			{"  Host system RAM (GB)", "256", intIn(1, 65536), func(s string) { g.HostRAMGB, _ = strconv.Atoi(s) }},
			{"  Internet upload (Gbps)", "1", gbps, func(s string) { g.UpGbps, _ = strconv.ParseFloat(s, 64) }},
			{"  Internet download (Gbps)", "1", gbps, func(s string) { g.DownGbps, _ = strconv.ParseFloat(s, 64) }},
			{"  Availability (24/7, or e.g. \"mon-fri 08:00-20:00 (Europe/Paris)\")", "24/7", func(s string) error {
				_, err := protocol.ParseAvailability(s)
				return err
			}, func(s string) { g.Availability = s }},
			{"  City", "", required, func(s string) { g.Location.City = s }},
			{"  Country (two-letter code)", "FR", func(s string) error {
				if len(s) != 2 || strings.ToUpper(s) != s {
					return errors.New("a two-letter ISO code in capitals, e.g. FR, DE, US")
				}
				return nil
			}, func(s string) { g.Location.Country = s }},
			{"  Marketplace region", "eu-west", required, func(s string) { g.Location.Region = protocol.NormalizeRegion(s) }},
		}
		for _, fl := range fields {
			ans, err := a.ask(fl.q, fl.def, fl.check)
			if err != nil {
				return f, err
			}
			fl.set(ans)
		}
		f.GPUs = append(f.GPUs, g)
		more, err := a.ask("Another GPU entry? (yes/no)", "no", yesNo)
		if err != nil {
			return f, err
		}
		if strings.HasPrefix(strings.ToLower(more), "n") {
			break
		}
	}
	ups, err := a.ask("UPS (uninterruptible power supply)? (yes/no)", "no", yesNo)
	if err != nil {
		return f, err
	}
	f.UPS = strings.HasPrefix(strings.ToLower(ups), "y")
	months, err := a.ask("Commitment period in months", "12", intIn(1, protocol.MaxCommitmentMonths))
	if err != nil {
		return f, err
	}
	f.CommitmentMonths, _ = strconv.Atoi(months)
	if f.MaintenanceNotes, err = a.ask("Maintenance notes (optional)", "", optional); err != nil {
		return f, err
	}
	// The record's own checks, in case a rule is not covered above.
	if form := f.form(); form.ValidateForm() != nil {
		return f, form.ValidateForm()
	}
	return f, nil
}

func notificationsCommand() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "notifications [--json]",
		Short: "List the notices this node received (coordinator decisions, ...)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			ns, err := cl.Notifications(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), ns)
			}
			if len(ns) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "no notifications")
			}
			for _, n := range ns {
				fmt.Fprintf(cmd.OutOrStdout(), "%s  %s\n", n.ReceivedAt.Local().Format(time.DateTime), n.Subject)
				if n.Body != "" {
					fmt.Fprintf(cmd.OutOrStdout(), "    %s\n", strings.ReplaceAll(n.Body, "\n", "\n    "))
				}
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	return c
}

func defaultActor() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return "operator"
}

func coordinatorCommand() *cobra.Command {
	c := &cobra.Command{Use: "coordinator", Short: "Coordinator: review applications, revoke certificates"}
	c.PersistentFlags().String("as", defaultActor(), "who decides, for the audit trail")
	actor := func(cmd *cobra.Command) string { s, _ := cmd.Flags().GetString("as"); return s }

	apps := &cobra.Command{Use: "applications", Short: "The application queue"}
	var status, sortBy string
	var asJSON bool
	list := &cobra.Command{
		Use:   "list [--status pending|info-requested|approved|rejected|revoked] [--sort submitted|due] [--json]",
		Short: "List applications, oldest first or by due date, with each review's age in business days and its due date",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			v, err := cl.Applications(cmd.Context(), status, sortBy)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), v)
			}
			if len(v) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "no applications")
				return nil
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 2, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tSTATUS\tTIER\tPROPOSED\tSUBMITTED\tAGE\tDUE\tPROVIDER\tNOTE")
			for _, a := range v {
				note := ""
				if len(a.CaseByCase) > 0 {
					note = "case by case: " + strings.Join(a.CaseByCase, ", ")
				}
				age, due := "-", "-"
				if !a.DecisionDue.IsZero() {
					age, due = fmt.Sprintf("%d bd", a.AgeBusinessDays), a.DecisionDue.Add(-time.Minute).Local().Format("Mon 2006-01-02 15:04")
					if a.Overdue {
						due += " OVERDUE"
					}
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.ID, a.Status, dash(a.Tier), a.ProposedTier,
					a.SubmittedAt.Local().Format(time.DateTime), age, due, a.Provider, note)
			}
			return w.Flush()
		},
	}
	list.Flags().StringVar(&status, "status", "", "only this status")
	list.Flags().StringVar(&sortBy, "sort", "submitted", "submitted (oldest first) or due (the soonest decision due first)")
	list.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")

	var showJSON bool
	show := &cobra.Command{
		Use:   "show ID [--json]",
		Short: "Show an application, the tier rule's proposal and its audit trail",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			v, err := cl.Application(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if showJSON {
				return printJSON(cmd.OutOrStdout(), v)
			}
			printApplication(cmd.OutOrStdout(), v)
			return nil
		},
	}
	show.Flags().BoolVar(&showJSON, "json", false, "print JSON")

	decide := func(use, short, action, flag, flagHelp string, need bool) *cobra.Command {
		var text, tier string
		d := &cobra.Command{
			Use:   use,
			Short: short,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				cl, err := client(cmd)
				if err != nil {
					return err
				}
				v, err := cl.Decide(cmd.Context(), args[0], api.Decision{Action: action, Tier: tier, Message: text, Actor: actor(cmd)})
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "application %s: %s %s\n", v.ID, v.Status, v.Tier)
				return nil
			},
		}
		d.Flags().StringVar(&text, flag, "", flagHelp)
		if need {
			d.MarkFlagRequired(flag)
		}
		if action == "approve" {
			d.Flags().StringVar(&tier, "tier", "", "enterprise or community (default: the tier the rule proposes; Enterprise needs a UPS)")
		}
		return d
	}
	apps.AddCommand(list, show,
		decide("approve ID [--tier enterprise|community] [--note TEXT]", "Approve: the provider gets a signed certificate", "approve", "note", "a note for the provider", false),
		decide("reject ID --reason TEXT", "Reject, saying why", "reject", "reason", "why", true),
		decide("request-info ID --message TEXT", "Ask the provider a question", "request-info", "message", "the question", true),
	)

	var reason string
	revoke := &cobra.Command{
		Use:   "revoke PEER --reason TEXT",
		Short: "Revoke a provider's certificates: its offers leave every renter's search",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			v, err := cl.Revoke(cmd.Context(), api.RevokeRequest{Provider: args[0], Reason: reason, Actor: actor(cmd)})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "revoked %s; the revocation is gossiped to every node\n", v.Provider)
			return nil
		},
	}
	revoke.Flags().StringVar(&reason, "reason", "", "why")
	revoke.MarkFlagRequired("reason")
	challenge := &cobra.Command{
		Use:   "challenge PEER",
		Short: "Ask a provider to run its benchmarks now, against a fresh challenge, and show the result",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			v, err := cl.Challenge(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printBench(cmd.OutOrStdout(), v)
		},
	}
	c.AddCommand(apps, revoke, challenge, payoutsCommand(), disputesCommand(), modelsCommand())
	return c
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func printApplication(w io.Writer, v api.ApplicationView) {
	fmt.Fprintf(w, "application %s from %s: %s", v.ID, v.Provider, v.Status)
	if v.Tier != "" {
		fmt.Fprintf(w, " (tier %s)", v.Tier)
	}
	fmt.Fprintf(w, "\nproposed tier: %s (%s)\n", v.ProposedTier, strings.Join(v.TierReasons, "; "))
	if len(v.CaseByCase) > 0 {
		fmt.Fprintf(w, "case by case: %s (not on the supported list)\n", strings.Join(v.CaseByCase, ", "))
	}
	if a := v.Application; a != nil {
		fmt.Fprintf(w, "applicant: %s <%s>", a.Name, a.Email)
		if a.Company != "" {
			fmt.Fprintf(w, ", %s", a.Company)
		}
		fmt.Fprintf(w, "\nUPS: %v, commitment: %d months\n", a.UPS, a.CommitmentMonths)
		for _, g := range a.GPUs {
			fmt.Fprintf(w, "  %d x %s, host RAM %d GB, internet %g/%g Gbps up/down, %s, %s %s (%s)\n", g.Count, g.Model, g.HostRAMGB,
				g.UpGbps, g.DownGbps, g.Availability, g.Location.City, g.Location.Country, g.Location.Region)
		}
		for _, d := range a.Differences {
			fmt.Fprintf(w, "  detected differs: %s\n", d)
		}
		if m := v.MeasuredLink; m != nil {
			fmt.Fprintf(w, "  measured link (this coordinator, %s): up %.0f Mbit/s, down %.0f Mbit/s, %.1f ms round trip\n",
				m.MeasuredAt.Local().Format(time.DateTime), m.UpMbps, m.DownMbps, m.RTTMilli)
		} else {
			fmt.Fprintln(w, "  measured link: none yet (the applicant's node has not benchmarked against this coordinator)")
		}
		for _, g := range v.LinkGaps {
			fmt.Fprintf(w, "  measured differs: %s\n", g)
		}
		if a.MaintenanceNotes != "" {
			fmt.Fprintf(w, "maintenance: %s\n", a.MaintenanceNotes)
		}
		if a.Answer != "" {
			fmt.Fprintf(w, "latest answer: %s\n", a.Answer)
		}
	}
	fmt.Fprintln(w, "audit trail:")
	for _, e := range v.Events {
		fmt.Fprintf(w, "  %s  %-15s %s  %s\n", e.At.Local().Format(time.DateTime), e.Action, e.Actor, e.Detail)
	}
}
