package node

import (
	"bufio"
	"context"
	"errors"
	"io"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/protocol"
)

// Revocations travel on their own gossip topic, and a joining node pulls every revocation
// its peers hold (revocation sync), so that a revoked provider's offers leave every book.

// takeRevocation checks a revocation, keeps it, and drops the revoked provider's offer.
func (n *Node) takeRevocation(raw []byte, source string) error {
	r, fresh, err := n.trust.addRevocation(raw, n.clock.Now())
	if err != nil {
		n.metrics.RecordsRejected.WithLabelValues(string(protocol.KindRevocation), source, protocol.Reason(err)).Inc()
		return err
	}
	if !fresh {
		return nil
	}
	n.metrics.RecordsAccepted.WithLabelValues(string(protocol.KindRevocation), source).Inc()
	if n.book.evict(r) {
		n.log.Info("provider's certificate revoked; its offer is gone", "provider", r.Provider, "reason", r.Reason)
	}
	if r.Provider == n.id && n.prov != nil {
		n.prov.poke()
	}
	return nil
}

// validateRevocation is the revocations topic validator.
func (n *Node) validateRevocation(ctx context.Context, from peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
	switch err := n.takeRevocation(msg.Data, "gossip"); {
	case err == nil:
		return pubsub.ValidationAccept
	case errors.Is(err, protocol.ErrFuture):
		return pubsub.ValidationIgnore
	default:
		return pubsub.ValidationReject
	}
}

// handleRevocationSync writes every revocation this node holds.
func (n *Node) handleRevocationSync(s network.Stream) {
	defer s.Close()
	select { // shares the offer sync's bound on answers served at once
	case n.syncSlots <- struct{}{}:
		defer func() { <-n.syncSlots }()
	default:
		s.Reset()
		return
	}
	s.SetDeadline(time.Now().Add(30 * time.Second))
	w := bufio.NewWriter(s)
	for i, raw := range n.trust.revocations() {
		if i == protocol.MaxSyncRevocations {
			break
		}
		if err := writeFrame(w, raw); err != nil {
			s.Reset()
			return
		}
	}
	if err := w.Flush(); err != nil {
		s.Reset()
	}
}

// syncRevocations reads a peer's revocations.
func (n *Node) syncRevocations(ctx context.Context, p peer.ID) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s, err := n.host.NewStream(ctx, p, protocol.RevocationSyncProtocol)
	if err != nil {
		return err
	}
	defer s.Close()
	if dl, ok := ctx.Deadline(); ok {
		s.SetDeadline(dl)
	}
	s.CloseWrite()
	r := bufio.NewReader(s)
	for i := 0; i < protocol.MaxSyncRevocations; i++ {
		if _, err := r.Peek(1); err == io.EOF {
			return nil
		}
		raw, err := readFrame(r, protocol.MaxRevocationSize)
		if err != nil {
			s.Reset()
			n.metrics.RecordsRejected.WithLabelValues(string(protocol.KindRevocation), "sync", protocol.Reason(err)).Inc()
			return err
		}
		n.takeRevocation(raw, "sync")
	}
	return nil
}
