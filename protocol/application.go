package protocol

import (
	"encoding/json"
	"fmt"
	"math"
	"net/mail"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Application record: a provider asks a coordinator to certify it. See
// docs/protocols/onboarding.md.

const (
	// ApplicationVersion is the payload version this code writes and accepts.
	ApplicationVersion = 1
	// MaxApplicationSize caps a marshalled application envelope.
	MaxApplicationSize = 16 << 10
	// MaxApplicationGPUs caps the GPU entries of one application.
	MaxApplicationGPUs = 16
	// MaxCommitmentMonths caps the commitment period.
	MaxCommitmentMonths = 60
	maxNoteLen          = 2000
)

// The certification tiers.
const (
	TierEnterprise = "enterprise"
	TierCommunity  = "community"
)

// TierMessagePrefix starts the message of a notification about the tier rule after
// approval (a warning, the tier kept, or moved down), so that a provider's node can tell
// it from a decision.
const TierMessagePrefix = "tier: "

// Application is the payload of an application record. A provider's later records for the
// same application (an answer to a question) carry the same ID and a higher Seq.
type Application struct {
	Version  int       `json:"version"`
	ID       string    `json:"id"`       // chosen by the provider: 12 lower-case hex digits
	Provider string    `json:"provider"` // peer ID of the signer
	Seq      uint64    `json:"seq"`      // strictly increasing per provider
	IssuedAt time.Time `json:"issued_at"`

	Name    string `json:"name"`
	Email   string `json:"email"`
	Company string `json:"company,omitempty"`

	GPUs             []ApplicationGPU `json:"gpus"`
	UPS              bool             `json:"ups"`
	CommitmentMonths int              `json:"commitment_months"`
	MaintenanceNotes string           `json:"maintenance_notes,omitempty"`

	// Detected is what the provider's node found on the machine, and Differences what
	// does not match the declared GPUs: the coordinator sees both.
	Detected    []DetectedGPU `json:"detected,omitempty"`
	Differences []string      `json:"differences,omitempty"`
	// DetectedHostRAMGB is the memory of the machine whose node signs the application
	// (0: not read).
	DetectedHostRAMGB int `json:"detected_host_ram_gb,omitempty"`

	// Answer replies to the coordinator's request for more information.
	Answer string `json:"answer,omitempty"`
}

// ApplicationGPU is one GPU entry of an application: a model on one host.
type ApplicationGPU struct {
	Model        string   `json:"model" toml:"model"`
	Count        int      `json:"count" toml:"count"`
	HostRAMGB    int      `json:"host_ram_gb" toml:"host_ram_gb"`
	UpGbps       float64  `json:"internet_up_gbps" toml:"internet_up_gbps"`
	DownGbps     float64  `json:"internet_down_gbps" toml:"internet_down_gbps"`
	Availability string   `json:"availability" toml:"availability"` // "24/7" or a weekly schedule
	Location     Location `json:"location" toml:"location"`
}

// Location is where a GPU entry's host stands.
type Location struct {
	City    string `json:"city" toml:"city"`
	Country string `json:"country" toml:"country"` // ISO 3166-1 alpha-2
	Region  string `json:"region" toml:"region"`   // the marketplace region, as in offers
}

// DetectedGPU is one GPU model the node detected.
type DetectedGPU struct {
	Model     string `json:"model"`
	Count     int    `json:"count"`
	VRAMGB    int    `json:"vram_gb"`
	Simulated bool   `json:"simulated,omitempty"`
}

// FieldError names the field of an application that is missing or invalid.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// Unwrap makes a FieldError an ErrInvalid.
func (e *FieldError) Unwrap() error { return ErrInvalid }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// ValidateForm checks the fields a person fills in (not the record's identity, sequence or
// time), naming the first field that is missing or invalid.
func (a *Application) ValidateForm() error {
	if err := checkFreeText("name", a.Name, 100, true); err != nil {
		return err
	}
	if a.Email == "" {
		return fieldErr("email", "required")
	}
	if addr, err := mail.ParseAddress(a.Email); err != nil || addr.Address != a.Email || len(a.Email) > 254 {
		return fieldErr("email", "%q is not an e-mail address (name@example.org)", a.Email)
	}
	if err := checkFreeText("company", a.Company, 100, false); err != nil {
		return err
	}
	if len(a.GPUs) == 0 {
		return fieldErr("gpus", "at least one GPU entry is required")
	}
	if len(a.GPUs) > MaxApplicationGPUs {
		return fieldErr("gpus", "%d entries, at most %d", len(a.GPUs), MaxApplicationGPUs)
	}
	for i, g := range a.GPUs {
		f := fmt.Sprintf("gpus[%d].", i)
		if err := checkText(f+"model", g.Model, true); err != nil {
			return fieldErr(f+"model", "%v (one of %s, or another model for a case-by-case review)", err, supportedList())
		}
		if g.Model != NormalizeModel(g.Model) {
			return fieldErr(f+"model", "%q is not in canonical form %q", g.Model, NormalizeModel(g.Model))
		}
		if g.Count < 1 || g.Count > MaxGPUsPerItem {
			return fieldErr(f+"count", "%d out of range 1-%d", g.Count, MaxGPUsPerItem)
		}
		if g.HostRAMGB < 1 || g.HostRAMGB > 65536 {
			return fieldErr(f+"host_ram_gb", "%d out of range 1-65536", g.HostRAMGB)
		}
		if !(g.UpGbps > 0 && g.UpGbps <= 1000) || math.IsNaN(g.UpGbps) {
			return fieldErr(f+"internet_up_gbps", "%v out of range (0, 1000]", g.UpGbps)
		}
		if !(g.DownGbps > 0 && g.DownGbps <= 1000) || math.IsNaN(g.DownGbps) {
			return fieldErr(f+"internet_down_gbps", "%v out of range (0, 1000]", g.DownGbps)
		}
		if g.Availability == "" {
			return fieldErr(f+"availability", `required: "24/7" or a weekly schedule such as "mon-fri 08:00-20:00 (Europe/Paris)"`)
		}
		if _, err := ParseAvailability(g.Availability); err != nil {
			return fieldErr(f+"availability", "%v", err)
		}
		if err := checkFreeText(f+"location.city", g.Location.City, 100, true); err != nil {
			return err
		}
		if c := g.Location.Country; len(c) != 2 || strings.ToUpper(c) != c || !isLetters(c) {
			return fieldErr(f+"location.country", "%q is not a two-letter ISO country code (FR, DE, US)", c)
		}
		if err := checkText(f+"location.region", g.Location.Region, false); err != nil {
			return fieldErr(f+"location.region", "%v", err)
		}
		if g.Location.Region != NormalizeRegion(g.Location.Region) {
			return fieldErr(f+"location.region", "%q is not in canonical form %q", g.Location.Region, NormalizeRegion(g.Location.Region))
		}
	}
	if a.CommitmentMonths < 1 || a.CommitmentMonths > MaxCommitmentMonths {
		return fieldErr("commitment_months", "%d out of range 1-%d", a.CommitmentMonths, MaxCommitmentMonths)
	}
	if err := checkFreeText("maintenance_notes", a.MaintenanceNotes, maxNoteLen, false); err != nil {
		return err
	}
	if err := checkFreeText("answer", a.Answer, maxNoteLen, false); err != nil {
		return err
	}
	if len(a.Detected) > MaxApplicationGPUs || len(a.Differences) > 4*MaxApplicationGPUs {
		return fieldErr("detected", "too many entries")
	}
	if a.DetectedHostRAMGB < 0 || a.DetectedHostRAMGB > 1<<20 {
		return fieldErr("detected_host_ram_gb", "%d out of range 0-%d", a.DetectedHostRAMGB, 1<<20)
	}
	for _, d := range a.Differences {
		if err := checkFreeText("differences", d, 300, false); err != nil {
			return err
		}
	}
	return nil
}

// ParseAvailability reads the text form of a schedule, as Schedule.String writes it:
// "24/7", or windows separated by ", " followed by the zone in parentheses
// ("mon-fri 08:00-20:00, sat 10:00-14:00 (Europe/Paris)"; no zone means UTC).
func ParseAvailability(s string) (Schedule, error) {
	s = strings.TrimSpace(s)
	if s == "24/7" {
		return AlwaysOpen(), nil
	}
	tz := ""
	if i := strings.LastIndex(s, " ("); i >= 0 && strings.HasSuffix(s, ")") {
		s, tz = s[:i], s[i+2:len(s)-1]
	}
	return ParseSchedule(tz, strings.Split(s, ", "))
}

func supportedList() string { return strings.Join(FirstModels().SupportedNames(), ", ") }

func isLetters(s string) bool {
	for _, c := range s {
		if c < 'A' || c > 'Z' {
			return false
		}
	}
	return true
}

// checkFreeText accepts printable UTF-8 up to max bytes; required says whether it may be
// empty.
func checkFreeText(field, s string, max int, required bool) error {
	if s == "" {
		if required {
			return fieldErr(field, "required")
		}
		return nil
	}
	if len(s) > max {
		return fieldErr(field, "%d bytes, at most %d", len(s), max)
	}
	if !utf8.ValidString(s) {
		return fieldErr(field, "not valid UTF-8")
	}
	for _, c := range s {
		if c < 0x20 && c != '\n' && c != '\t' || c == 0x7f {
			return fieldErr(field, "control character %U not allowed", c)
		}
	}
	return nil
}

// ValidApplicationID reports whether s is an application ID: 12 lower-case hex digits.
func ValidApplicationID(s string) bool {
	if len(s) != 12 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// CheckApplication opens a marshalled application and applies every stateless rule at time
// now: the signer is the provider it names, the form is complete and valid, it is not
// issued in the future and not older than MaxApplicationAge.
func CheckApplication(raw []byte, now time.Time) (*Application, error) {
	env, err := Open(raw)
	if err != nil {
		return nil, err
	}
	return checkApplicationEnvelope(env, now)
}

// MaxApplicationAge is how old an application record may be when it reaches the
// coordinator: an old record replayed later is refused.
const MaxApplicationAge = 7 * 24 * time.Hour

func checkApplicationEnvelope(env *Envelope, now time.Time) (*Application, error) {
	if env.Kind != KindApplication {
		return nil, fmt.Errorf("%w: expected an application, got %s", ErrUnknownKind, env.Kind)
	}
	var a Application
	if err := decodePayload(env, ApplicationVersion, &a, func() int { return a.Version }); err != nil {
		return nil, err
	}
	if a.Provider != env.signerText {
		return nil, fmt.Errorf("%w: application names provider %s but is signed by %s", ErrWrongSigner, a.Provider, env.Signer)
	}
	if !ValidApplicationID(a.ID) {
		return nil, fieldErr("id", "%q is not 12 lower-case hex digits", a.ID)
	}
	if a.Seq == 0 {
		return nil, fieldErr("seq", "must be positive")
	}
	if a.IssuedAt.IsZero() {
		return nil, fieldErr("issued_at", "required")
	}
	if err := a.ValidateForm(); err != nil {
		return nil, err
	}
	if err := checkIssued(KindApplication, a.IssuedAt, a.IssuedAt.Add(MaxApplicationAge), now); err != nil {
		return nil, err
	}
	return &a, nil
}

// TierRule holds the thresholds of the tier proposal (docs/onboarding.md).
const (
	// EnterpriseMinCommitmentMonths is the shortest commitment that can be Enterprise.
	EnterpriseMinCommitmentMonths = 12
	// EnterpriseMinGbps is the slowest internet link, each way, that can be Enterprise.
	EnterpriseMinGbps = 1.0
	// EnterpriseMinSymmetry is the lowest up/down ratio that counts as symmetric.
	EnterpriseMinSymmetry = 0.9
)

// ProposeTier applies the documented tier rule to an application and says why. Enterprise
// needs all of: a UPS, a commitment of at least 12 months, and on every GPU entry a
// symmetric internet link (upload at least 90% of download) of at least 1 Gbps each way.
// Anything else is Community.
func ProposeTier(a *Application) (tier string, why []string) {
	if !a.UPS {
		why = append(why, "no UPS")
	}
	if a.CommitmentMonths < EnterpriseMinCommitmentMonths {
		why = append(why, fmt.Sprintf("commitment %d months < %d", a.CommitmentMonths, EnterpriseMinCommitmentMonths))
	}
	for i, g := range a.GPUs {
		if g.UpGbps < EnterpriseMinGbps || g.DownGbps < EnterpriseMinGbps {
			why = append(why, fmt.Sprintf("gpus[%d]: internet %g/%g Gbps (up/down) < %g", i, g.UpGbps, g.DownGbps, EnterpriseMinGbps))
		} else if g.UpGbps < EnterpriseMinSymmetry*g.DownGbps {
			why = append(why, fmt.Sprintf("gpus[%d]: internet %g/%g Gbps (up/down) not symmetric", i, g.UpGbps, g.DownGbps))
		}
	}
	if len(why) > 0 {
		return TierCommunity, why
	}
	return TierEnterprise, []string{"UPS, commitment and symmetric bandwidth meet the Enterprise thresholds"}
}

// CheckTierChoice says whether a reviewer may grant tier to an application: Community is
// always allowed, Enterprise only with a UPS.
func CheckTierChoice(a *Application, tier string) error {
	switch tier {
	case TierCommunity:
		return nil
	case TierEnterprise:
		if !a.UPS {
			return fmt.Errorf("%w: Enterprise needs a UPS and this application declares none", ErrInvalid)
		}
		return nil
	}
	return fmt.Errorf("%w: tier %q: expected %s or %s", ErrInvalid, tier, TierEnterprise, TierCommunity)
}

// CaseByCase lists the application's models that are not on the supported list of a
// model catalogue.
func (a *Application) CaseByCase(models *ModelCatalogue) []string {
	var out []string
	for _, g := range a.GPUs {
		if !models.Supported(g.Model) {
			out = append(out, g.Model)
		}
	}
	return out
}

// CompareDetected lists the differences between the GPUs an application declares and the
// GPUs the node detected, one sentence each.
func CompareDetected(declared []ApplicationGPU, detected []DetectedGPU) []string {
	want := map[string]int{}
	for _, g := range declared {
		want[NormalizeModel(g.Model)] += g.Count
	}
	have := map[string]int{}
	for _, d := range detected {
		have[NormalizeModel(d.Model)] += d.Count
	}
	var out []string
	for _, g := range declared {
		m := NormalizeModel(g.Model)
		if w, h := want[m], have[m]; w != h {
			out = append(out, fmt.Sprintf("declared %d x %s, detected %d", w, m, h))
			want[m] = h // report each model once
		}
	}
	for _, d := range detected {
		m := NormalizeModel(d.Model)
		if _, declaredIt := want[m]; !declaredIt {
			out = append(out, fmt.Sprintf("detected %d x %s, not declared", have[m], m))
			want[m] = have[m]
		}
	}
	return out
}

// HostTolerance is how far a detected figure may fall short of a declared one (host RAM,
// a model's VRAM) before it counts as a difference: the kernel keeps some memory, and
// drivers report a little under the nominal size.
const HostTolerance = 0.1

// CompareHost lists the differences between what an application declares of its hosts and
// what the node detected on its own: each entry's host RAM against the machine's, and each
// detected model's VRAM against the size its name gives (an H100 NVL of 94 GB is not an
// H100-80GB), one sentence each.
func CompareHost(declared []ApplicationGPU, detected []DetectedGPU, hostRAMGB int) []string {
	var out []string
	if hostRAMGB > 0 {
		for i, g := range declared {
			if float64(g.HostRAMGB) > float64(hostRAMGB)*(1+HostTolerance) {
				out = append(out, fmt.Sprintf("gpus[%d]: host RAM %d GB declared, %d GB detected on the applying node", i, g.HostRAMGB, hostRAMGB))
			}
		}
	}
	for _, d := range detected {
		nominal := modelVRAMGB(d.Model)
		if nominal > 0 && d.VRAMGB > 0 && math.Abs(float64(d.VRAMGB-nominal)) > float64(nominal)*HostTolerance {
			out = append(out, fmt.Sprintf("detected %s with %d GB of VRAM, not the %d GB its model says: another variant", NormalizeModel(d.Model), d.VRAMGB, nominal))
		}
	}
	return out
}

// modelVRAMGB is the VRAM a model's name gives ("H100-80GB": 80), 0 when it gives none.
func modelVRAMGB(model string) int {
	m := NormalizeModel(model)
	i := strings.LastIndex(m, "-")
	if i < 0 || !strings.HasSuffix(m, "GB") {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSuffix(m[i+1:], "GB"))
	if err != nil {
		return 0
	}
	return n
}

// OpenApplication reads an application that was checked when it arrived (a stored one):
// every rule of CheckApplication except its age.
func OpenApplication(raw []byte) (*Application, error) {
	env, err := Open(raw)
	if err != nil {
		return nil, err
	}
	var probe struct {
		IssuedAt time.Time `json:"issued_at"`
	}
	if err := json.Unmarshal(env.Payload, &probe); err != nil {
		return nil, fmt.Errorf("%w: application payload: %v", ErrMalformed, err)
	}
	return checkApplicationEnvelope(env, probe.IssuedAt)
}
