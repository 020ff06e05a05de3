package protocol

import "time"

// The wallet stream (WalletProtocol): one JSON request from a renter or a provider to its
// coordinator, one JSON answer, and the records they carry (docs/protocols/settlement.md).

// Size limits of the wallet stream's frames.
const (
	MaxWalletRequest  = 32 << 10
	MaxWalletResponse = MaxPayoutBatchSize * 4
)

// WalletRequest is one request on the wallet stream.
type WalletRequest struct {
	Op        string    `json:"op"` // info, claim, balance, hold, release, settings, earnings, batches, bundle, dispute, abandoned
	Signature string    `json:"signature,omitempty"`
	Job       string    `json:"job,omitempty"`
	Provider  string    `json:"provider,omitempty"`
	Amount    MicroUSDC `json:"amount,omitempty"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	Settings  []byte    `json:"settings,omitempty"`
	// Dispute is a renter's signed dispute of the receipt in Receipt.
	Dispute []byte `json:"dispute,omitempty"`
	Receipt []byte `json:"receipt,omitempty"`
	// A renter's account of a job its provider abandoned (op abandoned): the lease and the
	// latest usage checkpoint, each with the renter's countersignature.
	Lease                []byte `json:"lease,omitempty"`
	LeaseCountersig      []byte `json:"lease_countersignature,omitempty"`
	Checkpoint           []byte `json:"checkpoint,omitempty"`
	CheckpointCountersig []byte `json:"checkpoint_countersignature,omitempty"`
	Batch                string `json:"batch,omitempty"`
	// From and To bound the earnings an earnings request lists (by end of job).
	From time.Time `json:"from,omitzero"`
	To   time.Time `json:"to,omitzero"`
	// After continues a batches listing after this batch ID (the last one of the previous
	// page); Offset continues a bundle's receipts from this index.
	After  string `json:"after,omitempty"`
	Offset int    `json:"offset,omitempty"`
}

// WalletResponse answers it.
type WalletResponse struct {
	Error string `json:"error,omitempty"`
	// Now is the coordinator's clock as it answered (every answer carries it): a node
	// measures its own clock's offset from it (`gpunex doctor`). Records are refused past
	// MaxClockSkew, so an offset is worth knowing before it costs anything.
	Now      time.Time       `json:"now,omitzero"`
	Info     *TreasuryInfo   `json:"info,omitempty"`
	Credited bool            `json:"credited,omitempty"`
	Deposit  *Deposit        `json:"deposit,omitempty"`
	Account  *Account        `json:"account,omitempty"`
	Holds    []Hold          `json:"holds,omitempty"`
	Hold     []byte          `json:"hold,omitempty"`
	Earnings *EarningsAnswer `json:"earnings,omitempty"`
	Batches  [][]byte        `json:"batches,omitempty"`
	// More says a batches or bundle answer has another page: ask again with After set to
	// the last batch ID received, or Offset to the receipts received so far.
	More     bool              `json:"more,omitempty"`
	Bundle   *AuditBundle      `json:"bundle,omitempty"`
	Deposits []Deposit         `json:"deposits,omitempty"`
	Extra    map[string]string `json:"extra,omitempty"`
}

// Account is a renter's balance at the coordinator.
type Account struct {
	Renter    string    `json:"renter"`
	Available MicroUSDC `json:"available"`
	Held      MicroUSDC `json:"held"`
	Deposited MicroUSDC `json:"deposited"`
	Charged   MicroUSDC `json:"charged"`
	// OpenHolds counts the holds still open (held, pending, disputed).
	OpenHolds int `json:"open_holds"`
}

// Deposit is a confirmed on-chain deposit, credited once.
type Deposit struct {
	Signature  string    `json:"signature"`
	Renter     string    `json:"renter"`
	Amount     MicroUSDC `json:"amount"`
	CreditedAt time.Time `json:"credited_at"`
}

// Hold is an escrow hold for one job.
type Hold struct {
	Job      string    `json:"job"`
	Renter   string    `json:"renter"`
	Provider string    `json:"provider"`
	Amount   MicroUSDC `json:"amount"`
	// CommissionBPS is the commission rate the signed hold fixes for this job.
	CommissionBPS int       `json:"commission_bps"`
	IssuedAt      time.Time `json:"issued_at"`
	ExpiresAt     time.Time `json:"expires_at"`
	Raw           []byte    `json:"raw"` // the signed EscrowHold
	State         string    `json:"state"`
	Charge        MicroUSDC `json:"charge,omitempty"`
	Receipt       string    `json:"receipt,omitempty"` // hex SHA-256 of the receipt charged
	// Rule names the charge rule that applied (protocol.Rule*).
	Rule string `json:"rule,omitempty"`
	// PendingUntil is when a pending hold is charged PendingCharge under the checkpoint
	// rule, unless the renter countersigns or disputes the receipt first.
	PendingUntil  time.Time `json:"pending_until,omitzero"`
	PendingCharge MicroUSDC `json:"pending_charge,omitempty"`
}

// Earning is what a provider earned from one receipt.
type Earning struct {
	Receipt    string    `json:"receipt"` // hex SHA-256 of the receipt envelope
	Job        string    `json:"job"`
	Provider   string    `json:"provider"`
	Renter     string    `json:"renter"`
	Model      string    `json:"model"`
	GPUs       int       `json:"gpus"`
	Seconds    int64     `json:"seconds"`
	EndedAt    time.Time `json:"ended_at"`
	Charge     MicroUSDC `json:"charge"`
	Commission MicroUSDC `json:"commission"`
	Net        MicroUSDC `json:"net"`
	Batch      string    `json:"batch,omitempty"` // the payout batch paying it; "" while pending
	// Rule names the charge rule that applied (protocol.Rule*).
	Rule string `json:"rule,omitempty"`
}

// TreasuryInfo is what a coordinator tells about its treasury (the wallet stream's info).
type TreasuryInfo struct {
	Coordinator   string    `json:"coordinator"`
	Treasury      string    `json:"treasury,omitempty"`
	Mint          string    `json:"mint,omitempty"`
	Cluster       string    `json:"cluster,omitempty"`
	CommissionBPS int       `json:"commission_bps"`
	MinPayout     MicroUSDC `json:"min_payout_micro_usdc"`
	DepositMemo   string    `json:"deposit_memo"`
}

// PayoutRow is one payout to this provider.
type PayoutRow struct {
	Batch       string    `json:"batch"`
	IssuedAt    time.Time `json:"issued_at"`
	State       string    `json:"state"`
	Method      string    `json:"method"`
	Destination string    `json:"destination"`
	AmountUSDC  string    `json:"amount_usdc"`
	Amount      int64     `json:"amount_micro_usdc"`
	Receipts    int       `json:"receipts"`
	Paid        bool      `json:"paid"`
	Transaction string    `json:"transaction,omitempty"`
	Explorer    string    `json:"explorer,omitempty"`
}

// EarningsAnswer is a coordinator's answer to a provider's earnings request.
type EarningsAnswer struct {
	// Rows are the earnings of jobs that ended within the period, oldest first: the
	// latest maxEarningRows of them (Truncated then says some were left out).
	Rows      []EarningRow `json:"rows"`
	Truncated bool         `json:"truncated,omitempty"`
	// Net, Charge and Commission sum every earning of the period, listed or not.
	Net        MicroUSDC `json:"net_micro_usdc"`
	Charge     MicroUSDC `json:"charge_micro_usdc"`
	Commission MicroUSDC `json:"commission_micro_usdc"`
	// Pending is every earning not paid yet, and Paid every payout made, whatever the
	// period.
	Pending MicroUSDC `json:"pending_micro_usdc"`
	Paid    MicroUSDC `json:"paid_micro_usdc"`
	// Payouts are the provider's payouts, newest first (at most maxPayoutRows).
	Payouts []PayoutRow `json:"payouts"`
}

// EarningRow is one earning and whether it is paid.
type EarningRow struct {
	Earning
	Paid bool `json:"paid"`
}
