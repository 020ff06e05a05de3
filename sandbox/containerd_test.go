//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"golang.org/x/sys/unix"
)

// The private containerd of this package's tests, started by TestMain.
var (
	testDaemon    *Daemon
	testDaemonErr error
	testArchive   []byte // a BusyboxImage archive
	testDigest    string
	nsSeq         atomic.Int64
)

const testImageRef = "gpunex.test/busybox:1"

func TestMain(m *testing.M) {
	RunLoggerIfInvoked() // the jobs' logger is this test binary
	os.Exit(func() int {
		var buf bytes.Buffer
		if testDigest, testDaemonErr = BusyboxImage(&buf, testImageRef); testDaemonErr != nil {
			return m.Run()
		}
		testArchive = buf.Bytes()
		dir, err := os.MkdirTemp("", "gpunex-sandbox-test-")
		if err != nil {
			testDaemonErr = err
			return m.Run()
		}
		defer os.RemoveAll(dir)
		buildProbe(dir)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		testDaemon, testDaemonErr = StartContainerd(ctx, dir)
		cancel()
		if testDaemonErr == nil {
			defer func() {
				if err := testDaemon.Stop(); err != nil {
					fmt.Fprintln(os.Stderr, "stopping the test containerd:", err)
				}
				if pids := shimPIDs(testDaemon.Address()); len(pids) > 0 {
					fmt.Fprintln(os.Stderr, "shims left running after Stop:", pids)
				}
			}()
		}
		return m.Run()
	}())
}

// needContainerd skips the test where containerd cannot run, or fails it when
// GPUNEX_REQUIRE_CONTAINERD=1 (CI machines that must run these tests).
func needContainerd(t testing.TB) {
	t.Helper()
	if testDaemonErr == nil {
		return
	}
	if os.Getenv("GPUNEX_REQUIRE_CONTAINERD") == "1" {
		t.Fatalf("containerd is required here (GPUNEX_REQUIRE_CONTAINERD=1) but cannot run: %v", testDaemonErr)
	}
	t.Skipf("skipping: containerd cannot run here (%v); set GPUNEX_REQUIRE_CONTAINERD=1 to fail instead", testDaemonErr)
}

// testRuntime returns a Containerd in a fresh namespace holding the busybox image. At the
// end of the test it closes it and deletes the image and the namespace.
func testRuntime(t testing.TB) (*Containerd, string) {
	t.Helper()
	needContainerd(t)
	// Unique across concurrent test runs: runc's state (/run/containerd/runc/<ns>/<id>)
	// is shared by every containerd on the host.
	ns := fmt.Sprintf("gpunex-test-%d-%d", os.Getpid(), nsSeq.Add(1))
	rt := newInstance(t, ns)
	ref, digest, err := rt.ImportImage(context.Background(), bytes.NewReader(testArchive))
	if err != nil {
		t.Fatal(err)
	}
	if ref != "import.gpunex.local/image@"+testDigest || digest != testDigest {
		t.Fatalf("ImportImage = %s %s, want the digest name of %s (%s)", ref, digest, testImageRef, testDigest)
	}
	t.Cleanup(func() {
		ctx := namespaces.WithNamespace(context.Background(), ns)
		c := rt.Client()
		if err := c.ImageService().Delete(ctx, ref, images.SynchronousDelete()); err != nil {
			t.Errorf("delete the test image: %v", err)
		}
		if err := c.NamespaceService().Delete(ctx, ns); err != nil {
			t.Errorf("delete the test namespace (something is left in it): %v", err)
		}
		os.Remove(filepath.Join("/run/containerd/runc", ns)) // runc leaves it, empty

	})
	return rt, ref
}

func newInstance(t testing.TB, ns string) *Containerd {
	t.Helper()
	return newInstanceWith(t, ns, ContainerdOptions{})
}

