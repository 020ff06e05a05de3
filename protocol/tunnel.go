package protocol

import (
	"bufio"
	"fmt"
	"slices"
)

// Job tunnels: a job's declared ports, reached by its renter over the libp2p connection to
// its provider, one stream per TCP connection (docs/protocols/jobs.md, "Job tunnels").

// JobTunnelProtocol carries one TCP connection between a job's renter and a port the job
// declared: the renter's TunnelOpen, the provider's TunnelAnswer, then the connection's
// bytes both ways, each side closing its writing half when its end of the connection does.
const JobTunnelProtocol = "/gpunex/job-tunnel/1.0.0"

const (
	// MaxJobPorts is the most ports a proposal declares.
	MaxJobPorts = 16
	// MaxTunnelFrame caps the two frames of a tunnel stream.
	MaxTunnelFrame = 1024
)

// TunnelOpen is the renter's first frame: the job and the port it wants a connection to.
type TunnelOpen struct {
	Job  string `json:"job"`
	Port int    `json:"port"`
}

// Tunnel refusal codes (TunnelAnswer.Code): what a renter's tool does next depends on them
// (a forward stops for good on not_renter and not_running).
const (
	TunnelNotRenter   = "not_renter"   // the job is unknown here or another peer rents it
	TunnelNotRunning  = "not_running"  // the job has not started or has ended
	TunnelPort        = "port"         // the port is not one the job declared
	TunnelLimit       = "limit"        // the job has as many tunnels as the provider allows, or spent its transfer budget
	TunnelRateLimited = "rate_limited" // the renter opened too many tunnels in the last minute
	TunnelClosed      = "closed"       // nothing in the job listens on the port
	TunnelError       = "error"        // anything else
)

// TunnelAnswer is the provider's answer to a TunnelOpen: OK, after which the stream carries
// the connection's bytes, or a refusal with its code and why in words.
type TunnelAnswer struct {
	OK    bool   `json:"ok,omitempty"`
	Code  string `json:"code,omitempty"`
	Error string `json:"error,omitempty"`
}

// ValidPort reports whether p is a TCP port a job may declare: 1-65535.
func ValidPort(p int) bool { return p >= 1 && p <= 65535 }

// CheckPorts applies the rules of a proposal's ports: at most MaxJobPorts, each 1-65535,
// none twice.
func CheckPorts(ports []int) error {
	if len(ports) > MaxJobPorts {
		return fmt.Errorf("%d ports, at most %d", len(ports), MaxJobPorts)
	}
	for i, p := range ports {
		if !ValidPort(p) {
			return fmt.Errorf("port %d out of range 1-65535", p)
		}
		if slices.Contains(ports[:i], p) {
			return fmt.Errorf("port %d given twice", p)
		}
	}
	return nil
}

// ReadTunnelOpen reads and checks a renter's first frame.
func ReadTunnelOpen(r *bufio.Reader) (TunnelOpen, error) {
	var o TunnelOpen
	if err := ReadJSONFrame(r, MaxTunnelFrame, &o); err != nil {
		return o, err
	}
	if !ValidJobID(o.Job) {
		return o, fmt.Errorf("%w: tunnel: job %.40q is not 16 lower-case hex digits", ErrMalformed, o.Job)
	}
	if !ValidPort(o.Port) {
		return o, fmt.Errorf("%w: tunnel: port %d out of range 1-65535", ErrMalformed, o.Port)
	}
	return o, nil
}

// ReadTunnelAnswer reads a provider's answer; a refusal is an error holding its code and
// reason (TunnelRefusal).
func ReadTunnelAnswer(r *bufio.Reader) error {
	var a TunnelAnswer
	if err := ReadJSONFrame(r, MaxTunnelFrame, &a); err != nil {
		return err
	}
	if a.OK {
		return nil
	}
	if a.Code == "" {
		a.Code = TunnelError
	}
	return &TunnelRefusal{Code: a.Code, Reason: a.Error}
}

// TunnelRefusal is a provider's refusal of a tunnel.
type TunnelRefusal struct {
	Code   string
	Reason string
}

func (e *TunnelRefusal) Error() string {
	if e.Reason == "" {
		return "tunnel refused: " + e.Code
	}
	return "tunnel refused: " + e.Reason
}
