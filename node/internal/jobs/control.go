package jobs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// The job-control stream (/gpunex/job-control/1.0.0), both ends: a renter's requests about
// a job it rents, once it runs. The renter opens one stream per request (control) naming
// the job and an op; the provider answers only the job's renter (HandleControl) and hands
// each op to its handler: status and cancel here, checkpoint in metering.go, logs and
// fetch in output.go, receipt-countersign with the receipts (receipts.go). A new per-job
// request is a new op here, or, for a long-lived stream of its own, a protocol of its own
// built the same way.

// HandleControl serves a renter's requests about its job.
func (r *Runner) HandleControl(s network.Stream) {
	defer s.Close()
	remote := s.Conn().RemotePeer()
	s.SetDeadline(time.Now().Add(jobStepTimeout))
	in := bufio.NewReader(s)
	m, err := readMsg(in)
	if err != nil {
		sendMsg(s, protocol.JobMsg{Type: "error", Reason: err.Error()})
		return
	}
	j, err := r.ledger.GetJob(m.Job)
	if err != nil || j.Side != "provider" || j.Peer != remote.String() {
		sendMsg(s, protocol.JobMsg{Type: "error", Reason: fmt.Sprintf("no job %s of yours here", m.Job)})
		return
	}
	switch m.Op {
	case "status":
		v := viewJob(j, r.clock.Now())
		sendMsg(s, protocol.JobMsg{Type: "status", Status: wireStatus(v)})
	case "cancel":
		if j.State == ledger.JobRunning {
			err = r.rt.Kill(context.Background(), j.ID, "cancelled by the renter")
		}
		if err != nil {
			sendMsg(s, protocol.JobMsg{Type: "error", Reason: err.Error()})
			return
		}
		v := viewJob(j, r.clock.Now())
		sendMsg(s, protocol.JobMsg{Type: "status", Status: wireStatus(v)})
	case "checkpoint":
		r.meter(s, in, j, remote)
	case "logs":
		s.SetDeadline(time.Time{})
		r.streamLogs(s, j.ID, m.Follow)
	case "receipt-countersign":
		if _, err := protocol.CheckCountersignature(m.Record, j.Receipt, protocol.KindReceipt, remote, r.clock.Now()); err != nil {
			sendMsg(s, protocol.JobMsg{Type: "error", Reason: err.Error()})
			return
		}
		if j, err := r.ledger.UpdateJob(j.ID, func(j *ledger.Job) error { j.ReceiptCountersig = m.Record; return nil }); err == nil {
			go r.reports.ReportJob(context.Background(), j) // the coordinator keeps the renter's countersignature too
		}
		sendMsg(s, protocol.JobMsg{Type: "ok"})
	case "fetch":
		s.SetDeadline(time.Now().Add(10 * time.Minute))
		if err := writeTar(s, filepath.Join(r.jobDir(j.ID), "output")); err != nil {
			s.Reset()
		}
	default:
		sendMsg(s, protocol.JobMsg{Type: "error", Reason: fmt.Sprintf("unknown op %q", m.Op)})
	}
}

// control opens a job-control stream to a job's provider and sends one request.
func (r *Renter) control(ctx context.Context, j ledger.Job, m protocol.JobMsg) (network.Stream, *bufio.Reader, error) {
	p, err := peer.Decode(j.Peer)
	if err != nil {
		return nil, nil, err
	}
	if err := r.peer.Reach(ctx, p); err != nil {
		return nil, nil, err
	}
	s, err := r.peer.OpenStream(ctx, p, protocol.JobControlProtocol)
	if err != nil {
		return nil, nil, fmt.Errorf("reach provider %s: %w", p, err)
	}
	m.Job = j.ID
	if err := sendMsg(s, m); err != nil {
		s.Reset()
		return nil, nil, err
	}
	return s, bufio.NewReader(s), nil
}

// JobStatus returns a job, asking its provider for news when this node rented it.
func (r *Renter) JobStatus(ctx context.Context, id string) (api.JobView, error) {
	j, err := r.renterJob(id)
	if err != nil {
		return api.JobView{}, err
	}
	if j.Side == "renter" && j.State == ledger.JobRunning {
		v, err := r.JobLogs(ctx, id, false, io.Discard)
		if err == nil {
			return v, nil
		}
	}
	return r.withInput(viewJob(j, r.clock.Now())), nil
}

// CancelJob asks the provider to stop a job.
func (r *Renter) CancelJob(ctx context.Context, id string) (api.JobView, error) {
	j, err := r.renterJob(id)
	if err != nil {
		return api.JobView{}, err
	}
	if j.Side != "renter" {
		return api.JobView{}, api.Invalid(errors.New("only the renter cancels a job"))
	}
	s, in, err := r.control(ctx, j, protocol.JobMsg{Op: "cancel"})
	if err != nil {
		return viewJob(j, r.clock.Now()), err
	}
	defer s.Close()
	m, err := readMsg(in)
	if err != nil {
		return viewJob(j, r.clock.Now()), err
	}
	if m.Type == "error" {
		return viewJob(j, r.clock.Now()), errors.New(m.Reason)
	}
	if m.Status != nil {
		v := api.JobView{JobStatus: *m.Status}
		v.State, v.Side, v.Peer = "stopping", "renter", j.Peer
		return v, nil
	}
	return viewJob(j, r.clock.Now()), nil
}
