package protocol

import (
	"fmt"
	"slices"
	"time"
)

// Leases that grow: a renter asks the provider of its running job for a longer lease (the
// "extend" op of the job-control stream), and the provider answers with a new lease that
// extends the one in force: every term the same but a later EndsAt, and Extends naming
// the lease it extends, with a usage checkpoint of the new lease (JobMsg.Checkpoint) that
// the renter countersigns with it. docs/protocols/jobs.md, "Extending a lease".

// CheckExtension opens a lease that extends prev (whose envelope is prevRaw) and checks it:
// signed by prev's provider, every term of prev (job, proposal, parties, model, GPUs,
// price, issue time, limits, egress, ports) unchanged, Extends naming prev, and an end later than
// prev's by at most maxSeconds (the proposal's max_seconds: each added period is at most
// what the renter first asked for) and at most MaxJobDuration after the issue.
func CheckExtension(raw, prevRaw []byte, prev *Lease, maxSeconds int64) (*Lease, error) {
	l, signer, err := OpenLease(raw)
	if err != nil {
		return nil, err
	}
	if l.Provider != signer.String() || l.Provider != prev.Provider {
		return nil, fmt.Errorf("%w: lease signed by %s for provider %s; the job is with %s", ErrWrongSigner, signer, l.Provider, prev.Provider)
	}
	bad := func(format string, args ...any) error { return invalid(KindLease, format, args...) }
	switch {
	case l.Version != prev.Version || l.Job != prev.Job || l.Proposal != prev.Proposal || l.Renter != prev.Renter ||
		l.Model != prev.Model || l.GPUs != prev.GPUs || l.Price != prev.Price || !l.IssuedAt.Equal(prev.IssuedAt) ||
		l.Limits != prev.Limits || l.Egress != prev.Egress || !slices.Equal(l.Ports, prev.Ports):
		return nil, bad("an extension must keep every term of the lease it extends but its end")
	case l.Extends != RecordSHA256(prevRaw):
		return nil, bad("it extends another lease")
	case !l.EndsAt.After(prev.EndsAt) || l.EndsAt.Sub(prev.EndsAt) > time.Duration(maxSeconds)*time.Second:
		return nil, bad("it adds %s to the lease; an extension adds more than nothing and at most the proposal's max_seconds (%d s)", l.EndsAt.Sub(prev.EndsAt), maxSeconds)
	case l.EndsAt.Sub(l.IssuedAt) > MaxJobDuration:
		return nil, bad("period out of range: a lease lasts at most %s", MaxJobDuration)
	}
	return l, nil
}
