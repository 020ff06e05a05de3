package node

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestImportBoundaries keeps the arrows of docs/architecture.md true: protocol is pure,
// ledger sits on protocol, node on both, and the CLI only on node and protocol.
func TestImportBoundaries(t *testing.T) {
	const mod = "github.com/gpunex/gpunex"
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, mod+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	// Internal packages each may import.
	internal := map[string][]string{
		"protocol": {},
		"ledger":   {"protocol"},
		// The chain client and the local Solana runtime stand alone.
		"ledger/solana":          {},
		"ledger/solana/localnet": {},
		"sandbox":                {"protocol"},
		"bench":                  {"protocol"},
		"node":                   {"protocol", "ledger", "ledger/solana", "ledger/solana/localnet", "sandbox", "bench"},
		"cmd/gpunex":             {"node", "protocol"},
	}
	// Third-party prefixes protocol may import: it is pure (no network stack, no storage).
	protocolExternal := []string{
		"github.com/libp2p/go-libp2p/core/",
		"github.com/ipfs/go-cid",
		"github.com/multiformats/go-multihash",
		"github.com/multiformats/go-multiaddr",
		"github.com/oasisprotocol/curve25519-voi/",
		"google.golang.org/protobuf/",
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(strings.TrimPrefix(fields[0], mod), "/")
		allowed, known := internal[pkg]
		if !known {
			t.Errorf("package %s has no import rule: add it to this test and to docs/architecture.md", pkg)
			continue
		}
		for _, imp := range fields[1:] {
			switch {
			case strings.HasPrefix(imp, mod+"/"):
				if dep := strings.TrimPrefix(imp, mod+"/"); !slices.Contains(allowed, dep) {
					t.Errorf("%s imports %s: not allowed", pkg, dep)
				}
			case pkg == "protocol" && strings.Contains(strings.Split(imp, "/")[0], "."):
				if !slices.ContainsFunc(protocolExternal, func(p string) bool { return strings.HasPrefix(imp, p) }) {
					t.Errorf("protocol imports %s: protocol must stay pure", imp)
				}
			}
		}
	}
}
