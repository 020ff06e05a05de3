package protocol

// The audit bundle: what anyone needs, with a Solana RPC endpoint, to audit a payout batch
// offline (docs/settlement.md, "Audit").

// AuditBundle is a payout batch with everything needed to audit it: the signed batch, the
// records behind each receipt, and the signed payout settings of the providers it paid in
// USDC (bank settings, which hold an IBAN and a name, are not published).
type AuditBundle struct {
	Batch    []byte         `json:"batch"`
	Receipts []AuditReceipt `json:"receipts"`
	Settings [][]byte       `json:"settings"`
}

// AuditReceipt is one paid receipt with the lease (signed by the provider, countersigned
// by the renter) and the escrow hold it follows from.
type AuditReceipt struct {
	Receipt         []byte `json:"receipt"`
	Lease           []byte `json:"lease"`
	LeaseCountersig []byte `json:"lease_countersignature"`
	Hold            []byte `json:"hold"`
	// ReceiptCountersig is the renter's countersignature of the receipt, when the
	// coordinator has it.
	ReceiptCountersig []byte `json:"receipt_countersignature,omitempty"`
	// Rule is the charge rule that applied (Rule*), with the records it follows from: the
	// last checkpoint the renter countersigned (checkpoint) or the coordinator's decision
	// on the renter's dispute (decision).
	Rule                 string `json:"rule"`
	Checkpoint           []byte `json:"checkpoint,omitempty"`
	CheckpointCountersig []byte `json:"checkpoint_countersignature,omitempty"`
	Decision             []byte `json:"decision,omitempty"`
}
