package offers

import (
	"bufio"
	"context"
	"errors"
	"io"
	"slices"
	"time"

	"github.com/gpunex/gpunex/node/internal/p2p"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/protocol"
)

// Revocations travel on their own gossip topic, and a joining node pulls every revocation
// its peers hold (revocation sync), so that a revoked provider's offers leave every book.

// TakeRevocation checks a revocation, keeps it, and drops the revoked provider's offer.
func (c *Catalogue) TakeRevocation(raw []byte, source string) error {
	r, fresh, err := c.trust.addRevocation(raw, c.clock.Now())
	if err != nil {
		c.metrics.RecordsRejected.WithLabelValues(string(protocol.KindRevocation), source, protocol.Reason(err)).Inc()
		return err
	}
	if !fresh {
		return nil
	}
	c.metrics.RecordsAccepted.WithLabelValues(string(protocol.KindRevocation), source).Inc()
	if c.book.evict(r) {
		c.log.Info("provider's certificate revoked; its offer is gone", "provider", r.Provider, "reason", r.Reason)
	}
	if r.Provider == c.id {
		c.onOwnRevocation()
	}
	return nil
}

// ValidateRevocation is the revocations topic validator.
func (c *Catalogue) ValidateRevocation(ctx context.Context, from peer.ID, data []byte) p2p.Verdict {
	switch err := c.TakeRevocation(data, "gossip"); {
	case err == nil:
		return p2p.Accept
	case errors.Is(err, protocol.ErrFuture):
		return p2p.Ignore
	default:
		return p2p.Reject
	}
}

// HandleRevocationSync writes every revocation this node holds.
func (c *Catalogue) HandleRevocationSync(s network.Stream) {
	c.serveSync(s, c.revocationSyncs, c.trust.Revocations, protocol.MaxSyncRevocations)
}

// HandleScoreSync writes the valid score records this node holds that the request asks for
// (every one for an asker that sends none).
func (c *Catalogue) HandleScoreSync(s network.Stream) {
	if c.scores == nil {
		s.Reset()
		return
	}
	var req protocol.ScoreSyncRequest
	err := readRequest(s, protocol.MaxScoreSyncRequest, &req)
	if err == nil {
		err = req.Check()
	}
	if err != nil {
		c.metrics.RecordsRejected.WithLabelValues("score-sync", "stream", protocol.Reason(err)).Inc()
		s.Reset()
		return
	}
	if !c.Following() && !slices.Equal(req.Providers, []string{c.id.String()}) {
		// A provider keeps its own score only: it answers for that alone, and leaves the
		// market's scores to the nodes that follow it (the asker tries its other peers).
		s.Reset()
		return
	}
	c.serveSync(s, c.scoreSyncs, func() [][]byte { return c.scores.Records(req.Providers) }, protocol.MaxSyncScores)
}

// scoresWanted is what this node asks of a score sync: a node that follows offers ranks
// every provider, a provider (which follows no offer, and keeps only its own score: its
// dashboard shows it) its own.
func (c *Catalogue) scoresWanted() protocol.ScoreSyncRequest {
	if c.Following() {
		return protocol.ScoreSyncRequest{}
	}
	return protocol.ScoreSyncRequest{Providers: []string{c.id.String()}}
}

// serveSync answers a sync stream with records (at most max), each length-prefixed, within
// its kind's slots and budget (g).
func (c *Catalogue) serveSync(s network.Stream, g *syncGate, records func() [][]byte, max int) {
	defer s.Close()
	release, ok := c.admitSync(s, g)
	if !ok {
		s.Reset()
		return
	}
	defer release()
	s.SetDeadline(time.Now().Add(30 * time.Second))
	w := bufio.NewWriter(s)
	for i, raw := range records() {
		if i == max {
			break
		}
		if err := protocol.WriteFrame(w, raw); err != nil {
			s.Reset()
			return
		}
	}
	if err := w.Flush(); err != nil {
		s.Reset()
	}
}

// syncScores reads a peer's score records into the score book: a joining node ranks
// providers by their scores at once. A peer of a release without the protocol refuses the
// stream; the scores then come by gossip.
func (c *Catalogue) syncScores(ctx context.Context, p peer.ID, req protocol.ScoreSyncRequest) (received int, err error) {
	if c.scores == nil {
		return 0, nil
	}
	err = c.readSync(ctx, p, protocol.ScoreSyncProtocol, req, protocol.KindScore, protocol.MaxSyncScores, protocol.MaxScoreSize,
		func(raw []byte) { received++; c.scores.Take(raw, "sync") })
	return received, err
}

// syncRevocations reads a peer's revocations.
func (c *Catalogue) syncRevocations(ctx context.Context, p peer.ID) error {
	return c.readSync(ctx, p, protocol.RevocationSyncProtocol, nil, protocol.KindRevocation, protocol.MaxSyncRevocations, protocol.MaxRevocationSize,
		func(raw []byte) { c.TakeRevocation(raw, "sync") })
}

// readSync sends req (as a JSON frame; nothing when nil) on a stream to a peer on proto and
// reads its answer: at most max records of kind, each at most size bytes, each handed to
// take; a frame over the bounds ends it, counted, and so does a peer that stalls
// (idleBound).
func (c *Catalogue) readSync(ctx context.Context, p peer.ID, proto string, req any, kind protocol.Kind, max, size int, take func([]byte)) error {
	s, err := c.startSync(ctx, p, proto, kind, req)
	if err != nil {
		return err
	}
	defer s.done()
	r := bufio.NewReader(s)
	for i := 0; i < max; i++ {
		if _, err := r.Peek(1); err == io.EOF {
			return nil
		}
		raw, err := protocol.ReadFrame(r, size)
		if err != nil {
			s.Reset()
			if reason, ok := s.idle.reason(err); ok { // a stream this node ended is not the peer's fault
				c.metrics.RecordsRejected.WithLabelValues(string(kind), "sync", reason).Inc()
			}
			return err
		}
		s.idle.renew()
		s.trace.record()
		take(raw)
	}
	return nil
}
