package node

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/protocol"
)

// Offer stream: a provider hands its current signed offer to whoever asks
// (docs/protocols/offers.md, "Direct fetch").

const offerStreamTimeout = 5 * time.Second

// handleOfferStream answers with the provider's current offer record.
func (n *Node) handleOfferStream(s network.Stream) {
	defer s.Close()
	s.SetDeadline(time.Now().Add(offerStreamTimeout))
	so := n.prov.Current()
	if so == nil {
		s.Reset()
		return
	}
	if _, err := s.Write(so.Raw); err != nil {
		s.Reset()
	}
}

// fetchOfferDirect asks a provider for its offer over the offer stream.
func (n *Node) fetchOfferDirect(ctx context.Context, ai peer.AddrInfo) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if len(ai.Addrs) > 0 {
		n.host.Peerstore().AddAddrs(ai.ID, ai.Addrs, time.Minute)
	} else if len(n.host.Peerstore().Addrs(ai.ID)) == 0 {
		found, err := n.dht.FindPeer(ctx, ai.ID)
		if err != nil {
			return nil, fmt.Errorf("find provider %s: %w", ai.ID, err)
		}
		n.host.Peerstore().AddAddrs(ai.ID, found.Addrs, time.Minute)
	}
	s, err := n.host.NewStream(ctx, ai.ID, protocol.OfferProtocol)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	if dl, ok := ctx.Deadline(); ok {
		s.SetDeadline(dl)
	}
	s.CloseWrite()
	raw, err := io.ReadAll(io.LimitReader(s, protocol.MaxOfferSize+1))
	if err != nil {
		return nil, err
	}
	if len(raw) > protocol.MaxOfferSize {
		s.Reset()
		return nil, fmt.Errorf("%w: offer stream sent more than %d bytes", protocol.ErrTooLarge, protocol.MaxOfferSize)
	}
	return raw, nil
}

// maxSyncServing caps the sync answers a node writes at once: each can be large.
const maxSyncServing = 4

// handleSyncStream writes every live offer this node holds.
func (n *Node) handleSyncStream(s network.Stream) {
	defer s.Close()
	select {
	case n.syncSlots <- struct{}{}:
		defer func() { <-n.syncSlots }()
	default:
		s.Reset() // busy: the asker tries its other peers
		return
	}
	s.SetDeadline(time.Now().Add(30 * time.Second))
	w := bufio.NewWriter(s)
	offers := n.book.live(n.clock.Now())
	for i, so := range offers {
		if i == protocol.MaxSyncOffers {
			break
		}
		var lenBuf [binary.MaxVarintLen64]byte
		w.Write(lenBuf[:binary.PutUvarint(lenBuf[:], uint64(len(so.Raw)))])
		if _, err := w.Write(so.Raw); err != nil {
			s.Reset()
			return
		}
	}
	if err := w.Flush(); err != nil {
		s.Reset()
	}
}

// syncFrom reads a peer's live offers into the book and returns how many were new.
func (n *Node) syncFrom(ctx context.Context, p peer.ID) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s, err := n.host.NewStream(ctx, p, protocol.OfferSyncProtocol)
	if err != nil {
		return 0, err
	}
	defer s.Close()
	if dl, ok := ctx.Deadline(); ok {
		s.SetDeadline(dl)
	}
	s.CloseWrite()
	// Records are checked in batches of 64: one batch signature verification costs less
	// than 64 single ones.
	fresh := 0
	var batch [][]byte
	flush := func() {
		f, v := n.book.acceptBatch(batch, "sync")
		fresh += f
		n.metrics.OfferSyncRecords.Add(float64(v))
		batch = batch[:0:0]
	}
	err = readSyncFrames(bufio.NewReader(s), func(raw []byte) {
		if batch = append(batch, raw); len(batch) == 64 {
			flush()
		}
	})
	if len(batch) > 0 {
		flush()
	}
	if errors.Is(err, protocol.ErrTooLarge) || errors.Is(err, protocol.ErrMalformed) {
		s.Reset()
		n.book.reject("sync", err)
	}
	return fresh, err
}

// readSyncFrames reads length-prefixed records until EOF, enforcing the sync limits.
func readSyncFrames(r *bufio.Reader, each func(raw []byte)) error {
	for i := 0; ; i++ {
		size, err := binary.ReadUvarint(r)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: sync frame length: %v", protocol.ErrMalformed, err)
		}
		if i >= protocol.MaxSyncOffers || size > protocol.MaxOfferSize {
			return fmt.Errorf("%w: sync answer exceeds its limits (record %d, %d bytes)", protocol.ErrTooLarge, i, size)
		}
		raw := make([]byte, size)
		if _, err := io.ReadFull(r, raw); err != nil {
			return fmt.Errorf("%w: truncated sync frame: %v", protocol.ErrMalformed, err)
		}
		each(raw)
	}
}

// syncOffers asks up to three connected peers for their offers, in parallel, the
// bootstrap peers first (infrastructure that follows the whole network, where any other
// peer may have joined moments ago). The sync counts as done only if one of them answered.
func (n *Node) syncOffers(ctx context.Context) {
	peers := n.host.Network().Peers()
	if boot, err := n.cfg.BootstrapPeers(); err == nil {
		first := map[peer.ID]bool{}
		for _, ai := range boot {
			first[ai.ID] = true
		}
		slices.SortStableFunc(peers, func(a, b peer.ID) int {
			switch {
			case first[a] && !first[b]:
				return -1
			case first[b] && !first[a]:
				return 1
			}
			return 0
		})
	}
	var wg sync.WaitGroup
	var answered atomic.Bool
	for i, p := range peers {
		if i == 3 {
			break
		}
		wg.Add(1)
		go func(p peer.ID) {
			defer wg.Done()
			// Revocations first, so that revoked providers' offers are refused.
			if err := n.syncRevocations(ctx, p); err != nil {
				n.log.Debug("revocation sync failed", "peer", p, "err", err)
			}
			if got, err := n.syncFrom(ctx, p); err != nil {
				n.log.Debug("offer sync failed", "peer", p, "err", err)
			} else {
				answered.Store(true)
				n.log.Debug("offer sync", "peer", p, "new", got)
			}
		}(p)
	}
	wg.Wait()
	if answered.Load() {
		n.book.markSynced(n.clock.Now())
	}
}
