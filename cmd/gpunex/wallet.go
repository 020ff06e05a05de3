package main

import (
	"context"
	"fmt"
	"io"

	"github.com/gpunex/gpunex/node/api"

	"github.com/spf13/cobra"

	"github.com/gpunex/gpunex/protocol"
)

// Money commands: wallet (wallet.go), earnings and price recommend (earnings.go),
// coordinator payouts (payouts.go) and disputes (disputes.go), audit payouts (audit.go).
// docs/settlement.md.

// walletFlags are the flags every wallet command takes.
type walletFlags struct {
	asJSON      bool
	coordinator string
}

func walletCommand() *cobra.Command {
	c := &cobra.Command{Use: "wallet", Short: "The node's Solana wallet and its balance at the coordinator (deposits, escrow holds)"}
	var o walletFlags
	c.PersistentFlags().BoolVar(&o.asJSON, "json", false, "print JSON")
	c.PersistentFlags().StringVar(&o.coordinator, "coordinator", "", "peer ID of the coordinator that keeps the account, one of trust.coordinators (default: the first; a job's hold is at the coordinator that certified its provider)")
	c.AddCommand(walletInitCommand(), walletDepositCommand(&o), walletClaimCommand(&o), walletReleaseCommand(&o), walletBalanceCommand(&o))
	return c
}

func walletInitCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "init",
		Short: "Create the node's Solana wallet keypair (wallet.keypair, mode 0600) and print its address",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			addr, err := cl.WalletInit(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wallet created: %s\nfund it with SOL for fees and USDC, then: gpunex wallet deposit --usdc AMOUNT\n", addr)
			return nil
		},
	}
}

func walletDepositCommand(o *walletFlags) *cobra.Command {
	var usdc string
	c := &cobra.Command{
		Use:   "deposit --usdc AMOUNT",
		Short: "Send USDC from the wallet to the coordinator's treasury (memo naming this node) and have it credited",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := protocol.ParseUSDC(usdc); err != nil {
				return err
			}
			deposit := func(cl *api.Client, ctx context.Context) (api.DepositView, error) {
				return cl.Deposit(ctx, usdc, o.coordinator)
			}
			return ask(cmd, o.asJSON, deposit, printDeposit)
		},
	}
	c.Flags().StringVar(&usdc, "usdc", "", "amount of USDC, e.g. 100 or 12.50")
	c.MarkFlagRequired("usdc")
	return c
}

func printDeposit(w io.Writer, v api.DepositView) error {
	fmt.Fprintf(w, "deposited %s USDC in transaction %s\n%s\n", v.AmountUSDC, v.Signature, v.Explorer)
	if v.Balance != nil {
		fmt.Fprintf(w, "available %s USDC, held %s USDC\n", v.Balance.AvailableUSDC, v.Balance.HeldUSDC)
	}
	return nil
}

func walletClaimCommand(o *walletFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "claim [SIGNATURE]",
		Short: "Have the coordinator credit deposits sent but not credited yet (after a crash or an outage)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sig := ""
			if len(args) == 1 {
				sig = args[0]
			}
			return runClaim(cmd, sig, *o)
		},
	}
}

// runClaim prints the deposits the coordinator credited, and those it could not, before
// its error.
func runClaim(cmd *cobra.Command, sig string, o walletFlags) error {
	cl, err := client(cmd)
	if err != nil {
		return err
	}
	vs, err := cl.ClaimDeposits(cmd.Context(), sig, o.coordinator)
	if o.asJSON {
		printJSON(cmd.OutOrStdout(), vs)
		return err
	}
	for _, v := range vs {
		fmt.Fprintf(cmd.OutOrStdout(), "%s: credited=%v\n", v.Signature, v.Credited)
	}
	if len(vs) == 0 && err == nil {
		fmt.Fprintln(cmd.OutOrStdout(), "every deposit is credited")
	}
	return err
}

func walletReleaseCommand(o *walletFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "release JOB",
		Short: "Ask for the escrow hold of a job that did not run (the provider confirms it never ran)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			release := func(cl *api.Client, ctx context.Context) (api.BalanceView, error) {
				return cl.ReleaseHold(ctx, args[0], o.coordinator)
			}
			return ask(cmd, o.asJSON, release, func(w io.Writer, b api.BalanceView) error {
				fmt.Fprintf(w, "hold released: available %s USDC, held %s USDC\n", b.AvailableUSDC, b.HeldUSDC)
				return nil
			})
		},
	}
}

func walletBalanceCommand(o *walletFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "balance [--json]",
		Short: "Show available and held funds at the coordinator, and the wallet's own USDC",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			balance := func(cl *api.Client, ctx context.Context) (api.BalanceView, error) {
				return cl.Balance(ctx, o.coordinator)
			}
			return ask(cmd, o.asJSON, balance, printBalance)
		},
	}
}

func printBalance(out io.Writer, b api.BalanceView) error {
	fmt.Fprintf(out, "coordinator %s\n", b.Coordinator)
	fmt.Fprintf(out, "available  %s USDC\nheld       %s USDC\ndeposited  %s USDC\ncharged    %s USDC\n", b.AvailableUSDC, b.HeldUSDC, b.DepositedUSDC, b.ChargedUSDC)
	if b.Wallet != "" {
		fmt.Fprintf(out, "wallet     %s holds %s USDC\n", b.Wallet, b.WalletUSDC)
	}
	if len(b.Holds) > 0 {
		w := newTable(out)
		fmt.Fprintln(w, "\nJOB\tPROVIDER\tHOLD USDC\tSTATE\tCHARGED USDC\tEXPIRES")
		for _, h := range b.Holds {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", h.Job, h.Provider, h.AmountUSDC, h.State, dash(h.ChargeUSDC), h.ExpiresAt.Format("2006-01-02 15:04"))
		}
		w.Flush()
	}
	return nil
}
