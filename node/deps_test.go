package node

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/gpunex/gpunex"

// subsystems are the packages under node/internal that each hold one part of the daemon.
// They import the leaf packages below and never the node nor one another: what one needs
// of another it declares as an interface, and node.New wires them.
var subsystems = []string{
	"node/internal/offers", "node/internal/onboarding", "node/internal/benchmarks",
	"node/internal/reliability", "node/internal/money", "node/internal/jobs", "node/internal/models", "node/internal/alerts",
}

// subsystemImports are the packages of the module a subsystem may import.
var subsystemImports = []string{
	"protocol", "ledger", "ledger/solana", "sandbox", "bench",
	"node/api", "node/config", "node/calendar", "node/internal/clock", "node/internal/metrics", "node/internal/p2p", "node/internal/notify",
}

// ledgerStores are the ledger's stores each subsystem may name (docs/architecture.md,
// "Import rules"). node.New hands a subsystem these and never the whole *ledger.Ledger, so
// that it reaches only its own tables; a subsystem not listed may name none.
var ledgerStores = map[string][]string{
	"node/internal/alerts":      {"AlertStore"},
	"node/internal/benchmarks":  {"ProviderStore", "HistoryStore", "NotificationStore", "SerialStore", "ApplicantStore"},
	"node/internal/jobs":        {"JobStore"},
	"node/internal/models":      {"ModelStore", "SerialStore"},
	"node/internal/money":       {"JobStore", "WalletStore", "ProviderStore", "EscrowStore", "PayoutStore", "ReliabilityStore"},
	"node/internal/offers":      {"OfferStore", "ProviderStore", "ApplicantStore"},
	"node/internal/onboarding":  {"ApplicationStore", "ApplicantStore", "NotificationStore", "SerialStore", "LinkStore"},
	"node/internal/reliability": {"ReliabilityStore", "ApplicationStore", "SerialStore"},
}

// TestImportBoundariesLedgerStores keeps each subsystem to its own tables: its non-test
// files name neither ledger.Ledger nor ledger.Open, and of the ledger's stores only those
// ledgerStores lists for it. Every store listed must be one it names, so that the list says
// what the code does.
func TestImportBoundariesLedgerStores(t *testing.T) {
	stores := typesOf(t, "../ledger", func(name string) bool { return strings.HasSuffix(name, "Store") })
	dirs, err := filepath.Glob("internal/*")
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no subsystem found: %v", err)
	}
	for pkg, allowed := range ledgerStores {
		if !slices.Contains(dirs, strings.TrimPrefix(pkg, "node/")) {
			t.Errorf("ledgerStores lists %s, which is not a package", pkg)
		}
		for _, s := range allowed {
			if !stores[s] {
				t.Errorf("ledgerStores lists %s for %s: the ledger has no such store", s, pkg)
			}
		}
	}
	for _, dir := range dirs {
		pkg := "node/" + dir
		named := ledgerNames(t, dir)
		for name, where := range named {
			switch {
			case name == "Ledger" || name == "Open":
				t.Errorf("%s names ledger.%s: a subsystem takes the stores it uses, never the whole ledger", where, name)
			case stores[name] && !slices.Contains(ledgerStores[pkg], name):
				t.Errorf("%s names ledger.%s, which %s may not use: hand it in from node.New and add it to ledgerStores and docs/architecture.md, or keep to the package's own stores", where, name, pkg)
			}
		}
		for _, s := range ledgerStores[pkg] {
			if _, ok := named[s]; !ok {
				t.Errorf("ledgerStores lets %s use ledger.%s, which it no longer names: take it off the list and docs/architecture.md", pkg, s)
			}
		}
	}
}

// ledgerNames returns the names of package ledger that the non-test files of dir refer to,
// each with the first place it is named.
func ledgerNames(t *testing.T, dir string) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	out := map[string]string{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		parsed, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		local := ""
		for _, imp := range parsed.Imports {
			if path, _ := strconv.Unquote(imp.Path.Value); path == module+"/ledger" {
				local = "ledger"
				if imp.Name != nil {
					local = imp.Name.Name
				}
			}
		}
		if local == "" {
			continue
		}
		ast.Inspect(parsed, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == local {
					if _, seen := out[sel.Sel.Name]; !seen {
						out[sel.Sel.Name] = fset.Position(sel.Pos()).String()
					}
				}
			}
			return true
		})
	}
	return out
}

// typesOf returns the names of the types declared in the non-test files of dir that keep
// accepts.
func typesOf(t *testing.T, dir string, keep func(name string) bool) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		parsed, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range parsed.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.TYPE {
				for _, s := range g.Specs {
					if name := s.(*ast.TypeSpec).Name.Name; keep(name) {
						out[name] = true
					}
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("no type found in %s", dir)
	}
	return out
}

