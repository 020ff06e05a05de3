package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/gpunex/gpunex/node/api"

	"github.com/spf13/cobra"

	"github.com/gpunex/gpunex/protocol"
)

// `gpunex apply`: a provider applies to the coordinator to be certified
// (docs/onboarding.md); the questions asked on a terminal are in questions.go.

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
			if template {
				fmt.Fprintf(cmd.OutOrStdout(), applicationTemplate, supportedModels(nodeModels(cmd)))
				return nil
			}
			return runApply(cmd, file, interactive)
		},
	}
	c.Flags().StringVar(&file, "file", "", "application TOML file")
	c.Flags().BoolVar(&template, "template", false, "print a commented application template")
	c.Flags().BoolVar(&interactive, "interactive", false, "ask the questions on standard input even when it is not a terminal")
	c.AddCommand(applyStatusCommand(), applyAnswerCommand())
	return c
}

// runApply reads the application from file, or asks it on the terminal, and has the node
// sign and deliver it.
func runApply(cmd *cobra.Command, file string, interactive bool) error {
	out := cmd.OutOrStdout()
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
}

func applyStatusCommand() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "status [--json]",
		Short: "Show the application: queued, pending, info-requested (with the question), approved (with tier), rejected (with reason)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return ask(cmd, asJSON, (*api.Client).ApplyStatus, printOwnApplication)
		},
	}
	jsonFlag(c, &asJSON)
	return c
}

func applyAnswerCommand() *cobra.Command {
	var message string
	c := &cobra.Command{
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
	c.Flags().StringVar(&message, "message", "", "the answer")
	c.MarkFlagRequired("message")
	return c
}

func printOwnApplication(w io.Writer, v api.OwnApplicationView) error {
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
	return nil
}