// newInstanceWith is newInstance with options (its address and namespace are set here).
func newInstanceWith(t testing.TB, ns string, o ContainerdOptions) *Containerd {
	t.Helper()
	o.Address, o.Namespace = testDaemon.Address(), ns
	rt, err := NewContainerd(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt
}

// leftovers lists the containers, tasks, writable snapshots and leases of a namespace
// (for one job, or all with id "").
func leftovers(t *testing.T, rt *Containerd, id string) []string {
	t.Helper()
	ctx := namespaces.WithNamespace(context.Background(), rt.Namespace())
	c := rt.Client()
	var left []string
	ctrs, err := c.Containers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ctr := range ctrs {
		if id == "" || ctr.ID() == id {
			left = append(left, "container "+ctr.ID())
		}
		if _, err := ctr.Task(ctx, nil); err == nil && (id == "" || ctr.ID() == id) {
			left = append(left, "task "+ctr.ID())
		}
	}
	err = c.SnapshotService(DefaultSnapshotter).Walk(ctx, func(_ context.Context, info snapshots.Info) error {
		if info.Kind != snapshots.KindCommitted && (id == "" || info.Name == id) {
			left = append(left, "snapshot "+info.Name)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ls, err := c.LeasesService().List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		if id == "" {
			left = append(left, "lease "+l.ID)
		}
	}
	return left
}

// jobPids reads the pids cgroup (v1) of a job.
func jobPids(ns, id string) (current, refused int64, err error) {
	dir := filepath.Join("/sys/fs/cgroup/pids", ns, id)
	b, err := os.ReadFile(filepath.Join(dir, "pids.current"))
	if err != nil {
		return 0, 0, err
	}
	current, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if ev, err := os.ReadFile(filepath.Join(dir, "pids.events")); err == nil {
		if v, ok := strings.CutPrefix(strings.TrimSpace(string(ev)), "max "); ok {
			refused, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return current, refused, err
}

// TestContainerd runs the shared suite against containerd.
func TestContainerd(t *testing.T) {
	rt, ref := testRuntime(t)
	RunSuite(t, rt, ref, SuiteHooks{
		NewInstance: func(t *testing.T) Runtime { return newInstance(t, rt.Namespace()) },
		Leftovers:   func(t *testing.T, id string) []string { return leftovers(t, rt, id) },
		Pids:        func(id string) (int64, int64, error) { return jobPids(rt.Namespace(), id) },
	})
}

func TestNewContainerdMissingSocket(t *testing.T) {
	_, err := NewContainerd(context.Background(), ContainerdOptions{Address: "/nonexistent/containerd.sock"})
	if err == nil || !strings.Contains(err.Error(), "apt-get install containerd runc") || !strings.Contains(err.Error(), "/nonexistent/containerd.sock") {
		t.Fatalf("NewContainerd on a missing socket: %v; want an error naming the socket and how to install containerd", err)
	}
}

func TestImageSize(t *testing.T) {
	rt, ref := testRuntime(t)
	ctx := context.Background()
	size, err := rt.ImageSize(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(BusyboxPath)
	if err != nil {
		t.Fatal(err)
	}
	if size < st.Size() || size > st.Size()+1<<20 {
		t.Fatalf("ImageSize = %d, want about the size of busybox (%d)", size, st.Size())
	}
	if _, err := rt.ImageSize(ctx, "gpunex.test/absent:1"); !errors.Is(err, ErrImageNotFound) {
		t.Fatalf("ImageSize of a missing image: %v", err)
	}
	// No registry is reachable here: PullImage must fail with a clear error, not hang.
	pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := rt.PullImage(pctx, "127.0.0.1:1/none/such:1"); err == nil || !strings.Contains(err.Error(), "registry") {
		t.Fatalf("PullImage from nowhere: %v", err)
	}
}

func TestBusyboxImageDeterministic(t *testing.T) {
	if _, err := os.Stat(BusyboxPath); err != nil {
		t.Skipf("no busybox here: %v", err)
	}
	var a, b bytes.Buffer
	da, err := BusyboxImage(&a, "x.test/a:1")
	if err != nil {
		t.Fatal(err)
	}
	db, err := BusyboxImage(&b, "x.test/a:1")
	if err != nil {
		t.Fatal(err)
	}
	if da != db || !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatalf("two archives of the same busybox differ: %s, %s", da, db)
	}
	if !strings.HasPrefix(da, "sha256:") {
		t.Fatalf("digest %q", da)
	}
	if _, err := BusyboxImage(&a, ""); err == nil {
		t.Fatal("an empty reference was accepted")
	}
}

func TestDaemonStopLeavesNoProcess(t *testing.T) {
	needContainerd(t)
	ctx := context.Background()
	d, err := StartContainerd(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Address()) >= 108 {
		t.Fatalf("socket path too long: %s", d.Address())
	}
	ns := fmt.Sprintf("gpunex-test-%d-stop", os.Getpid())
	rt, err := NewContainerd(ctx, ContainerdOptions{Address: d.Address(), Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(filepath.Join("/run/containerd/runc", ns))
	ref, _, err := rt.ImportImage(ctx, bytes.NewReader(testArchive))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "out"), 0o700)
	spec := Spec{ID: "left-running", Image: ref, Args: []string{"sleep", "60"}, MemoryBytes: 32 << 20, CPUMillis: 100, Pids: 8,
		ScratchBytes: 1 << 20, WallClock: time.Minute, OutputDir: filepath.Join(dir, "out"), LogPath: filepath.Join(dir, "log")}
	if err := rt.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	// The job goes with the daemon, never removed: free its user-namespace range.
	if ctr, err := rt.client.LoadContainer(rt.ns(ctx), spec.ID); err == nil {
		if labels, err := ctr.Labels(rt.ns(ctx)); err == nil {
			if base, ok := parseUIDBase(labels); ok {
				defer unclaimUserns(base)
			}
		}
	}
	rt.Close()
	if len(shimPIDs(d.Address())) == 0 {
		t.Fatal("no shim found for a running job: the check below would prove nothing")
	}
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	if pids := shimPIDs(d.Address()); len(pids) > 0 {
		t.Fatalf("shims still running after Stop: %v", pids)
	}
	select {
	case <-d.exited:
	default:
		t.Fatal("containerd still running after Stop")
	}
}

func TestStartContainerdLongDir(t *testing.T) {
	needContainerd(t)
	long := filepath.Join(t.TempDir(), strings.Repeat("d", 100))
	d, err := StartContainerd(context.Background(), long)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	if !strings.HasPrefix(d.Address(), "/tmp/") || len(d.Address()) > maxSocketPath {
		t.Fatalf("a long folder should put the socket in /tmp: %s", d.Address())
	}
	rt, err := NewContainerd(context.Background(), ContainerdOptions{Address: d.Address(), Namespace: fmt.Sprintf("gpunex-test-%d-long", os.Getpid())})
	if err != nil {
		t.Fatal(err)
	}
	rt.Close()
}

// TestLogLimit: a job printing without end is killed for its log, which holds exactly the
// limit: the first MiB of what it printed, nothing more.
func TestLogLimit(t *testing.T) {
	rt, ref := testRuntime(t)
	small := newInstanceWith(t, rt.Namespace(), ContainerdOptions{MaxLogBytes: 1 << 20})
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "out"), 0o700)
	spec := Spec{ID: "noisy", Image: ref, Args: []string{"yes", "a line of log that never ends"}, MemoryBytes: 32 << 20, CPUMillis: 500, Pids: 8,
		ScratchBytes: 1 << 20, WallClock: 30 * time.Second, OutputDir: filepath.Join(dir, "out"), LogPath: filepath.Join(dir, "log")}
	ctx := context.Background()
	if err := small.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	exit, err := small.Wait(ctx, spec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := small.Remove(ctx, spec.ID); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(spec.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	if exit.Reason != ReasonLogLimit {
		t.Fatalf("a job printing without end: %+v, want reason %q", exit, ReasonLogLimit)
	}
	b, err := os.ReadFile(spec.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	line := "a line of log that never ends\n"
	if st.Size() != 1<<20 || !bytes.HasPrefix(b, []byte(line+line)) || strings.Trim(string(b), line) != "" {
		t.Fatalf("the log holds %d bytes (limit %d) starting %q", st.Size(), 1<<20, b[:min(len(b), 80)])
	}
}

// TestRealGPUDevices gives a job one non-simulated GPU out of four, on fake device nodes
// (no GPU here): the job must see that GPU's node (by its minor number, not its NVML
// index) and the control nodes only, and the device cgroup must allow only those. A GPU
// whose node is missing is an error, not a job without its GPU.
func TestRealGPUDevices(t *testing.T) {
	rt, ref := testRuntime(t)
	rt.devDir = fakeGPUNodes(t)
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "out"), 0o700)
	spec := Spec{ID: "gpu-job", Image: ref, MemoryBytes: 32 << 20, CPUMillis: 500, Pids: 16, ScratchBytes: 1 << 20, WallClock: 30 * time.Second,
		OutputDir: filepath.Join(dir, "out"), LogPath: filepath.Join(dir, "log"),
		GPUs: []GPU{{Index: 0, Minor: 2, UUID: "GPU-22222222"}},
		Args: []string{"sh", "-c", `echo DEVS: $(ls /dev | grep nvidia); echo VISIBLE=$GPUNEX_VISIBLE_GPUS; mknod /dev/x c 195 0 2>/dev/null && echo MKNOD-OK; echo READY; sleep 10`}}
	ctx := context.Background()
	gone := spec
	gone.ID, gone.GPUs = "gpu-gone", []GPU{{Index: 1, Minor: 7, UUID: "GPU-77777777"}}
	if err := rt.Start(ctx, gone); err == nil || !strings.Contains(err.Error(), "nvidia7") || !strings.Contains(err.Error(), "driver") {
		t.Fatalf("a GPU without its device node: %v", err)
	}
	if err := rt.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	var log []byte
	for !bytes.Contains(log, []byte("READY")) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		log, _ = os.ReadFile(spec.LogPath)
	}
	rules, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/devices", rt.Namespace(), spec.ID, "devices.list"))
	if err := rt.Remove(ctx, spec.ID); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(log, []byte("DEVS: nvidia-uvm nvidia-uvm-tools nvidia2 nvidiactl\n")) {
		t.Errorf("the job should see only nvidia2 and the control nodes:\n%s", log)
	}
	if !bytes.Contains(log, []byte("VISIBLE=GPU-22222222\n")) || bytes.Contains(log, []byte("MKNOD-OK")) {
		t.Errorf("log:\n%s", log)
	}
	if err != nil {
		t.Skipf("no cgroup v1 device list to check: %v", err)
	}
	t.Logf("device cgroup of a job with GPU 2:\n%s", rules)
	for _, want := range []string{"c 195:2 rwm", "c 195:255 rwm", "c 240:0 rwm"} {
		if !bytes.Contains(rules, []byte(want+"\n")) {
			t.Errorf("the device cgroup should allow %q; it holds:\n%s", want, rules)
		}
	}
	for _, bad := range []string{"c 195:0 ", "c 195:1 ", "c 195:3 ", "a *:* rwm"} {
		if bytes.Contains(rules, []byte(bad)) {
			t.Errorf("the device cgroup allows %q; it holds:\n%s", bad, rules)
		}
	}
}

// TestOwnersShareANamespace: two nodes on one containerd namespace (the devnet's
// providers) never see, stop or remove each other's jobs. A provider restarting used to
// remove the other providers' running jobs as containers no job of its owned: a SIGKILL
// that no log explained.
func TestOwnersShareANamespace(t *testing.T) {
	rt, ref := testRuntime(t)
	open := func(owner string) *Containerd {
		return newInstanceWith(t, rt.Namespace(), ContainerdOptions{Owner: owner})
	}
	a, b := open("provider-a"), open("provider-b")
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "out"), 0o700)
	spec := Spec{ID: "owned-by-a", Image: ref, Args: []string{"sleep", "3"}, MemoryBytes: 32 << 20, CPUMillis: 200, Pids: 8,
		ScratchBytes: 1 << 20, WallClock: 30 * time.Second, OutputDir: filepath.Join(dir, "out"), LogPath: filepath.Join(dir, "log")}
	ctx := context.Background()
	if err := a.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	defer a.Remove(ctx, spec.ID)
	infos, err := b.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 0 {
		t.Fatalf("provider b lists %+v: another node's job", infos)
	}
	if err := b.Remove(ctx, spec.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("provider b removes a's job: %v, want ErrNotFound", err)
	}
	if err := b.Kill(ctx, spec.ID, "not yours"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("provider b kills a's job: %v, want ErrNotFound", err)
	}
	infos, err = a.List(ctx)
	if err != nil || len(infos) != 1 || !infos[0].Running {
		t.Fatalf("provider a lists %+v (%v): its job should still run", infos, err)
	}
	exit, err := a.Wait(ctx, spec.ID)
	if err != nil || exit.Code != 0 || exit.Reason != ReasonExited {
		t.Fatalf("a's job ended %+v (%v); want code 0, reason exited: nothing else may stop it", exit, err)
	}
}

// TestUserNamespace: a job's uid 0 to 65535 are a range of unprivileged host ids of its own:
// what it writes to /output belongs to its range's uid on the host, not to 65534 or root;
// it sees its own cgroup as the root of the hierarchy (cgroup namespace); it cannot become
// root, nor make a user namespace of its own.
func TestUserNamespace(t *testing.T) {
	rt, ref := testRuntime(t)
	if ok, why := rt.UserNamespaces(); !ok {
		if os.Getenv("GPUNEX_REQUIRE_CONTAINERD") == "1" {
			t.Fatalf("user namespaces are required here: %s", why)
		}
		t.Skipf("skipping: no user namespaces here: %s", why)
	}
	s := &suite{rt: rt, image: ref}
	spec := withProbe(t, s.spec(t, "sh", "-c", `echo UIDMAP $(cat /proc/self/uid_map)
echo GIDMAP $(cat /proc/self/gid_map)
echo written > /output/f
echo "setuid0 => $(/output/probe setuid0)"
echo "unshare => $(/output/probe unshare)"
echo "chown => $(/output/probe chown)"
sed 's/^/CGROUP /' /proc/self/cgroup`))
	exit, log := s.run(t, rt, spec)
	wantExit(t, exit, 0, ReasonExited, log)
	var base uint64
	if _, err := fmt.Sscanf(log[strings.Index(log, "UIDMAP "):], "UIDMAP 0 %d 65536", &base); err != nil || base < UsernsFirstID {
		t.Fatalf("the job's uid map should map 0-65535 to a range from %d: %v; log:\n%s", UsernsFirstID, err, log)
	}
	if !strings.Contains(log, fmt.Sprintf("GIDMAP 0 %d 65536", base)) {
		t.Errorf("the gid map should match the uid map; log:\n%s", log)
	}
	st, err := os.Stat(filepath.Join(spec.OutputDir, "f"))
	if err != nil {
		t.Fatal(err)
	}
	if uid := st.Sys().(*syscall.Stat_t).Uid; uid != uint32(base)+JobUID {
		t.Errorf("the job's file belongs to host uid %d, want %d (its range's 65534)", uid, uint32(base)+JobUID)
	}
	v := probeLines(log)
	for _, what := range []string{"setuid0", "unshare", "chown"} {
		if !strings.HasPrefix(v[what], "refused EPERM") {
			t.Errorf("%s: %q, want refused EPERM; log:\n%s", what, v[what], log)
		}
	}
	n := 0
	for _, line := range strings.Split(log, "\n") {
		if rest, ok := strings.CutPrefix(line, "CGROUP "); ok {
			n++
			if !strings.HasSuffix(rest, ":/") {
				t.Errorf("with a cgroup namespace the job's cgroups are its root; it sees %q", rest)
			}
		}
	}
	if n == 0 {
		t.Errorf("no cgroup listed; log:\n%s", log)
	}
}

// fakeGPUNodes makes the device nodes of four NVIDIA GPUs and the driver's control nodes
// (major 195 and 240, as the driver numbers them) in a folder.
func fakeGPUNodes(t *testing.T) string {
	t.Helper()
	dev := t.TempDir()
	nodes := map[string][2]uint32{"nvidia0": {195, 0}, "nvidia1": {195, 1}, "nvidia2": {195, 2}, "nvidia3": {195, 3},
		"nvidiactl": {195, 255}, "nvidia-uvm": {240, 0}, "nvidia-uvm-tools": {240, 1}}
	for name, mm := range nodes {
		if err := unix.Mknod(filepath.Join(dev, name), unix.S_IFCHR|0o666, int(unix.Mkdev(mm[0], mm[1]))); err != nil {
			t.Skipf("cannot make fake device nodes here: %v", err)
		}
	}
	return dev
}

// TestCDIGPUs: with a CDI spec naming the host's GPUs by UUID (as nvidia-ctk cdi generate
// writes it, here on fake nodes), a job gets exactly its GPUs' nodes, the spec's control
// nodes, libraries and environment, and no other GPU; the device cgroup agrees. A GPU the
// spec does not name falls back to the device rules.
func TestCDIGPUs(t *testing.T) {
	rt, ref := testRuntime(t)
	dev := fakeGPUNodes(t)
	lib := filepath.Join(t.TempDir(), "libcuda.so.1")
	os.WriteFile(lib, []byte("fake libcuda"), 0o644)
	node := func(name string) string {
		return fmt.Sprintf(`{"path": "/dev/%s", "hostPath": %q}`, name, filepath.Join(dev, name))
	}
	var devices []string
	for i, uuid := range []string{"GPU-00000000", "GPU-11111111", "GPU-22222222", "GPU-33333333"} {
		devices = append(devices, fmt.Sprintf(`{"name": %q, "containerEdits": {"deviceNodes": [%s]}}`, uuid, node(fmt.Sprintf("nvidia%d", i))),
			fmt.Sprintf(`{"name": "%d", "containerEdits": {"deviceNodes": [%s]}}`, i, node(fmt.Sprintf("nvidia%d", i))))
	}
	spec := fmt.Sprintf(`{"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": [%s],
"containerEdits": {"env": ["NVIDIA_VISIBLE_DEVICES=void"], "deviceNodes": [%s, %s],
"mounts": [{"hostPath": %q, "containerPath": "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "options": ["ro", "nosuid", "nodev", "bind"]}]}}`,
		strings.Join(devices, ", "), node("nvidiactl"), node("nvidia-uvm"), lib)
	cdiDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(cdiDir, "nvidia.json"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	rt.gpus = newGPUDevices([]string{cdiDir})
	rt.devDir = t.TempDir() // the fallback's nodes: none, so a fallback shows as an error
	s := &suite{rt: rt, image: ref}
	job := s.spec(t, "sh", "-c", `echo DEVS: $(ls /dev | grep nvidia); echo ENV=$NVIDIA_VISIBLE_DEVICES; cat /usr/lib/x86_64-linux-gnu/libcuda.so.1; echo
for d in /dev/nvidia*; do echo "OPEN $d: $(head -c 1 $d 2>&1 >/dev/null)"; done
echo READY; sleep 10`)
	job.GPUs = []GPU{{Index: 1, Minor: 1, UUID: "GPU-11111111"}, {Index: 3, Minor: 3, UUID: "GPU-33333333"}}
	ctx := context.Background()
	if err := rt.Start(ctx, job); err != nil {
		t.Fatal(err)
	}
	var log []byte
	for deadline := time.Now().Add(10 * time.Second); !bytes.Contains(log, []byte("READY")) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		log, _ = os.ReadFile(job.LogPath)
	}
	rules, rerr := os.ReadFile(filepath.Join("/sys/fs/cgroup/devices", rt.Namespace(), job.ID, "devices.list"))
	if err := rt.Remove(ctx, job.ID); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"DEVS: nvidia-uvm nvidia1 nvidia3 nvidiactl\n", "ENV=void\n", "fake libcuda",
		// Allowed by the device cgroup, the fake nodes have no driver behind them (ENXIO);
		// a node the cgroup denies fails with EPERM.
		"OPEN /dev/nvidia1: head: /dev/nvidia1: No such device or address\n", "OPEN /dev/nvidia3: head: /dev/nvidia3: No such device or address\n",
		"OPEN /dev/nvidiactl: head: /dev/nvidiactl: No such device or address\n"} {
		if !bytes.Contains(log, []byte(want)) {
			t.Errorf("the job should show %q; log:\n%s", want, log)
		}
	}
	if rerr == nil {
		for _, want := range []string{"c 195:1 rwm", "c 195:3 rwm", "c 195:255 rwm"} {
			if !bytes.Contains(rules, []byte(want+"\n")) {
				t.Errorf("the device cgroup should allow %q; it holds:\n%s", want, rules)
			}
		}
		for _, bad := range []string{"c 195:0 ", "c 195:2 ", "a *:* rwm"} {
			if bytes.Contains(rules, []byte(bad)) {
				t.Errorf("the device cgroup allows %q; it holds:\n%s", bad, rules)
			}
		}
	}
	// A GPU the spec does not name: the fallback, whose node is missing here.
	other := s.spec(t, "true")
	other.GPUs = []GPU{{Index: 5, Minor: 5, UUID: "GPU-55555555"}}
	if err := rt.Start(ctx, other); err == nil || !strings.Contains(err.Error(), "nvidia5") {
		rt.Remove(ctx, other.ID)
		t.Fatalf("a GPU without a CDI entry should fall back to its device node: %v", err)
	}
}

