package money

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/protocol"
)

// A job's signed records as its provider and renter make them, and the coordinator's side
// of the job: the renter's deposit and hold, the provider's report.

// Prices of the test jobs: 3.60 USDC per GPU-hour on 2 GPUs, 2,000 µUSDC a second.
const (
	testPrice = protocol.MicroUSDC(3_600_000)
	testGPUs  = 2
)

// job is one job's records.
type job struct {
	id               string
	provider, renter party
	lease, leaseCS   []byte
	receipt          []byte
	receiptCS        []byte // nil until the renter countersigns
	rec              protocol.Receipt
	checkpoint       []byte
	checkpointCS     []byte
	l                protocol.Lease
}

var jobSeq int

func seal(t testing.TB, kind protocol.Kind, payload any, p party) []byte {
	t.Helper()
	raw, err := protocol.Seal(kind, payload, p.key)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func countersign(t testing.TB, of protocol.Kind, signed []byte, job string, p party, at time.Time) []byte {
	t.Helper()
	return seal(t, protocol.KindCountersignature, protocol.Countersignature{Version: protocol.JobVersion, Of: of,
		SHA256: protocol.RecordSHA256(signed), Job: job, Signer: p.id.String(), SignedAt: at}, p)
}

// newJob is a job leased for an hour from begin on testGPUs at testPrice, that ran seconds,
// with the renter's last countersigned checkpoint at cpSeconds (none when negative). The
// receipt is not countersigned (countersignReceipt does it).
func newJob(t testing.TB, prov, renter party, begin time.Time, seconds, cpSeconds int64) *job {
	t.Helper()
	jobSeq++
	j := &job{id: fmt.Sprintf("%016x", 0xa000+jobSeq), provider: prov, renter: renter}
	j.l = protocol.Lease{Version: protocol.JobVersion, Job: j.id, Proposal: fmt.Sprintf("%064x", jobSeq), Renter: renter.id.String(),
		Provider: prov.id.String(), Model: "H100-80GB", GPUs: testGPUs, Price: testPrice, IssuedAt: begin.UTC(), EndsAt: begin.Add(time.Hour).UTC(),
		Limits: protocol.Limits{MemoryBytes: 1 << 30, CPUMillis: 1000, Pids: 100, ScratchBytes: 1 << 30}}
	j.lease = seal(t, protocol.KindLease, j.l, prov)
	j.leaseCS = countersign(t, protocol.KindLease, j.lease, j.id, renter, begin)
	ended := begin.Add(time.Duration(seconds) * time.Second)
	j.rec = protocol.Receipt{Version: protocol.JobVersion, Job: j.id, Lease: protocol.RecordSHA256(j.lease), Provider: prov.id.String(),
		Renter: renter.id.String(), Model: j.l.Model, GPUs: testGPUs, StartedAt: begin.UTC(), EndedAt: ended.UTC(), Seconds: seconds,
		Price: testPrice, Amount: protocol.Cost(testPrice, testGPUs, seconds), Reason: "exited"}
	j.receipt = seal(t, protocol.KindReceipt, j.rec, prov)
	if cpSeconds >= 0 {
		j.checkpoint = seal(t, protocol.KindCheckpoint, protocol.Checkpoint{Version: protocol.JobVersion, Job: j.id, Lease: j.rec.Lease,
			Provider: prov.id.String(), Renter: renter.id.String(), Seconds: cpSeconds, Amount: protocol.Cost(testPrice, testGPUs, cpSeconds),
			At: begin.Add(time.Duration(cpSeconds) * time.Second).UTC()}, prov)
		j.checkpointCS = countersign(t, protocol.KindCheckpoint, j.checkpoint, j.id, renter, begin.Add(time.Duration(cpSeconds)*time.Second))
	}
	return j
}

func (j *job) countersignReceipt(t testing.TB) {
	j.receiptCS = countersign(t, protocol.KindReceipt, j.receipt, j.id, j.renter, j.rec.EndedAt)
}

// report is the provider's job report of the job.
func (j *job) report() protocol.JobReport {
	return protocol.JobReport{Lease: j.lease, LeaseCountersig: j.leaseCS, Receipt: j.receipt, ReceiptCountersig: j.receiptCS,
		Checkpoint: j.checkpoint, CheckpointCountersig: j.checkpointCS}
}

// dispute is the renter's signed dispute of the receipt, saying the job ran seconds.
func (j *job) dispute(t testing.TB, seconds int64, at time.Time) []byte {
	return seal(t, protocol.KindDispute, protocol.Dispute{Version: protocol.JobVersion, Job: j.id, Receipt: protocol.RecordSHA256(j.receipt),
		Renter: j.renter.id.String(), Provider: j.provider.id.String(), ObservedStart: j.rec.StartedAt, ObservedEnd: j.rec.EndedAt,
		Seconds: seconds, Amount: protocol.Cost(testPrice, testGPUs, seconds), Reason: "it stopped answering", SignedAt: at}, j.renter)
}

// holdAmount is what the renter's node asks to hold for the job: an hour at testPrice.
var holdAmount = protocol.HoldAmount(testPrice, testGPUs, 3600)

// deposit credits a renter's account at the coordinator.
func (c *coordinator) deposit(t testing.TB, renter party, amount protocol.MicroUSDC) {
	t.Helper()
	jobSeq++
	if _, _, err := c.ledger.Escrow.CreditDeposit(ledger.Deposit{Signature: fmt.Sprint("deposit-", jobSeq), Renter: renter.id.String(), Amount: amount}); err != nil {
		t.Fatal(err)
	}
}

// hold has the coordinator place the job's hold for its renter, the provider certified
// (with an offer of no GPU unless it has one), expiring in two hours.
func (c *coordinator) hold(t testing.TB, j *job) []byte {
	t.Helper()
	if so, _ := c.offers.Get(j.provider.id); so == nil {
		c.offers.certify(j.provider.id, "eu-west")
	}
	resp, err := c.Serve(context.Background(), j.renter.id, protocol.WalletRequest{Op: "hold", Job: j.id, Provider: j.provider.id.String(),
		Amount: holdAmount, ExpiresAt: c.clock.Now().Add(2 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Hold
}

// report sends the provider's job report over the job-report stream and returns the answer.
func (n *testNet) report(t testing.TB, from host.Host, r protocol.JobReport) map[string]string {
	t.Helper()
	var answer map[string]string
	n.ask(t, from, protocol.JobReportProtocol, r, &answer)
	return answer
}

func (c *coordinator) account(t testing.TB, p party) ledger.Account {
	t.Helper()
	a, err := c.ledger.Escrow.GetAccount(p.id.String())
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func (c *coordinator) holdOf(t testing.TB, j *job) ledger.Hold {
	t.Helper()
	h, err := c.ledger.Escrow.GetHold(j.id)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// earnings are the provider's earnings at the coordinator.
func (c *coordinator) earnings(t testing.TB, p party) []ledger.Earning {
	t.Helper()
	es, err := c.ledger.Payouts.Earnings(p.id.String())
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// withReceipt is the job as its provider would have it had it signed another receipt of
// the same lease, claiming seconds: the renter may hold one and the coordinator the other.
func (j *job) withReceipt(t testing.TB, seconds int64) *job {
	t.Helper()
	o := *j
	o.rec.Seconds, o.rec.Amount = seconds, protocol.Cost(testPrice, testGPUs, seconds)
	o.rec.EndedAt = o.rec.StartedAt.Add(time.Duration(seconds) * time.Second)
	o.receipt, o.receiptCS = seal(t, protocol.KindReceipt, o.rec, j.provider), nil
	return &o
}
