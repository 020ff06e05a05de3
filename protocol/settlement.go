package protocol

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
	"math/bits"
	"slices"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Money records: the coordinator's escrow hold for a job, a provider's payout settings, the
// coordinator's payout batches and market statistics. See docs/protocols/settlement.md.

// Record kinds of settlement.
const (
	KindEscrowHold     Kind = "escrow-hold"
	KindPayoutSettings Kind = "payout-settings"
	KindPayoutBatch    Kind = "payout-batch"
	KindMarketStats    Kind = "market-stats"
)

const (
	// SettlementVersion is the payload version of every settlement record.
	SettlementVersion = 1
	// MaxEscrowHoldSize caps an escrow hold envelope.
	MaxEscrowHoldSize = 2 << 10
	// MaxPayoutSettingsSize caps a payout settings envelope.
	MaxPayoutSettingsSize = 2 << 10
	// MaxPayoutBatchSize caps a payout batch envelope: it lists about 50,000 receipts.
	MaxPayoutBatchSize = 4 << 20
	// MaxMarketStatsSize caps a market statistics envelope.
	MaxMarketStatsSize = 64 << 10
	// HoldGrace is how long after a job's latest end its hold stays, waiting for the
	// provider's final receipt, before it returns to the renter.
	HoldGrace = 24 * time.Hour
	// MaxCommissionBPS is the highest commission a coordinator may take: 50%.
	MaxCommissionBPS = 5000
)

// Protocol IDs and topics of settlement.
const (
	// WalletProtocol carries a renter's and a provider's requests to the coordinator:
	// treasury facts, deposit claims, balances, escrow holds, payout settings, batches.
	WalletProtocol = "/gpunex/wallet/2.0.0"
	// HoldReleaseProtocol is served by providers: the coordinator asks whether a job ever
	// ran before it releases the job's escrow hold at the renter's request.
	HoldReleaseProtocol = "/gpunex/hold-release/1.0.0"
	// MarketTopic carries the coordinator's signed market statistics.
	MarketTopic = "/gpunex/market/1"
)

