package money

import (
	"bytes"
	"encoding/csv"
	"encoding/xml"
	"errors"
	"fmt"
	"time"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/protocol"
)

// Bank-transfer payouts are exported for the operator's bank, as CSV or as an ISO 20022
// pain.001.001.03 credit transfer initiation, and marked paid once the bank confirms
// (ConfirmBankPayouts). Amounts are USDC paid at par in USD, two decimals: a payout whose
// amount has sub-cent micro-USDC is refused rather than rounded.

// bankFiles writes the files of bank-transfer payouts for the operator's bank.
type bankFiles struct {
	ledger Stores
	clock  clock.Clock
	// cfg's bank_account_name, bank_iban and bank_bic name the operator's account, the
	// debtor of a pain.001 file.
	cfg config.SettlementConfig
}

// BankExport renders a batch's unpaid bank payouts in a format: csv or pain001.
func (s *bankFiles) BankExport(id, format string) ([]byte, string, error) {
	b, err := s.ledger.Payouts.GetBatch(id)
	if err != nil {
		return nil, "", fmt.Errorf("batch %s: %w", id, err)
	}
	type line struct {
		p    protocol.Payout
		s    protocol.PayoutSettings
		cent string
	}
	var lines []line
	for _, p := range b.Payouts {
		if p.Method != protocol.PayoutBank || p.Paid {
			continue
		}
		// The settings the batch was planned with, as the provider signed them.
		s, _, err := protocol.CheckPayoutSettings(b.Settings[p.Provider], s.clock.Now())
		// (A batch planned before IBANs were masked names the full IBAN.)
		if err != nil || (s.Destination() != p.Destination && s.IBAN != p.Destination) {
			return nil, "", fmt.Errorf("provider %s: the batch's payout settings do not verify: %v", p.Provider, err)
		}
		if p.Amount%protocol.BankCent != 0 {
			return nil, "", fmt.Errorf("payout to %s of %s USDC is not a whole number of cents", p.Provider, p.Amount)
		}
		lines = append(lines, line{p: p, s: *s, cent: fmt.Sprintf("%d.%02d", p.Amount/1_000_000, p.Amount%1_000_000/10_000)})
	}
	if len(lines) == 0 {
		return nil, "", fmt.Errorf("batch %s has no unpaid bank payout", id)
	}
	switch format {
	case "csv", "":
		var buf bytes.Buffer
		w := csv.NewWriter(&buf)
		w.Write([]string{"batch", "provider", "account_name", "iban", "bic", "amount", "currency", "reference"})
		for _, l := range lines {
			w.Write([]string{b.Batch, l.p.Provider, l.s.AccountName, l.s.IBAN, l.s.BIC, l.cent, "USD", protocol.PayoutMemo(b.Batch)})
		}
		w.Flush()
		return buf.Bytes(), "text/csv", w.Error()
	case "pain001":
		st := s.cfg
		if st.BankIBAN == "" || st.BankAccountName == "" {
			return nil, "", errors.New("settlement.bank_account_name and settlement.bank_iban name the debtor of a pain.001 file: set them in config.toml")
		}
		doc := painDocument{Xmlns: "urn:iso:std:iso:20022:tech:xsd:pain.001.001.03"}
		ct := &doc.CstmrCdtTrfInitn
		var sum protocol.MicroUSDC
		for _, l := range lines {
			sum += l.p.Amount
			ct.PmtInf.Txs = append(ct.PmtInf.Txs, painTx{
				EndToEndID: b.Batch + "-" + l.p.Provider[len(l.p.Provider)-8:],
				Amount:     painAmount{Ccy: "USD", Value: l.cent},
				BIC:        l.s.BIC, Name: l.s.AccountName, IBAN: l.s.IBAN,
				Remittance: protocol.PayoutMemo(b.Batch),
			})
		}
		ctrl := fmt.Sprintf("%d.%02d", sum/1_000_000, sum%1_000_000/10_000)
		ct.GrpHdr = painGroupHeader{MsgID: "gpunex-" + b.Batch, CreDtTm: s.clock.Now().UTC().Format("2006-01-02T15:04:05"),
			NbOfTxs: len(lines), CtrlSum: ctrl, InitgPty: st.BankAccountName}
		ct.PmtInf.PmtInfID, ct.PmtInf.PmtMtd, ct.PmtInf.NbOfTxs, ct.PmtInf.CtrlSum = b.Batch, "TRF", len(lines), ctrl
		ct.PmtInf.ReqdExctnDt = s.clock.Now().UTC().Add(24 * time.Hour).Format("2006-01-02")
		ct.PmtInf.DbtrName, ct.PmtInf.DbtrIBAN, ct.PmtInf.DbtrBIC = st.BankAccountName, st.BankIBAN, st.BankBIC
		out, err := xml.MarshalIndent(doc, "", "  ")
		if err != nil {
			return nil, "", err
		}
		return append([]byte(xml.Header), append(out, '\n')...), "application/xml", nil
	}
	return nil, "", api.Invalid(fmt.Errorf("format %q: use csv or pain001", format))
}

type painDocument struct {
	XMLName          xml.Name `xml:"Document"`
	Xmlns            string   `xml:"xmlns,attr"`
	CstmrCdtTrfInitn struct {
		GrpHdr painGroupHeader `xml:"GrpHdr"`
		PmtInf painPayment     `xml:"PmtInf"`
	} `xml:"CstmrCdtTrfInitn"`
}

type painGroupHeader struct {
	MsgID    string `xml:"MsgId"`
	CreDtTm  string `xml:"CreDtTm"`
	NbOfTxs  int    `xml:"NbOfTxs"`
	CtrlSum  string `xml:"CtrlSum"`
	InitgPty string `xml:"InitgPty>Nm"`
}

type painPayment struct {
	PmtInfID    string   `xml:"PmtInfId"`
	PmtMtd      string   `xml:"PmtMtd"`
	NbOfTxs     int      `xml:"NbOfTxs"`
	CtrlSum     string   `xml:"CtrlSum"`
	ReqdExctnDt string   `xml:"ReqdExctnDt"`
	DbtrName    string   `xml:"Dbtr>Nm"`
	DbtrIBAN    string   `xml:"DbtrAcct>Id>IBAN"`
	DbtrBIC     string   `xml:"DbtrAgt>FinInstnId>BIC,omitempty"`
	Txs         []painTx `xml:"CdtTrfTxInf"`
}

type painTx struct {
	EndToEndID string     `xml:"PmtId>EndToEndId"`
	Amount     painAmount `xml:"Amt>InstdAmt"`
	BIC        string     `xml:"CdtrAgt>FinInstnId>BIC"`
	Name       string     `xml:"Cdtr>Nm"`
	IBAN       string     `xml:"CdtrAcct>Id>IBAN"`
	Remittance string     `xml:"RmtInf>Ustrd"`
}

type painAmount struct {
	Ccy   string `xml:"Ccy,attr"`
	Value string `xml:",chardata"`
}
