package api

import (
	"time"

	"github.com/gpunex/gpunex/protocol"
)

// Types of the money routes: wallet, earnings, market advice, payouts, disputes.

// BatchRecordView is a batch with its latest signed record.
type BatchRecordView struct {
	BatchView
	Record []byte `json:"record"`
}

// BundleView is a batch's audit bundle with the other batches known.
type BundleView struct {
	Bundle *protocol.AuditBundle `json:"bundle"`
	Known  [][]byte              `json:"known"`
}

// EarningsQuery selects what `gpunex earnings` shows.
type EarningsQuery struct {
	Period string    `json:"period"` // week or month: the current one
	From   time.Time `json:"from,omitzero"`
	To     time.Time `json:"to,omitzero"`
	By     string    `json:"by"` // gpu or model
}

// EarningRow is one paid-for job.
type EarningRow struct {
	Job            string    `json:"job"`
	EndedAt        time.Time `json:"ended_at"`
	Model          string    `json:"model"`
	GPUs           int       `json:"gpus"`
	Seconds        int64     `json:"seconds"`
	ChargeUSDC     string    `json:"charge_usdc"`
	CommissionUSDC string    `json:"commission_usdc"`
	NetUSDC        string    `json:"net_usdc"`
	Net            int64     `json:"net_micro_usdc"`
	Batch          string    `json:"batch,omitempty"`
	Paid           bool      `json:"paid"`
}

// EarningsGroup sums earnings per GPU or per model.
type EarningsGroup struct {
	Key        string `json:"key"`
	Jobs       int    `json:"jobs"`
	GPUSeconds int64  `json:"gpu_seconds"`
	NetUSDC    string `json:"net_usdc"`
	Net        int64  `json:"net_micro_usdc"`
}

// EarningsView is what `gpunex earnings` prints.
type EarningsView struct {
	From           time.Time       `json:"from"`
	To             time.Time       `json:"to"`
	TotalUSDC      string          `json:"total_usdc"` // net earned in the period
	Total          int64           `json:"total_micro_usdc"`
	ChargedUSDC    string          `json:"charged_usdc"`
	CommissionUSDC string          `json:"commission_usdc"`
	PendingUSDC    string          `json:"pending_usdc"` // earned, not paid yet (any period)
	Pending        int64           `json:"pending_micro_usdc"`
	PaidUSDC       string          `json:"paid_usdc"` // paid out, all time
	By             string          `json:"by"`
	Groups         []EarningsGroup `json:"groups"`
	History        []EarningRow    `json:"history"`
	Payouts        []PayoutRow     `json:"payouts"`
	// Truncated says History lists only the latest jobs of the period (the totals cover
	// them all; Groups only those listed): narrow the period to see the rest.
	Truncated bool `json:"truncated,omitempty"`
	// Unreachable names the trusted coordinators other than the first that did not answer:
	// their earnings are missing from every figure.
	Unreachable []string `json:"unreachable,omitempty"`
}

// PriceAdvice is what `gpunex price recommend` prints for one market.
type PriceAdvice struct {
	protocol.Market
	RecommendedUSDC string `json:"recommended_usdc"`
	MedianListUSDC  string `json:"median_list_usdc"`
	MedianLeaseUSDC string `json:"median_lease_usdc"`
	LeasedGPUHours  string `json:"leased_gpu_hours"`
	// YourPrice is this provider's current price for the model, when it sells it.
	YourPriceUSDC string    `json:"your_price_usdc,omitempty"`
	IssuedAt      time.Time `json:"stats_issued_at"`
	WindowHours   int64     `json:"window_hours"`
	CommissionBPS int       `json:"commission_bps"`
	Coordinator   string    `json:"coordinator"`
}

// PayoutRunOptions are the options of `gpunex coordinator payouts run`.
type PayoutRunOptions struct {
	// Now pays every provider with pending earnings at least Min, whatever its schedule.
	Now bool `json:"now"`
	// Min overrides settlement.min_payout_usdc when set.
	Min *protocol.MicroUSDC `json:"min_micro_usdc,omitempty"`
	// DryRun plans and checks the batch but stores and sends nothing.
	DryRun bool `json:"dry_run"`
}

// PayoutView is one payout as the CLI shows it.
type PayoutView struct {
	Provider    string             `json:"provider"`
	Method      string             `json:"method"`
	Destination string             `json:"destination"`
	Amount      protocol.MicroUSDC `json:"amount_micro_usdc"`
	AmountUSDC  string             `json:"amount_usdc"`
	Receipts    int                `json:"receipts"`
	MerkleRoot  string             `json:"merkle_root"`
	Transaction string             `json:"transaction,omitempty"`
	Explorer    string             `json:"explorer,omitempty"`
	Paid        bool               `json:"paid"`
}