// HoldRelease is the frame of HoldReleaseProtocol: the coordinator's question (Job) and the
// provider's answer (Release, or Reason why not).
type HoldRelease struct {
	Job     string `json:"job"`
	Release bool   `json:"release,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// MaxHoldReleaseFrame caps a hold-release frame.
const MaxHoldReleaseFrame = 1024

// Payout methods and schedules.
const (
	PayoutUSDC    = "usdc"
	PayoutBank    = "bank"
	PayoutWeekly  = "weekly"
	PayoutMonthly = "monthly"
)

// DepositMemo is the memo a deposit transaction carries: it names the renter credited.
func DepositMemo(renter peer.ID) string { return "gpunex deposit " + renter.String() }

// PayoutMemo is the memo of every transaction of a payout batch.
func PayoutMemo(batch string) string { return "gpunex payout " + batch }

// BankCent is one cent of USD in micro-USDC: bank payouts are whole cents.
const BankCent MicroUSDC = 10_000

// HoldAmount is the most a job may cost: its maximum price for all its GPUs over its
// longest run, plus the one second a receipt may round up to (docs/protocols/jobs.md).
func HoldAmount(maxPrice MicroUSDC, gpus int, maxSeconds int64) MicroUSDC {
	return Cost(maxPrice, gpus, maxSeconds+1)
}

// Charge is what a receipt costs the renter: its amount, never more than the hold.
func Charge(receiptAmount, held MicroUSDC) MicroUSDC { return max(0, min(receiptAmount, held)) }

// Commission is the coordinator's share of a charge in basis points, rounded down to the
// micro-USDC (in the provider's favour); the provider earns charge - commission, so a
// charge is always split exactly, never creating or losing a micro-USDC.
func Commission(charge MicroUSDC, bps int) MicroUSDC {
	if charge <= 0 || bps <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(charge), uint64(bps))
	q, _ := bits.Div64(hi, lo, 10_000) // bps <= 10,000: the quotient fits
	return MicroUSDC(q)
}

// EscrowHold is the coordinator's signed promise that a renter's funds are set aside for
// one job: a provider starts the job only against it.
type EscrowHold struct {
	Version     int       `json:"version"`
	Coordinator string    `json:"coordinator"`
	Renter      string    `json:"renter"`
	Provider    string    `json:"provider"`
	Job         string    `json:"job"`
	Amount      MicroUSDC `json:"amount_micro_usdc"`
	// CommissionBPS is the coordinator's commission on this job's charge, fixed when the
	// hold is made: a later change of rate does not touch it.
	CommissionBPS int       `json:"commission_bps"`
	IssuedAt      time.Time `json:"issued_at"`
	// ExpiresAt is when the hold returns to the renter if no receipt charged it.
	ExpiresAt time.Time `json:"expires_at"`
}

// SignedHold is an escrow hold that passed the checks.
type SignedHold struct {
	EscrowHold
	Signer peer.ID
	Raw    []byte
}

// CheckHold opens an escrow hold: signed by a trusted coordinator, well formed, unexpired.
func CheckHold(raw []byte, now time.Time, trust Trust) (*SignedHold, error) {
	env, err := openKind(raw, KindEscrowHold)
	if err != nil {
		return nil, err
	}
	var h EscrowHold
	if err := decodePayload(env, SettlementVersion, &h, func() int { return h.Version }); err != nil {
		return nil, err
	}
	if h.Coordinator != env.signerText {
		return nil, fmt.Errorf("%w: hold names coordinator %s but is signed by %s", ErrWrongSigner, h.Coordinator, env.Signer)
	}
	if _, err := peer.Decode(h.Renter); err != nil {
		return nil, invalid(KindEscrowHold, "renter %q is not a peer ID", h.Renter)
	}
	if _, err := peer.Decode(h.Provider); err != nil {
		return nil, invalid(KindEscrowHold, "provider %q is not a peer ID", h.Provider)
	}
	if !ValidJobID(h.Job) || h.Amount <= 0 || h.IssuedAt.IsZero() || !h.ExpiresAt.After(h.IssuedAt) || h.CommissionBPS < 0 || h.CommissionBPS > MaxCommissionBPS {
		return nil, invalid(KindEscrowHold, "job, amount or period out of range")
	}
	if err := trust.check(KindEscrowHold, env.Signer); err != nil {
		return nil, err
	}
	if err := checkIssued(KindEscrowHold, h.IssuedAt, h.ExpiresAt, now); err != nil {
		return nil, err
	}
	return &SignedHold{EscrowHold: h, Signer: env.Signer, Raw: raw}, nil
}

// CheckHoldCovers applies a provider's rules to a hold for a proposal it is about to
// lease at price: same job, renter and provider, enough to pay the longest run at that
// price, and lasting past the lease's end plus the grace for the receipt.
func CheckHoldCovers(h *SignedHold, p *Proposal, price MicroUSDC, leaseEnds time.Time) error {
	switch {
	case h.Job != p.Job || h.Renter != p.Renter || h.Provider != p.Provider:
		return invalid(KindEscrowHold, "hold is for job %s of %s on %s, not this proposal", h.Job, h.Renter, h.Provider)
	case h.Amount < HoldAmount(price, p.GPUs, p.MaxSeconds):
		return invalid(KindEscrowHold, "hold of %s USDC does not cover the job's maximum cost of %s USDC", h.Amount, HoldAmount(price, p.GPUs, p.MaxSeconds))
	case h.ExpiresAt.Before(leaseEnds.Add(HoldGrace)):
		return invalid(KindEscrowHold, "hold expires at %s, before the lease ends plus %s", h.ExpiresAt.UTC().Format(time.RFC3339), HoldGrace)
	}
	return nil
}

// PayoutSettings is a provider's signed choice of how and when it is paid.
type PayoutSettings struct {
	Version  int       `json:"version"`
	Provider string    `json:"provider"`
	Seq      uint64    `json:"seq"`
	IssuedAt time.Time `json:"issued_at"`
	Method   string    `json:"method"`   // usdc or bank
	Schedule string    `json:"schedule"` // weekly or monthly
	// SolanaAddress is the wallet (owner) paid in USDC; its associated token account
	// receives the transfer.
	SolanaAddress string `json:"solana_address,omitempty"`
	// Bank transfer details.
	AccountName string `json:"account_name,omitempty"`
	IBAN        string `json:"iban,omitempty"`
	BIC         string `json:"bic,omitempty"`
}

// Destination is where the settings send money as a payout batch names it: the Solana
// address, or the IBAN masked (MaskIBAN): batches are public, bank details are not.
func (s PayoutSettings) Destination() string {
	if s.Method == PayoutBank {
		return MaskIBAN(s.IBAN)
	}
	return s.SolanaAddress
}

// MaskIBAN keeps an IBAN's country code, check digits and last four characters:
// "FR7630006000011234567890189" is "FR76 **** 0189".
func MaskIBAN(iban string) string {
	if len(iban) < 8 {
		return "****"
	}
	return iban[:4] + " **** " + iban[len(iban)-4:]
}

// Validate names the first field that is wrong.
func (s PayoutSettings) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	switch s.Schedule {
	case PayoutWeekly, PayoutMonthly:
	default:
		return bad("schedule", "%q: expected weekly or monthly", s.Schedule)
	}
	switch s.Method {
	case PayoutUSDC:
		if !ValidSolanaAddress(s.SolanaAddress) {
			return bad("solana_address", "%q is not a Solana address (base58, 32 bytes)", s.SolanaAddress)
		}
	case PayoutBank:
		if strings.TrimSpace(s.AccountName) == "" || len(s.AccountName) > 70 {
			return bad("account_name", "the account holder's name is required (at most 70 characters)")
		}
		if err := CheckIBAN(s.IBAN); err != nil {
			return bad("iban", "%v", err)
		}
		if !validBIC(s.BIC) {
			return bad("bic", "%q is not a BIC (8 or 11 letters and digits)", s.BIC)
		}
	default:
		return bad("method", "%q: expected usdc or bank", s.Method)
	}
	return nil
}

// CheckPayoutSettings opens a provider's payout settings.
func CheckPayoutSettings(raw []byte, now time.Time) (*PayoutSettings, peer.ID, error) {
	env, err := openKind(raw, KindPayoutSettings)
	if err != nil {
		return nil, "", err
	}
	var s PayoutSettings
	if err := decodePayload(env, SettlementVersion, &s, func() int { return s.Version }); err != nil {
		return nil, "", err
	}
	if s.Provider != env.signerText {
		return nil, "", fmt.Errorf("%w: settings name provider %s but are signed by %s", ErrWrongSigner, s.Provider, env.Signer)
	}
	if s.Seq == 0 || s.IssuedAt.IsZero() {
		return nil, "", invalid(KindPayoutSettings, "seq and issued_at are required")
	}
	if err := s.Validate(); err != nil {
		return nil, "", invalid(KindPayoutSettings, "%v", err)
	}
	if err := checkIssued(KindPayoutSettings, s.IssuedAt, time.Time{}, now); err != nil {
		return nil, "", err
	}
	return &s, env.Signer, nil
}

const base58Alphabet = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"

// ValidSolanaAddress reports whether s is base58 text of exactly 32 bytes.
func ValidSolanaAddress(s string) bool {
	if len(s) < 32 || len(s) > 44 {
		return false
	}
	n := new(big.Int)
	radix := big.NewInt(58)
	zeros := 0
	for i, c := range s {
		d := strings.IndexRune(base58Alphabet, c)
		if d < 0 {
			return false
		}
		if d == 0 && i == zeros {
			zeros++
		}
		n.Mul(n, radix).Add(n, big.NewInt(int64(d)))
	}
	return zeros+len(n.Bytes()) == 32
}

// CheckIBAN checks an IBAN's shape and its ISO 13616 mod-97 check digits. Spaces are not
// allowed: the settings carry the electronic form.
func CheckIBAN(iban string) error {
	if len(iban) < 15 || len(iban) > 34 {
		return fmt.Errorf("%q: an IBAN has 15 to 34 characters, without spaces", iban)
	}
	for i, c := range iban {
		letter, digit := c >= 'A' && c <= 'Z', c >= '0' && c <= '9'
		if (i < 2 && !letter) || (i >= 2 && i < 4 && !digit) || !(letter || digit) {
			return fmt.Errorf("%q: expected two capital letters, two check digits, then capital letters and digits", iban)
		}
	}
	rem := 0
	for _, c := range iban[4:] + iban[:4] {
		if c >= 'A' {
			rem = (rem*100 + int(c-'A'+10)) % 97
		} else {
			rem = (rem*10 + int(c-'0')) % 97
		}
	}
	if rem != 1 {
		return fmt.Errorf("%q: check digits do not match", iban)
	}
	return nil
}

func validBIC(s string) bool {
	if len(s) != 8 && len(s) != 11 {
		return false
	}
	for i, c := range s {
		letter, digit := c >= 'A' && c <= 'Z', c >= '0' && c <= '9'
		if (i < 6 && !letter) || !(letter || digit) {
			return false
		}
	}
	return true
}

// Payout is one provider's payment in a batch.
type Payout struct {
	Provider    string    `json:"provider"`
	Method      string    `json:"method"`
	Destination string    `json:"destination"` // Solana address, or masked IBAN (MaskIBAN)
	Amount      MicroUSDC `json:"amount_micro_usdc"`
	// Rounding is what a bank payout leaves unpaid to pay whole cents (under 0.01 USDC,
	// kept by the treasury); zero for USDC payouts. Amount + Rounding is what the
	// receipts earned.
	Rounding MicroUSDC `json:"rounding_micro_usdc,omitempty"`
	// Receipts are the hex SHA-256 of every receipt envelope this payout pays, sorted.
	Receipts   []string `json:"receipts"`
	MerkleRoot string   `json:"merkle_root"`
	// Transaction is the signature of the Solana transaction that carried it (usdc), or
	// the bank reference once confirmed (bank).
	Transaction string `json:"transaction,omitempty"`
	Paid        bool   `json:"paid"`
}

// PayoutBatch is a coordinator's signed list of payouts. It is signed again, with a higher
// sequence, as its transactions settle; the last one says which transaction paid what.
type PayoutBatch struct {
	Version       int       `json:"version"`
	Batch         string    `json:"batch"`
	Coordinator   string    `json:"coordinator"`
	Seq           uint64    `json:"seq"`
	IssuedAt      time.Time `json:"issued_at"`
	State         string    `json:"state"` // planned, settling, settled
	Cluster       string    `json:"cluster,omitempty"`
	Mint          string    `json:"mint,omitempty"`
	Treasury      string    `json:"treasury,omitempty"`
	CommissionBPS int       `json:"commission_bps"`
	Payouts       []Payout  `json:"payouts"`
	// MerkleRoot covers every receipt the batch pays.
	MerkleRoot   string   `json:"merkle_root"`
	Transactions []string `json:"transactions,omitempty"`
}

// Batch states.
const (
	BatchPlanned  = "planned"
	BatchSettling = "settling"
	BatchSettled  = "settled"
)

// SignedBatch is a payout batch that passed the checks.
type SignedBatch struct {
	PayoutBatch
	Signer peer.ID
	Raw    []byte
}

// CheckBatch opens a payout batch and checks what it can alone: signer, shape, each
// payout's Merkle root over its receipts and the batch's root over all of them, no receipt
// twice. Amounts are checked against the receipts by the auditor.
func CheckBatch(raw []byte, trust Trust) (*SignedBatch, error) {
	env, err := openKind(raw, KindPayoutBatch)
	if err != nil {
		return nil, err
	}
	var b PayoutBatch
	if err := decodePayload(env, SettlementVersion, &b, func() int { return b.Version }); err != nil {
		return nil, err
	}
	if b.Coordinator != env.signerText {
		return nil, fmt.Errorf("%w: batch names coordinator %s but is signed by %s", ErrWrongSigner, b.Coordinator, env.Signer)
	}
	if err := trust.check(KindPayoutBatch, env.Signer); err != nil {
		return nil, err
	}
	bad := func(format string, args ...any) error { return invalid(KindPayoutBatch, format, args...) }
	if b.Batch == "" || len(b.Batch) > 64 || b.Seq == 0 || b.CommissionBPS < 0 || b.CommissionBPS > MaxCommissionBPS {
		return nil, bad("batch id, seq or commission out of range")
	}
	seen := map[string]bool{}
	var all []string
	for i, p := range b.Payouts {
		if _, err := peer.Decode(p.Provider); err != nil {
			return nil, bad("payout %d: provider %q is not a peer ID", i, p.Provider)
		}
		if p.Amount < 0 || len(p.Receipts) == 0 {
			return nil, bad("payout %d: negative amount or no receipts", i)
		}
		if p.Rounding < 0 || p.Rounding >= BankCent || (p.Rounding != 0 && p.Method != PayoutBank) {
			return nil, bad("payout %d: rounding of %d micro-USDC (only bank payouts round, by less than a cent)", i, p.Rounding)
		}
		if !slices.IsSorted(p.Receipts) {
			return nil, bad("payout %d: receipts are not sorted", i)
		}
		for _, r := range p.Receipts {
			if seen[r] {
				return nil, bad("receipt %s is paid twice in the batch", r)
			}
			seen[r] = true
		}
		root, err := MerkleRoot(p.Receipts)
		if err != nil {
			return nil, bad("payout %d: %v", i, err)
		}
		if root != p.MerkleRoot {
			return nil, bad("payout %d: Merkle root %s does not match its receipts (%s)", i, p.MerkleRoot, root)
		}
		all = append(all, p.Receipts...)
	}
	slices.Sort(all)
	if len(all) > 0 {
		root, _ := MerkleRoot(all)
		if root != b.MerkleRoot {
			return nil, bad("batch Merkle root %s does not match its receipts (%s)", b.MerkleRoot, root)
		}
	}
	return &SignedBatch{PayoutBatch: b, Signer: env.Signer, Raw: raw}, nil
}

// MerkleRoot is the root of a binary SHA-256 tree over receipt hashes (hex), in the order
// given: a leaf is SHA-256(0x00 || hash), an inner node SHA-256(0x01 || left || right), and
// the last node of an odd level moves up unchanged.
func MerkleRoot(hashes []string) (string, error) {
	if len(hashes) == 0 {
		return "", fmt.Errorf("no receipts")
	}
	level := make([][]byte, len(hashes))
	for i, h := range hashes {
		b, err := hex.DecodeString(h)
		if err != nil || len(b) != sha256.Size {
			return "", fmt.Errorf("receipt hash %q is not 64 hex digits", h)
		}
		sum := sha256.Sum256(append([]byte{0}, b...))
		level[i] = sum[:]
	}
	for len(level) > 1 {
		var next [][]byte
		for i := 0; i < len(level); i += 2 {
			if i+1 == len(level) {
				next = append(next, level[i])
				continue
			}
			buf := make([]byte, 0, 1+2*sha256.Size)
			buf = append(append(append(buf, 1), level[i]...), level[i+1]...)
			sum := sha256.Sum256(buf)
			next = append(next, sum[:])
		}
		level = next
	}
	return hex.EncodeToString(level[0]), nil
}

// Market is the statistics of one model in one region.
type Market struct {
	Model            string    `json:"model"`
	Region           string    `json:"region"`
	ListedGPUs       int       `json:"listed_gpus"`
	ListedProviders  int       `json:"listed_providers"`
	MedianListPrice  MicroUSDC `json:"median_list_price"`
	Leases           int       `json:"leases"`
	LeasedGPUSeconds int64     `json:"leased_gpu_seconds"`
	MedianLeasePrice MicroUSDC `json:"median_lease_price"`
	// Utilisation is leased GPU-seconds over listed GPU-seconds in the window, per mille.
	Utilisation int `json:"utilisation_permille"`
	// Recommended is the suggested price per GPU-hour (docs/protocols/settlement.md).
	Recommended MicroUSDC `json:"recommended_price"`
	Basis       string    `json:"basis"` // what the recommendation stands on
}

// MarketStats is a coordinator's signed market statistics, per model and region.
type MarketStats struct {
	Version       int       `json:"version"`
	Coordinator   string    `json:"coordinator"`
	Seq           uint64    `json:"seq"`
	IssuedAt      time.Time `json:"issued_at"`
	ExpiresAt     time.Time `json:"expires_at"`
	WindowSecs    int64     `json:"window_s"`
	CommissionBPS int       `json:"commission_bps"`
	Markets       []Market  `json:"markets"`
}

// SignedMarketStats is market statistics that passed the checks.
type SignedMarketStats struct {
	MarketStats
	Signer peer.ID
	Raw    []byte
}

// CheckMarketStats opens market statistics: signed by a trusted coordinator, unexpired.
func CheckMarketStats(raw []byte, now time.Time, trust Trust) (*SignedMarketStats, error) {
	env, err := openKind(raw, KindMarketStats)
	if err != nil {
		return nil, err
	}
	var m MarketStats
	if err := decodePayload(env, SettlementVersion, &m, func() int { return m.Version }); err != nil {
		return nil, err
	}
	if m.Coordinator != env.signerText {
		return nil, fmt.Errorf("%w: statistics name coordinator %s but are signed by %s", ErrWrongSigner, m.Coordinator, env.Signer)
	}
	if m.Seq == 0 || m.CommissionBPS < 0 || m.CommissionBPS > MaxCommissionBPS || len(m.Markets) > 500 {
		return nil, invalid(KindMarketStats, "seq, commission or market count out of range")
	}
	for _, mk := range m.Markets {
		if mk.Utilisation < 0 || mk.Utilisation > 1000 || mk.Recommended < 0 || mk.Recommended > MaxPricePerGPUHour {
			return nil, invalid(KindMarketStats, "market %s/%s out of range", mk.Model, mk.Region)
		}
	}
	if err := checkIssued(KindMarketStats, m.IssuedAt, m.ExpiresAt, now); err != nil {
		return nil, err // dates first, as for scores: far in the future is the author's work
	}
	if err := trust.check(KindMarketStats, env.Signer); err != nil {
		return nil, err
	}
	return &SignedMarketStats{MarketStats: m, Signer: env.Signer, Raw: raw}, nil
}

// Recommend is the suggested price per GPU-hour for a market: the median recent lease
// price when at least three leases were made in the window, else the median listed price;
// then moved with utilisation, from -15% when idle to +15% when fully leased:
// base x (850 + 3 x utilisation_permille / 10) / 1000, rounded down. Zero when there is
// nothing to stand on.
func Recommend(m Market) (MicroUSDC, string) {
	base, basis := m.MedianLeasePrice, "median of recent lease prices"
	if m.Leases < 3 || base == 0 {
		base, basis = m.MedianListPrice, "median of listed prices (fewer than 3 recent leases)"
	}
	if base == 0 {
		return 0, "no listings or leases yet"
	}
	factor := int64(850 + 3*m.Utilisation/10)
	return min(MaxPricePerGPUHour, MicroUSDC(int64(base)*factor/1000)), basis
}

// Median of prices, rounded down; zero for none.
func Median(prices []MicroUSDC) MicroUSDC {
	if len(prices) == 0 {
		return 0
	}
	s := slices.Clone(prices)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// HoldCoordinator names the coordinator that signed the escrow hold a proposal carries (""
// without one). It reads the records without checking them: the caller checks what it
// relies on.
func HoldCoordinator(proposal []byte) peer.ID {
	env, err := Open(proposal)
	if err != nil {
		return ""
	}
	var p Proposal
	if json.Unmarshal(env.Payload, &p) != nil || len(p.Hold) == 0 {
		return ""
	}
	h, err := Open(p.Hold)
	if err != nil || h.Kind != KindEscrowHold {
		return ""
	}
	return h.Signer
}
