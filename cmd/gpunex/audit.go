package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpunex/gpunex/ledger/audit"
	"github.com/gpunex/gpunex/node/config"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/spf13/cobra"

	"github.com/gpunex/gpunex/protocol"
)

// `gpunex audit payouts`: anyone with the signed records and a Solana RPC endpoint checks a
// coordinator's payout batch (docs/settlement.md).

func auditCommand() *cobra.Command {
	c := &cobra.Command{Use: "audit", Short: "Audit the coordinator's settlement"}
	var batch, rpc string
	var coordinators []string
	var asJSON bool
	payouts := &cobra.Command{
		Use:   "payouts --batch FILE|ID --rpc URL [--json]",
		Short: "Recompute a payout batch from the signed receipts and check its transactions on Solana; exits 1 on any discrepancy",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAuditPayouts(cmd, batch, audit.Options{RPC: rpc}, coordinators, asJSON)
		},
	}
	payouts.Flags().StringVar(&batch, "batch", "", "an audit bundle file, or a batch ID fetched through the node")
	payouts.Flags().StringVar(&rpc, "rpc", "", "Solana JSON-RPC endpoint")
	payouts.Flags().StringSliceVar(&coordinators, "coordinator", nil, "trusted coordinator peer ID (default: trust.coordinators of --home)")
	jsonFlag(payouts, &asJSON)
	payouts.MarkFlagRequired("batch")
	payouts.MarkFlagRequired("rpc")
	c.AddCommand(payouts)
	return c
}

// runAuditPayouts audits the batch with o (its RPC endpoint set) against the coordinators
// trusted, remembers a batch that passes, and exits 1 on any discrepancy.
func runAuditPayouts(cmd *cobra.Command, batch string, o audit.Options, coordinators []string, asJSON bool) error {
	bundle, known, err := readAuditBundle(cmd, batch)
	if err != nil {
		return err
	}
	h := home(cmd).Dir
	knownBatches, knownJobs := loadKnownBatches(h)
	o.Known, o.KnownJobs = append(known, knownBatches...), knownJobs
	for _, s := range coordinators {
		id, err := peer.Decode(s)
		if err != nil {
			return fmt.Errorf("--coordinator %q: %w", s, err)
		}
		o.Trust = append(o.Trust, id)
	}
	if len(o.Trust) == 0 {
		if cfg, err := config.LoadConfig(filepath.Join(h, config.ConfigFile)); err == nil {
			o.Trust, _ = cfg.TrustedCoordinators()
		}
	}
	rep := audit.Batch(cmd.Context(), bundle, o)
	if rep.OK {
		rememberBatch(h, rep, bundle.Batch)
	}
	if asJSON {
		printJSON(cmd.OutOrStdout(), rep)
	} else {
		printAudit(cmd.OutOrStdout(), rep)
	}
	if !rep.OK {
		return exitError{1}
	}
	return nil
}

// readAuditBundle reads the audit bundle of a file, or asks the node for the bundle of a
// batch ID; known are the other batches' records the bundle came with.
func readAuditBundle(cmd *cobra.Command, batch string) (bundle protocol.AuditBundle, known [][]byte, err error) {
	data, err := os.ReadFile(batch)
	if err == nil {
		var f struct {
			protocol.AuditBundle
			Bundle *protocol.AuditBundle `json:"bundle"`
			Known  [][]byte              `json:"known"`
		}
		if err := json.Unmarshal(data, &f); err != nil {
			return bundle, nil, fmt.Errorf("%s: not an audit bundle (gpunex coordinator payouts show ID --bundle writes one): %w", batch, err)
		}
		bundle, known = f.AuditBundle, f.Known
		if f.Bundle != nil {
			bundle = *f.Bundle
		}
		return bundle, known, nil
	}
	if !errors.Is(err, os.ErrNotExist) || strings.ContainsAny(batch, "/.") {
		return bundle, nil, err
	}
	cl, err := client(cmd)
	if err != nil {
		return bundle, nil, fmt.Errorf("batch %s is not a file, and fetching it needs a running node: %w", batch, err)
	}
	v, err := cl.Bundle(cmd.Context(), batch)
	if err != nil {
		return bundle, nil, err
	}
	return *v.Bundle, v.Known, nil
}

func printAudit(out io.Writer, rep audit.Report) {
	trust := "trusted"
	if !rep.Trusted {
		trust = "NOT checked against trusted coordinators (give --coordinator)"
	}
	fmt.Fprintf(out, "batch %s by coordinator %s (%s), state %s\n%d payouts, %d receipts (%d countersigned by their renter), %d transactions, %s USDC; %d other batches known\n",
		rep.Batch, rep.Coordinator, trust, rep.State, rep.Payouts, rep.Receipts, rep.Countersigned, rep.Transactions, rep.TotalUSDC, rep.KnownBatches)
	for _, d := range rep.Discrepancies {
		fmt.Fprintf(out, "DISCREPANCY: %s\n", d)
	}
	for _, u := range rep.Unverifiable {
		fmt.Fprintf(out, "not checkable: %s\n", u)
	}
	if rep.OK && len(rep.Unverifiable) > 0 {
		fmt.Fprintf(out, "OK: every amount recomputed from the signed receipts; the USDC payouts found on chain; %d bank payouts not checkable\n", len(rep.Unverifiable))
	} else if rep.OK {
		fmt.Fprintln(out, "OK: every amount recomputed from the signed receipts and found on chain")
	}
}

// loadKnownBatches reads the batch records this auditor passed before (home/audit/), and
// the jobs each paid.
func loadKnownBatches(home string) ([][]byte, map[string]string) {
	dir := filepath.Join(home, "audit")
	entries, _ := os.ReadDir(dir)
	var records [][]byte
	jobs := map[string]string{}
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasSuffix(name, ".batch"):
			if b, err := os.ReadFile(filepath.Join(dir, name)); err == nil {
				records = append(records, b)
			}
		case strings.HasSuffix(name, ".jobs"):
			var list []string
			if b, err := os.ReadFile(filepath.Join(dir, name)); err == nil && json.Unmarshal(b, &list) == nil {
				for _, j := range list {
					jobs[j] = strings.TrimSuffix(name, ".jobs")
				}
			}
		}
	}
	return records, jobs
}

// rememberBatch keeps a passed batch's record and jobs, for the double-payment checks of
// later audits.
func rememberBatch(home string, rep audit.Report, record []byte) {
	if rep.Batch == "" || strings.ContainsAny(rep.Batch, "/\\") {
		return
	}
	dir := filepath.Join(home, "audit")
	if os.MkdirAll(dir, 0o700) != nil {
		return
	}
	os.WriteFile(filepath.Join(dir, rep.Batch+".batch"), record, 0o600)
	if b, err := json.Marshal(rep.Jobs); err == nil {
		os.WriteFile(filepath.Join(dir, rep.Batch+".jobs"), b, 0o600)
	}
}
