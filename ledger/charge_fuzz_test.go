package ledger

import (
	"fmt"

	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/gpunex/gpunex/protocol"
)

// FuzzChargeSequence: any sequence of reports (countersigned or not, any amount),
// countersignatures arriving late, disputes, decisions, dispute windows passing, expiries
// and releases, on a few jobs. After every step: each account adds up (available + held +
// charged = deposited, none negative), no hold is charged more than its amount, no job
// earns twice, and what providers earned plus commissions equals what renters were
// charged.
func FuzzChargeSequence(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{1, 16, 33, 50, 67, 84, 101, 118, 135, 152, 169})
	f.Add([]byte{4, 20, 36, 7, 23, 39, 2, 18, 34, 5})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 64 {
			ops = ops[:64]
		}
		l, err := Open(Options{InMemory: true})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		now := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
		const jobs = 4
		l.Escrow.CreditDeposit(Deposit{Signature: "d", Renter: "r", Amount: 100_000_000, CreditedAt: now})
		for i := range jobs {
			if _, err := l.Escrow.PlaceHold(Hold{Job: jobID(i), Renter: "r", Provider: "p", Amount: 5_000_000, CommissionBPS: 1000, IssuedAt: now, ExpiresAt: now.Add(48 * time.Hour)}); err != nil {
				t.Fatal(err)
			}
		}
		for step, op := range ops {
			job := int(op>>4) % jobs
			arg := protocol.MicroUSDC(op&0x0f) * 1_000_000 // 0 to 15 USDC: above the hold too
			report := func(countersigned bool) ReportCharge {
				var cs []byte
				if countersigned {
					cs = []byte("cs")
				}
				return ReportCharge{Report: JobReport{Job: jobID(job), Provider: "p", ReceivedAt: now, Receipt: []byte{byte(job)}, ReceiptCountersig: cs,
					CheckpointSeconds: int64(op & 0x0f)}, Receipt: receiptHash(job), Renter: "r", Amount: arg, Countersigned: countersigned,
					CheckpointAmount: min(arg, protocol.MicroUSDC(op&0x0f)*100_000), PendingUntil: now.Add(24 * time.Hour)}
			}
			switch op % 7 {
			case 0:
				l.Escrow.ChargeReports([]ReportCharge{report(false)})
			case 1:
				l.Escrow.ChargeReports([]ReportCharge{report(true)})
			case 2:
				l.Escrow.OpenDispute(Dispute{Job: jobID(job), Renter: "r", Provider: "p", ReceivedAt: now})
			case 3:
				l.Escrow.DecideDispute(jobID(job), []byte("d"), arg, now)
			case 4:
				now = now.Add(time.Duration(op&0x0f) * 4 * time.Hour)
				if _, err := l.Escrow.ChargeDue(now); err != nil {
					t.Fatal(err)
				}
			case 5:
				if _, err := l.Escrow.ReleaseExpiredHolds(now); err != nil {
					t.Fatal(err)
				}
			case 6:
				l.Escrow.ReleaseHold(jobID(job))
			}
			checkBooks(t, l, fmt.Sprintf("step %d (op %d)", step, op))
		}
	})
}

func checkBooks(t *testing.T, l *Ledger, when string) {
	t.Helper()
	a, err := l.Escrow.GetAccount("r")
	if err != nil {
		t.Fatal(err)
	}
	if a.Available < 0 || a.Held < 0 || a.Charged < 0 || a.Available+a.Held+a.Charged != a.Deposited {
		t.Fatalf("%s: the account does not add up: %+v", when, a)
	}
	holds, _ := l.Escrow.Holds()
	var held protocol.MicroUSDC
	for _, h := range holds {
		if h.Charge < 0 || h.Charge > h.Amount {
			t.Fatalf("%s: hold %s charged %d of %d", when, h.Job, h.Charge, h.Amount)
		}
		if openHold(h.State) {
			held += h.Amount
		}
	}
	if held != a.Held {
		t.Fatalf("%s: open holds add up to %d, the account holds %d", when, held, a.Held)
	}
	// The pending index lists exactly the pending holds: one missing would never be charged.
	indexed := map[string]bool{}
	l.kv.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(prefixPending)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			indexed[string(it.Item().Key())] = true
		}
		return nil
	})
	for _, h := range holds {
		if (h.State == HoldPending) != indexed[string(pendingKey(h))] {
			t.Fatalf("%s: hold %s is %s, and its pending index entry is there: %v", when, h.Job, h.State, indexed[string(pendingKey(h))])
		}
		delete(indexed, string(pendingKey(h)))
	}
	if len(indexed) > 0 {
		t.Fatalf("%s: pending index entries without a pending hold: %v", when, indexed)
	}
	earnings, _ := l.Payouts.Earnings("")
	seen := map[string]bool{}
	var paid protocol.MicroUSDC
	for _, e := range earnings {
		if seen[e.Job] {
			t.Fatalf("%s: job %s earned twice", when, e.Job)
		}
		seen[e.Job] = true
		paid += e.Net + e.Commission
	}
	if paid != a.Charged {
		t.Fatalf("%s: providers earned %d with commissions, renters were charged %d", when, paid, a.Charged)
	}
}
