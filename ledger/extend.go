package ledger

import (
	"fmt"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/gpunex/gpunex/protocol"
)

// Leases that grow: a renter extending its running job's lease raises the job's hold
// (docs/protocols/settlement.md, the extend op).

// ExtendHold raises a job's held hold to at least amount and its expiry to at least
// expiresAt, for renter, in one transaction: the difference in amount moves from the
// renter's available funds to held. seal signs the raised hold; its record is stored as
// the hold's. A hold no longer held (charged, pending, disputed, released) is not
// extended: the job it was for has ended. Asking again for what the hold already is
// answers it unchanged.
func (s *EscrowStore) ExtendHold(job, renter string, amount protocol.MicroUSDC, expiresAt time.Time, seal func(Hold) ([]byte, error)) (Hold, error) {
	var h Hold
	err := s.updateMoney(func(txn *badger.Txn) error {
		h = Hold{}
		if err := getJSON(txn, prefixHold+job, &h); err != nil {
			return fmt.Errorf("job %s has no hold here: %w", job, err)
		}
		switch {
		case h.Renter != renter:
			return fmt.Errorf("job %s: the hold is not yours", job)
		case h.State != HoldHeld:
			return fmt.Errorf("job %s: the hold is already %s: the job ended", job, h.State)
		}
		amount, expiresAt = max(amount, h.Amount), laterOf(expiresAt, h.ExpiresAt)
		if amount == h.Amount && expiresAt.Equal(h.ExpiresAt) {
			return nil
		}
		a, err := getAccount(txn, h.Renter)
		if err != nil {
			return err
		}
		more := amount - h.Amount
		if a.Available < more {
			return fmt.Errorf("%w: the longer lease may cost up to %s USDC more and %s USDC is available (deposit with gpunex wallet deposit)", ErrInsufficientFunds, more, a.Available)
		}
		a.Available -= more
		a.Held += more
		h.Amount, h.ExpiresAt = amount, expiresAt.UTC()
		if h.Raw, err = seal(h); err != nil {
			return err
		}
		if err := putJSON(txn, prefixHold+h.Job, h); err != nil {
			return err
		}
		return putJSON(txn, prefixAccount+h.Renter, a)
	})
	return h, err
}

func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