// TestUsernsRangesPerHost: two nodes on one host (two runtimes, two namespaces) starting
// jobs whose IDs hash to the same range give them different ranges; a range is free on the
// host again once its job is removed.
func TestUsernsRangesPerHost(t *testing.T) {
	a, refA := testRuntime(t)
	b, refB := testRuntime(t)
	if ok, why := a.UserNamespaces(); !ok {
		t.Skipf("skipping: no user namespaces here: %s", why)
	}
	sa, sb := &suite{rt: a, image: refA}, &suite{rt: b, image: refB}
	ja, jb := sa.spec(t, "sleep", "30"), sb.spec(t, "sleep", "30")
	ja.ID, jb.ID = "same-job-id", "same-job-id"
	ctx := context.Background()
	for _, x := range []struct {
		rt   *Containerd
		spec Spec
	}{{a, ja}, {b, jb}} {
		if err := x.rt.Start(ctx, x.spec); err != nil {
			t.Fatal(err)
		}
		defer x.rt.Remove(ctx, x.spec.ID)
	}
	base := func(rt *Containerd) string {
		ctr, err := rt.client.LoadContainer(rt.ns(ctx), "same-job-id")
		if err != nil {
			t.Fatal(err)
		}
		labels, _ := ctr.Labels(rt.ns(ctx))
		return labels[labelUIDBase]
	}
	ba, bb := base(a), base(b)
	if ba == "" || ba == bb {
		t.Fatalf("two jobs on one host got ranges %q and %q", ba, bb)
	}
	if _, err := os.Stat(filepath.Join(usernsClaimDir, ba)); err != nil {
		t.Fatalf("the range %s is not claimed on the host: %v", ba, err)
	}
	if err := a.Remove(ctx, ja.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(usernsClaimDir, ba)); !os.IsNotExist(err) {
		t.Fatalf("the range %s is still claimed after its job was removed: %v", ba, err)
	}
}