// TestImportBoundaries keeps the arrows of docs/architecture.md true: which packages of the
// module each package may import, and which package alone may import each heavy outside
// dependency.
func TestImportBoundaries(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	internal := map[string][]string{
		// The pure packages and the standalone runtimes import nothing of the module.
		"protocol":                {},
		"sandbox":                 {"sandbox/joblog", "sandbox/internal/nshold"},
		"sandbox/internal/nshold": {},
		"sandbox/internal/probe":  {},
		"sandbox/joblog":          {},
		"ledger/solana":           {},
		"ledger/solana/localnet":  {},
		// Leaves that need no daemon.
		"ledger":                {"protocol"},
		"bench":                 {"protocol"},
		"node/api":              {"protocol"},
		"node/config":           {"protocol"},
		"node/calendar":         {"protocol"},
		"ledger/audit":          {"protocol", "ledger/solana"},
		"node/internal/clock":   {},
		"node/internal/metrics": {},
		"node/internal/p2p":     {"protocol", "node/internal/clock"},
		// E-mail and webhook notices, for the coordinator's decisions and a node's alerts.
		"node/internal/notify": {"node/api", "node/config", "node/internal/clock"},
		// The local marketplace drives nodes through their API, as a user would.
		"node/devnet": {"protocol", "ledger/audit", "ledger/solana", "ledger/solana/localnet", "sandbox", "node/api", "node/config"},
		// Test servers of the notices (SMTP, webhook), for tests only.
		"node/internal/noticetest": {},
		"node/internal/recordtest": {"protocol"},
		// The web dashboard's pages and sessions: it calls the API from the browser only.
		"node/dashboard": {},
		// The daemon assembles the subsystems; it does not import the local Solana runtime.
		"node": append(append(slices.Clone(subsystemImports), subsystems...), "node/dashboard"),
		"cmd/gpunex": {"protocol", "ledger/audit", "ledger/solana", "sandbox", "bench",
			"node", "node/api", "node/calendar", "node/config", "node/devnet"},
	}
	for _, s := range subsystems {
		internal[s] = subsystemImports
	}
	// Each heavy outside dependency stays in one package.
	owners := map[string][]string{
		"github.com/containerd/":               {"sandbox"},
		"github.com/dgraph-io/badger":          {"ledger"},
		"github.com/gagliardetto/":             {"ledger/solana"},
		"github.com/libp2p/go-libp2p-kad-dht":  {"node/internal/p2p"},
		"github.com/libp2p/go-libp2p-pubsub":   {"node/internal/p2p"},
		"github.com/libp2p/go-libp2p-record":   {"node/internal/p2p"},
		"github.com/NVIDIA/go-nvml":            {"bench"},
		"github.com/teambition/rrule-go":       {"node/calendar"},
		"github.com/prometheus/client_golang/": {"node", "node/internal/metrics"},
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
		pkg := strings.TrimPrefix(strings.TrimPrefix(fields[0], module), "/")
		allowed, known := internal[pkg]
		if !known {
			t.Errorf("package %s has no import rule: add it to this test and to docs/architecture.md", pkg)
			continue
		}
		for _, imp := range fields[1:] {
			for prefix, who := range owners {
				if strings.HasPrefix(imp, prefix) && !slices.Contains(who, pkg) {
					t.Errorf("%s imports %s: only %s may", pkg, imp, strings.Join(who, ", "))
				}
			}
			switch {
			case strings.HasPrefix(imp, module+"/"):
				if dep := strings.TrimPrefix(imp, module+"/"); !slices.Contains(allowed, dep) {
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

// TestClientCommandsNeedNoDaemon: the CLI's client commands talk to a daemon through
// node/api only. The files that may link the daemon (package node) are listed here.
func TestClientCommandsNeedNoDaemon(t *testing.T) {
	daemonFiles := []string{"daemon.go", "gpus.go"}
	files, err := filepath.Glob("../cmd/gpunex/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no CLI source found: %v", err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || slices.Contains(daemonFiles, filepath.Base(f)) {
			continue
		}
		parsed, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range parsed.Imports {
			if path, _ := strconv.Unquote(imp.Path.Value); path == module+"/node" {
				t.Errorf("%s imports the daemon (package node): client commands use node/api", f)
			}
		}
	}
}

// Room sizes (docs/architecture.md, "Packages and import rules"): a file holds one concern
// and a function one step, so that a newcomer finds the one file a change belongs in and
// reads it through. Generated files (a "Code generated" header) are left out.
const (
	maxFileLines = 700
	maxFuncLines = 120
)

// TestRoomSizes fails on a non-test Go file of the module over maxFileLines lines, or a
// function (or function literal) over maxFuncLines.
func TestRoomSizes(t *testing.T) {
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != ".." && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "testdata" || name == "dist" || name == "build") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		if n := fset.File(f.Pos()).LineCount(); n > maxFileLines {
			t.Errorf("%s: %d lines, over %d: split it by concern", path, n, maxFileLines)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			var body *ast.BlockStmt
			name := "a function literal"
			switch fn := n.(type) {
			case *ast.FuncDecl:
				body, name = fn.Body, fn.Name.Name
			case *ast.FuncLit:
				body = fn.Body
			}
			if body != nil {
				if lines := fset.Position(body.End()).Line - fset.Position(n.Pos()).Line + 1; lines > maxFuncLines {
					t.Errorf("%s:%d: %s is %d lines, over %d: split it into named steps", path, fset.Position(n.Pos()).Line, name, lines, maxFuncLines)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
