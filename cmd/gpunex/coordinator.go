package main

import (
	"context"
	"fmt"
	"io"
	"os/user"
	"strings"
	"time"

	"github.com/gpunex/gpunex/node/api"

	"github.com/spf13/cobra"
)

// `gpunex coordinator`: a coordinator's work: the application queue, revocations,
// benchmark challenges, and its payouts (payouts.go), disputes (disputes.go) and model
// catalogue (models.go).

func defaultActor() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return "operator"
}

// actor is who decides, for the audit trail (--as).
func actor(cmd *cobra.Command) string { s, _ := cmd.Flags().GetString("as"); return s }

func coordinatorCommand() *cobra.Command {
	c := &cobra.Command{Use: "coordinator", Short: "Coordinator: review applications, revoke certificates"}
	c.PersistentFlags().String("as", defaultActor(), "who decides, for the audit trail")
	c.AddCommand(applicationsCommand(), revokeCommand(), challengeCommand(), payoutsCommand(), disputesCommand(), modelsCommand())
	return c
}

func applicationsCommand() *cobra.Command {
	apps := &cobra.Command{Use: "applications", Short: "The application queue"}
	apps.AddCommand(applicationsListCommand(), applicationShowCommand(),
		decideCommand("approve ID [--tier enterprise|community] [--note TEXT]", "Approve: the provider gets a signed certificate", "approve", "note", "a note for the provider", false),
		decideCommand("reject ID --reason TEXT", "Reject, saying why", "reject", "reason", "why", true),
		decideCommand("request-info ID --message TEXT", "Ask the provider a question", "request-info", "message", "the question", true),
	)
	return apps
}

func applicationsListCommand() *cobra.Command {
	var status, sortBy string
	var asJSON bool
	c := &cobra.Command{
		Use:   "list [--status pending|info-requested|approved|rejected|revoked] [--sort submitted|due] [--json]",
		Short: "List applications, oldest first or by due date, with each review's age in business days and its due date",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			list := func(cl *api.Client, ctx context.Context) ([]api.ApplicationView, error) {
				return cl.Applications(ctx, status, sortBy)
			}
			return ask(cmd, asJSON, list, printApplications)
		},
	}
	c.Flags().StringVar(&status, "status", "", "only this status")
	c.Flags().StringVar(&sortBy, "sort", "submitted", "submitted (oldest first) or due (the soonest decision due first)")
	jsonArrayFlag(c, &asJSON)
	return c
}

func printApplications(out io.Writer, v []api.ApplicationView) error {
	if len(v) == 0 {
		fmt.Fprintln(out, "no applications")
		return nil
	}
	w := newTable(out)
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
}

func applicationShowCommand() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "show ID [--json]",
		Short: "Show an application, the tier rule's proposal and its audit trail",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			show := func(cl *api.Client, ctx context.Context) (api.ApplicationView, error) {
				return cl.Application(ctx, args[0])
			}
			return ask(cmd, asJSON, show, printApplication)
		},
	}
	jsonFlag(c, &asJSON)
	return c
}

// decideCommand is one of the decisions on an application: action, with its text in the
// flag named flag (required when need).
func decideCommand(use, short, action, flag, flagHelp string, need bool) *cobra.Command {
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

func revokeCommand() *cobra.Command {
	var reason string
	c := &cobra.Command{
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
	c.Flags().StringVar(&reason, "reason", "", "why")
	c.MarkFlagRequired("reason")
	return c
}

func challengeCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "challenge PEER",
		Short: "Ask a provider to run its benchmarks now, against a fresh challenge, and show the result",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			challenge := func(cl *api.Client, ctx context.Context) (api.BenchView, error) { return cl.Challenge(ctx, args[0]) }
			return ask(cmd, false, challenge, printBench)
		},
	}
}

func printApplication(w io.Writer, v api.ApplicationView) error {
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
	return nil
}