// DisputeView is a renter's dispute of a job's receipt as a coordinator shows it.
type DisputeView struct {
	Job        string    `json:"job"`
	Renter     string    `json:"renter"`
	Provider   string    `json:"provider"`
	ReceivedAt time.Time `json:"received_at"`
	State      string    `json:"state"` // open or decided
	// ClaimedUSDC is what the disputed receipt charges.
	ClaimedUSDC    string `json:"claimed_usdc"`
	RenterSaysUSDC string `json:"renter_says_usdc"`
	// ReportedUSDC is what the receipt the provider reported charges, once it has reported.
	ReportedUSDC string `json:"reported_usdc,omitempty"`
	// Equivocation says the provider reported another receipt of the job than the one the
	// renter disputes: it signed two receipts for one job. A decision charges at most the
	// smaller of ClaimedUSDC and ReportedUSDC.
	Equivocation bool `json:"equivocation,omitempty"`
	// HoldExpiresAt is when the job's hold expires: a dispute the provider never reported
	// by then closes, and the hold returns to the renter.
	HoldExpiresAt time.Time `json:"hold_expires_at,omitzero"`
	// FloorUSDC is what the renter's countersigned checkpoints prove: the least a
	// decision may charge.
	FloorUSDC   string    `json:"floor_usdc,omitempty"`
	Reason      string    `json:"reason"`
	DecidedAt   time.Time `json:"decided_at,omitzero"`
	ChargedUSDC string    `json:"charged_usdc,omitempty"`
	// The signed records: the renter's dispute, the provider's receipt, the decision.
	Dispute  []byte `json:"dispute,omitempty"`
	Receipt  []byte `json:"receipt,omitempty"`
	Decision []byte `json:"decision,omitempty"`
}

// ResolveRequest decides a dispute: For "provider" or "renter", or an amount in USDC.
type ResolveRequest struct {
	For  string `json:"for,omitempty"`
	USDC string `json:"usdc,omitempty"`
	Note string `json:"note,omitempty"`
}

// DeferredView is a payout moved out of a batch, and why.
type DeferredView struct {
	Provider   string    `json:"provider"`
	AmountUSDC string    `json:"amount_usdc"`
	Receipts   int       `json:"receipts"`
	Reason     string    `json:"reason"`
	At         time.Time `json:"at"`
}

// BatchView is a payout batch as the CLI shows it.
type BatchView struct {
	BatchID      string       `json:"batch_id"`
	State        string       `json:"state"`
	DryRun       bool         `json:"dry_run,omitempty"`
	CreatedAt    time.Time    `json:"created_at"`
	Payouts      []PayoutView `json:"payouts"`
	TotalUSDC    string       `json:"total_usdc"`
	Total        int64        `json:"total_micro_usdc"`
	Transactions []string     `json:"transactions"`
	FeesLamports uint64       `json:"fees_lamports"`
	MerkleRoot   string       `json:"merkle_root"`
	Error        string       `json:"error,omitempty"`
	// Skipped says why providers with pending earnings are not in the batch.
	Skipped []string `json:"skipped,omitempty"`
	// Deferred are the payouts taken out of the batch before they were sent (a closed
	// token account, repeated failures, the operator's replan): the next batch pays them.
	Deferred []DeferredView `json:"deferred,omitempty"`
}

// DepositView is what `gpunex wallet deposit` prints.
type DepositView struct {
	Signature  string             `json:"signature"`
	Amount     protocol.MicroUSDC `json:"amount_micro_usdc"`
	AmountUSDC string             `json:"amount_usdc"`
	Credited   bool               `json:"credited"`
	Explorer   string             `json:"explorer,omitempty"`
	Balance    *BalanceView       `json:"balance,omitempty"`
}

// BalanceView is a renter's balance at the coordinator.
type BalanceView struct {
	// Coordinator is the coordinator that keeps this account (GET /v1/wallet/balance).
	Coordinator   string             `json:"coordinator,omitempty"`
	Available     protocol.MicroUSDC `json:"available_micro_usdc"`
	Held          protocol.MicroUSDC `json:"held_micro_usdc"`
	AvailableUSDC string             `json:"available_usdc"`
	HeldUSDC      string             `json:"held_usdc"`
	DepositedUSDC string             `json:"deposited_usdc"`
	ChargedUSDC   string             `json:"charged_usdc"`
	Holds         []HoldView         `json:"holds"`
	// Wallet is the node's own Solana wallet and its USDC, when configured.
	Wallet     string `json:"wallet,omitempty"`
	WalletUSDC string `json:"wallet_usdc,omitempty"`
}

// HoldView is one escrow hold.
type HoldView struct {
	Job        string    `json:"job"`
	Provider   string    `json:"provider"`
	AmountUSDC string    `json:"amount_usdc"`
	State      string    `json:"state"`
	ChargeUSDC string    `json:"charge_usdc,omitempty"`
	ExpiresAt  time.Time `json:"expires_at"`
}

// WalletInfo is a coordinator's treasury facts (see protocol.TreasuryInfo).
type WalletInfo = protocol.TreasuryInfo

// PayoutRow is one payout of a provider (see protocol.PayoutRow).
type PayoutRow = protocol.PayoutRow
