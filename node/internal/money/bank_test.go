package money

import (
	"context"
	"encoding/csv"
	"encoding/xml"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/protocol"
)

// bankProvider delivers a provider's settings for a bank transfer.
func (c *coordinator) bankProvider(t *testing.T) party {
	t.Helper()
	p := newParty()
	c.settings(t, p, protocol.PayoutSettings{Method: protocol.PayoutBank, Schedule: protocol.PayoutMonthly,
		AccountName: "Ada GPU SARL", IBAN: "FR1420041010050500013M02606", BIC: "PSSTFRPPPAR"})
	return p
}

// TestBankPayouts: a provider paid by bank transfer gets whole cents (the rest recorded in
// the batch, which names only the masked IBAN), exported as CSV and pain.001 with the
// details it signed, and marked paid with the bank's reference once the operator confirms;
// the batch settles only then.
func TestBankPayouts(t *testing.T) {
	c := newCoordinator(t, func(cfg *config.Config) {
		cfg.Settlement.BankAccountName, cfg.Settlement.BankIBAN, cfg.Settlement.BankBIC = "GPUNEX OPERATOR", "DE89370400440532013000", "COBADEFFXXX"
	})
	bank := c.bankProvider(t)
	c.earn(t, bank, 1_234_567) // earns 1,111,111 after the commission of 123,456
	usdc := c.usdcProvider(t, protocol.PayoutWeekly)
	c.earn(t, usdc.party, 1_000_000)

	v, err := c.RunPayouts(context.Background(), runNow)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := c.ledger.Payouts.GetBatch(v.BatchID)
	var bp protocol.Payout
	for _, p := range b.Payouts {
		if p.Provider == bank.id.String() {
			bp = p
		}
	}
	if bp.Method != protocol.PayoutBank || bp.Amount != 1_110_000 || bp.Rounding != 1_111 || bp.Destination != "FR14 **** 2606" || bp.Paid {
		t.Fatalf("bank payout: %+v", bp)
	}
	if v.State != protocol.BatchSettling || len(v.Transactions) != 1 {
		t.Fatalf("with the bank payout unpaid the batch is %s, %d transactions", v.State, len(v.Transactions))
	}

	// Bank details stay with the coordinator: the audit bundle carries the USDC provider's
	// settings only.
	bundle, _, err := c.BundlePage(v.BatchID, 0, WalletPageBytes)
	if err != nil || len(bundle.Settings) != 1 {
		t.Fatalf("the bundle carries %d payout settings: %v", len(bundle.Settings), err)
	}
	if _, signer, _ := protocol.CheckPayoutSettings(bundle.Settings[0], c.clock.Now()); signer != usdc.id {
		t.Fatalf("the bundle carries %s's settings", signer)
	}

	out, typ, err := c.BankExport(v.BatchID, "csv")
	if err != nil || typ != "text/csv" {
		t.Fatal(typ, err)
	}
	rows, _ := csv.NewReader(strings.NewReader(string(out))).ReadAll()
	want := []string{v.BatchID, bank.id.String(), "Ada GPU SARL", "FR1420041010050500013M02606", "PSSTFRPPPAR", "1.11", "USD", "gpunex payout " + v.BatchID}
	if len(rows) != 2 || strings.Join(rows[0], ",") != "batch,provider,account_name,iban,bic,amount,currency,reference" || strings.Join(rows[1], ",") != strings.Join(want, ",") {
		t.Fatalf("csv:\n%s", out)
	}

	out, typ, err = c.BankExport(v.BatchID, "pain001")
	if err != nil || typ != "application/xml" {
		t.Fatal(typ, err)
	}
	var doc struct {
		GrpHdr struct {
			NbOfTxs int
			CtrlSum string
		} `xml:"CstmrCdtTrfInitn>GrpHdr"`
		PmtInf struct {
			ReqdExctnDt string
			DbtrIBAN    string `xml:"DbtrAcct>Id>IBAN"`
			Txs         []struct {
				EndToEndID string `xml:"PmtId>EndToEndId"`
				Amount     struct {
					Ccy   string `xml:"Ccy,attr"`
					Value string `xml:",chardata"`
				} `xml:"Amt>InstdAmt"`
				IBAN string `xml:"CdtrAcct>Id>IBAN"`
			} `xml:"CdtTrfTxInf"`
		} `xml:"CstmrCdtTrfInitn>PmtInf"`
	}
	if err := xml.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	tx := doc.PmtInf.Txs
	if doc.GrpHdr.NbOfTxs != 1 || doc.GrpHdr.CtrlSum != "1.11" || doc.PmtInf.DbtrIBAN != "DE89370400440532013000" || len(tx) != 1 ||
		tx[0].Amount.Value != "1.11" || tx[0].Amount.Ccy != "USD" || tx[0].IBAN != "FR1420041010050500013M02606" ||
		tx[0].EndToEndID != v.BatchID+"-"+bank.id.String()[len(bank.id.String())-8:] ||
		doc.PmtInf.ReqdExctnDt != c.clock.Now().Add(24*time.Hour).Format("2006-01-02") {
		t.Fatalf("pain.001: %+v\n%s", doc, out)
	}
	if _, _, err := c.BankExport(v.BatchID, "mt940"); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("unknown format: %v", err)
	}

	if _, err := c.ConfirmBankPayouts(v.BatchID, "BANKREF-42", []string{usdc.id.String()}); err == nil {
		t.Fatal("a USDC payout confirmed as a bank transfer")
	}
	done, err := c.ConfirmBankPayouts(v.BatchID, "BANKREF-42", nil)
	if err != nil || done.State != protocol.BatchSettled {
		t.Fatalf("confirm: %+v %v", done, err)
	}
	settled, _ := c.ledger.Payouts.GetBatch(v.BatchID)
	rec, err := protocol.CheckBatch(settled.Record, protocol.NewTrust(c.id))
	if err != nil || rec.State != protocol.BatchSettled {
		t.Fatalf("signed record after the confirmation: %+v %v", rec, err)
	}
	for _, p := range rec.Payouts {
		if p.Provider == bank.id.String() && (!p.Paid || p.Transaction != "BANKREF-42") {
			t.Fatalf("the signed record does not show the bank payout paid: %+v", p)
		}
	}
	if _, _, err := c.BankExport(v.BatchID, "csv"); err == nil || !strings.Contains(err.Error(), "no unpaid bank payout") {
		t.Fatalf("export after the confirmation: %v", err)
	}
	if _, err := c.ConfirmBankPayouts(v.BatchID, "AGAIN", nil); err == nil {
		t.Fatal("a paid bank payout confirmed twice")
	}
}

// TestBankExportNeedsTheDebtor: a pain.001 file names the operator's account: without it
// the export says which settings to set; CSV needs none.
func TestBankExportNeedsTheDebtor(t *testing.T) {
	c := newCoordinator(t)
	c.earn(t, c.bankProvider(t), 5_000_000)
	v, err := c.RunPayouts(context.Background(), runNow)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.BankExport(v.BatchID, "pain001"); err == nil || !strings.Contains(err.Error(), "settlement.bank_account_name and settlement.bank_iban") {
		t.Fatalf("pain.001 without a debtor: %v", err)
	}
	if _, _, err := c.BankExport(v.BatchID, ""); err != nil {
		t.Fatalf("csv: %v", err)
	}
	if _, _, err := c.BankExport("20991231-001", "csv"); err == nil {
		t.Fatal("the export of a batch that does not exist")
	}
}
