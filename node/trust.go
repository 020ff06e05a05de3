package node

import (
	"fmt"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/protocol"
)

// trustStore decides whether a provider is certified: the coordinators this node trusts,
// and the revocations it knows (kept in the ledger, so they outlive restarts).
type trustStore struct {
	trust  protocol.Trust
	ledger *ledger.Ledger

	mu   sync.RWMutex
	revs map[peer.ID][]*protocol.SignedRevocation // by provider
}

func newTrustStore(l *ledger.Ledger, trusted []peer.ID) (*trustStore, error) {
	t := &trustStore{trust: protocol.NewTrust(trusted...), ledger: l, revs: map[peer.ID][]*protocol.SignedRevocation{}}
	raws, err := l.Revocations()
	if err != nil {
		return nil, fmt.Errorf("load revocations: %w", err)
	}
	for _, raw := range raws {
		// A revocation from a coordinator no longer trusted is kept but has no effect.
		if r, err := protocol.CheckRevocation(raw, time.Now().Add(protocol.MaxClockSkew), t.trust); err == nil {
			t.revs[r.Provider] = append(t.revs[r.Provider], r)
		}
	}
	return t, nil
}

// certify checks the certificate an offer carries and records it in so.Cert.
func (t *trustStore) certify(so *protocol.SignedOffer, now time.Time) error {
	c, err := protocol.OfferCertificate(&so.Offer, now, t.trust)
	if err != nil {
		return err
	}
	if r := t.revocationOf(c); r != nil {
		return fmt.Errorf("%w: by %s at %s: %s", protocol.ErrRevoked, r.Signer, r.IssuedAt.UTC().Format(time.RFC3339), r.Reason)
	}
	so.Cert = c
	if len(so.Offer.Attestation) > 0 {
		a, err := protocol.CheckAttestation(so.Offer.Attestation, now, t.trust)
		if err != nil {
			return fmt.Errorf("offer's attestation: %w", err)
		}
		if a.Signer != so.Signer {
			return fmt.Errorf("%w: offer of %s carries an attestation by %s", protocol.ErrWrongSigner, so.Signer, a.Signer)
		}
		so.Attest = a
	}
	return nil
}

// revocationOf returns the revocation that covers a certificate, or nil.
func (t *trustStore) revocationOf(c *protocol.SignedCertificate) *protocol.SignedRevocation {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for _, r := range t.revs[peerOf(c.Provider)] {
		if r.Revokes(c) {
			return r
		}
	}
	return nil
}

// addRevocation checks a revocation record and keeps it. fresh is false when it was known.
func (t *trustStore) addRevocation(raw []byte, now time.Time) (r *protocol.SignedRevocation, fresh bool, err error) {
	r, err = protocol.CheckRevocation(raw, now, t.trust)
	if err != nil {
		return nil, false, err
	}
	t.mu.Lock()
	for _, old := range t.revs[r.Provider] {
		if old.Signer == r.Signer && !old.IssuedAt.Before(r.IssuedAt) {
			t.mu.Unlock()
			return old, false, nil
		}
	}
	kept := t.revs[r.Provider][:0:0]
	for _, old := range t.revs[r.Provider] {
		if old.Signer != r.Signer {
			kept = append(kept, old)
		}
	}
	t.revs[r.Provider] = append(kept, r)
	t.mu.Unlock()
	if err := t.ledger.SaveRevocation(r.Signer.String(), r.Provider.String(), raw); err != nil {
		return nil, false, err
	}
	return r, true, nil
}

// revocations returns every revocation record held.
func (t *trustStore) revocations() [][]byte {
	t.mu.RLock()
	defer t.mu.RUnlock()
	var out [][]byte
	for _, rs := range t.revs {
		for _, r := range rs {
			out = append(out, r.Raw)
		}
	}
	return out
}

func peerOf(s string) peer.ID {
	id, _ := peer.Decode(s)
	return id
}
