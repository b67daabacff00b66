package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	log "github.com/sirupsen/logrus"
	"go.gazette.dev/core/broker/client"
	pb "go.gazette.dev/core/broker/protocol"
	mbp "go.gazette.dev/core/mainboilerplate"
)

// clientZone is the zone of this test process: the dispatcher prefers brokers
// of this zone when a route offers a choice.
const clientZone = "zone-a"

// brokerDef is one broker of a cluster. impl ("courant" or "gazette") and bin
// (its binary) default to CLUSTER_IMPL and CLUSTER_BIN.
// netns and host (both or neither) run it in that network namespace, serving on
// that address (see netfault_test.go).
type brokerDef struct{ zone, id, impl, bin, netns, host string }

// brokerDefs are the brokers of every cluster (unless clusterOpts.defs says
// otherwise): two in zone-a, one in zone-b. (Gazette requires an ID suffix of
// 4 to 128 characters.)
var brokerDefs = []brokerDef{
	{zone: "zone-a", id: "brk1"}, {zone: "zone-a", id: "brk2"}, {zone: "zone-b", id: "brk3"},
}

var (
	implName  string // "courant" or "gazette"
	brokerBin string // absolute path of the broker binary
	etcdAddr  string
	runID     = strconv.FormatInt(time.Now().UnixNano()%1e12, 36)
	// clientLog receives the Go client library's logrus output (retry warnings),
	// which would otherwise flood the test output. Swapped per test.
	clientLog = &swapWriter{w: io.Discard}
)

func TestMain(m *testing.M) {
	// The dispatcher gRPC balancer must be registered before any Dial, exactly
	// as Gazette consumers do at startup.
	pb.RegisterGRPCDispatcher(clientZone)
	log.SetOutput(clientLog)
	log.SetLevel(log.InfoLevel)

	implName = strings.TrimSpace(os.Getenv("CLUSTER_IMPL"))
	if implName == "" {
		implName = "courant"
	}
	brokerBin = strings.TrimSpace(os.Getenv("CLUSTER_BIN"))
	if brokerBin == "" {
		if implName == "gazette" {
			brokerBin = "gazette"
		} else {
			brokerBin = "../../../target/debug/courant"
		}
	}
	if strings.Contains(brokerBin, "/") {
		if abs, err := filepath.Abs(brokerBin); err == nil {
			brokerBin = abs
		}
	} else if p, err := exec.LookPath(brokerBin); err == nil {
		brokerBin = p
	}
	etcdAddr = strings.TrimSpace(os.Getenv("ETCD_ADDRESS"))
	if etcdAddr != "" && !strings.Contains(etcdAddr, "://") {
		etcdAddr = "http://" + etcdAddr
	}
	os.Exit(m.Run())
}

type swapWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *swapWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (s *swapWriter) set(w io.Writer) {
	s.mu.Lock()
	s.w = w
	s.mu.Unlock()
}

func isGazette() bool { return implName == "gazette" }

// envDuration reads a Go duration from the environment, or returns def.
func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	var s = strings.TrimSpace(os.Getenv(name))
	if s == "" {
		return def
	}
	var d, err = time.ParseDuration(s)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, s, err)
	}
	return d
}

// ---------------------------------------------------------------------------
// Cluster and broker processes.

type clusterOpts struct {
	lease   time.Duration // --etcd.lease (default 4s)
	brokers int           // how many of the defs to start now (default all)
	defs    []brokerDef   // the cluster's brokers (default brokerDefs, all of CLUSTER_IMPL)
}

type cluster struct {
	t       *testing.T
	ctx     context.Context
	cancel  context.CancelFunc
	uid     string // unique to this test: etcd prefix and journal names
	prefix  string // --etcd.prefix
	dir     string // scratch dir of this test
	shared  string // --broker.file-root shared by all brokers
	lease   time.Duration
	brokers []*broker
	lb      *tcpLB

	evMu    sync.Mutex
	evFile  *os.File
	evTail  []string
	evStart time.Time
	failure string // why the test failed (fatalf), repeated after the log dumps
}

// fatalf fails the test now, as t.Fatalf, and repeats the reason as the last line of
// the failure's output (after the event log and the brokers' logs), where a reader of
// only its tail still finds it.
func (c *cluster) fatalf(format string, args ...interface{}) {
	c.t.Helper()
	var msg = fmt.Sprintf(format, args...)
	c.evMu.Lock()
	if c.failure == "" {
		c.failure = msg
	}
	c.evMu.Unlock()
	c.event("FAILED: %s", msg)
	c.t.Fatal(msg)
}

type broker struct {
	c       *cluster
	zone    string
	id      string
	impl    string // "courant" or "gazette"
	bin     string // absolute path of its binary
	port    int
	dataDir string
	logPath string
	netns   string // Network namespace to run in ("": this one).
	host    string // Address to serve on ("": 127.0.0.1).

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{} // Closed when the current process exited.
	state   *os.ProcessState
	stopped bool // SIGSTOPped.
	starts  int

	direct pb.RoutedJournalClient // Dialed to this broker, no route cache.
}

func (b *broker) String() string { return b.zone + "/" + b.id }

func (b *broker) addr() string { return fmt.Sprintf("%s:%d", b.hostIP(), b.port) }

func (b *broker) hostIP() string {
	if b.host != "" {
		return b.host
	}
	return "127.0.0.1"
}

func (b *broker) endpoint() pb.Endpoint { return pb.Endpoint("http://" + b.addr()) }

func (b *broker) procID() pb.ProcessSpec_ID { return pb.ProcessSpec_ID{Zone: b.zone, Suffix: b.id} }

func (b *broker) isGazette() bool { return b.impl == "gazette" }

// newCluster prepares opts.defs (default brokerDefs: ports, dirs, clients)
// and starts opts.brokers of them. Everything is killed when the test ends.
func newCluster(t *testing.T, opts clusterOpts) *cluster {
	t.Helper()
	if etcdAddr == "" {
		t.Skip("ETCD_ADDRESS is not set (see tests/go/README.md, or run .ci/steps/60-cluster.sh)")
	}
	var defs = append([]brokerDef(nil), opts.defs...)
	if len(defs) == 0 {
		defs = append(defs, brokerDefs...)
	}
	var impls []string
	for i := range defs {
		if defs[i].impl == "" {
			defs[i].impl = implName
		}
		if defs[i].bin == "" {
			defs[i].bin = brokerBin
		}
		if _, err := os.Stat(defs[i].bin); err != nil {
			t.Fatalf("binary %q of %s broker %s: %v (CLUSTER_IMPL=%s, CLUSTER_BIN)", defs[i].bin, defs[i].impl, defs[i].id, err, implName)
		}
		impls = append(impls, defs[i].id+"="+defs[i].impl+" ("+defs[i].bin+")")
	}
	if opts.lease == 0 {
		opts.lease = 4 * time.Second
	}
	if opts.brokers == 0 {
		opts.brokers = len(defs)
	}
	var tn = strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	var uid = fmt.Sprintf("%s-%s-%d", tn, runID, time.Now().UnixNano()%1e6)

	var dir string
	if root := os.Getenv("CLUSTER_DIR"); root != "" {
		dir = filepath.Join(root, uid)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	} else {
		dir = t.TempDir()
	}
	var ctx, cancel = context.WithCancel(context.Background())
	var c = &cluster{
		t:       t,
		ctx:     ctx,
		cancel:  cancel,
		uid:     uid,
		prefix:  "/courant-test/" + uid,
		dir:     dir,
		shared:  filepath.Join(dir, "fragments"),
		lease:   opts.lease,
		evStart: time.Now(),
	}
	if err := os.MkdirAll(c.shared, 0o755); err != nil {
		t.Fatal(err)
	}
	var err error
	if c.evFile, err = os.Create(filepath.Join(dir, "events.log")); err != nil {
		t.Fatal(err)
	}
	if f, err := os.Create(filepath.Join(dir, "client.log")); err == nil {
		clientLog.set(f)
		t.Cleanup(func() { clientLog.set(io.Discard); _ = f.Close() })
	}
	for _, d := range defs {
		var b = &broker{
			c:       c,
			zone:    d.zone,
			id:      d.id,
			impl:    d.impl,
			bin:     d.bin,
			port:    freePort(t),
			dataDir: filepath.Join(dir, "data-"+d.id),
			logPath: filepath.Join(dir, "broker-"+d.id+".log"),
			netns:   d.netns,
			host:    d.host,
		}
		var conn = (&mbp.AddressConfig{Address: b.endpoint()}).MustDial(ctx)
		b.direct = pb.NewRoutedJournalClient(pb.NewJournalClient(conn), pb.NoopDispatchRouter{})
		c.brokers = append(c.brokers, b)
	}
	t.Cleanup(c.shutdown)
	c.event("cluster %s: brokers %s, etcd %s, prefix %s, lease %s, dir %s",
		uid, strings.Join(impls, ", "), etcdAddr, c.prefix, c.lease, dir)

	for _, b := range c.brokers[:opts.brokers] {
		b.start()
	}
	return c
}

// shutdown kills every broker, and on failure prints the event log and the
// tail of every broker's log.
func (c *cluster) shutdown() {
	if c.t.Failed() {
		c.evMu.Lock()
		var tail = append([]string(nil), c.evTail...)
		var failure = c.failure
		c.evMu.Unlock()
		for _, b := range c.brokers {
			c.t.Logf("---- tail of %s (%s):\n%s", b, b.logPath, tailFile(b.logPath, 40))
		}
		c.t.Logf("---- client library log: %s", filepath.Join(c.dir, "client.log"))
		c.t.Logf("---- last events (full log: %s):\n%s", c.evFile.Name(), strings.Join(tail, "\n"))
		if failure != "" {
			c.t.Logf("---- FAILED: %s", failure)
		}
	}
	for _, b := range c.brokers {
		b.kill()
	}
	if c.lb != nil {
		c.lb.close()
	}
	c.cancel()
	_ = c.evFile.Close()
}

// event records a timestamped line in events.log (printed on failure).
func (c *cluster) event(format string, args ...interface{}) {
	var line = fmt.Sprintf("%8.3fs ", time.Since(c.evStart).Seconds()) + fmt.Sprintf(format, args...)
	c.evMu.Lock()
	defer c.evMu.Unlock()
	_, _ = fmt.Fprintln(c.evFile, line)
	c.evTail = append(c.evTail, line)
	if len(c.evTail) > 80 {
		c.evTail = c.evTail[len(c.evTail)-80:]
	}
	if os.Getenv("CLUSTER_VERBOSE") == "1" {
		c.t.Log(line)
	}
}

// args are the broker's flags. CLUSTER_BROKER_ARGS go to brokers of
// CLUSTER_IMPL only (all of them, unless a test mixes implementations).
// --log.level: COURANT_LOG_LEVEL / GAZETTE_LOG_LEVEL for brokers of that
// implementation, else CLUSTER_LOG_LEVEL, else info.
func (b *broker) args() []string {
	var level = strings.TrimSpace(os.Getenv(strings.ToUpper(b.impl) + "_LOG_LEVEL"))
	if level == "" {
		level = strings.TrimSpace(os.Getenv("CLUSTER_LOG_LEVEL"))
	}
	if level == "" {
		level = "info"
	}
	var args = []string{"serve",
		"--etcd.address", etcdAddr,
		"--etcd.prefix", b.c.prefix,
		"--etcd.lease", b.c.lease.String(),
		"--broker.zone", b.zone,
		"--broker.id", b.id,
		"--broker.host", b.hostIP(),
		"--broker.port", strconv.Itoa(b.port),
		"--broker.file-root", b.c.shared,
		"--log.level", level,
	}
	if !b.isGazette() {
		args = append(args, "--broker.bind", b.hostIP(), "--data-dir", b.dataDir)
	}
	if b.impl != implName {
		return args
	}
	return append(args, strings.Fields(os.Getenv("CLUSTER_BROKER_ARGS"))...)
}

// start (re)starts the broker process with the same ID, port and data dir.
func (b *broker) start() {
	var t = b.c.t
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd != nil && !isClosed(b.done) {
		t.Fatalf("broker %s is already running", b)
	}
	var logf, err = os.OpenFile(b.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	b.starts++
	_, _ = fmt.Fprintf(logf, "==== start #%d at %s: %s %s\n", b.starts,
		time.Now().Format(time.RFC3339Nano), b.bin, strings.Join(b.args(), " "))

	var cmd = exec.Command(b.bin, b.args()...)
	if b.netns != "" {
		// `ip netns exec` execs the broker itself, so the pid (and kill) stay its own.
		cmd = exec.Command("ip", append([]string{"netns", "exec", b.netns, b.bin}, b.args()...)...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = b.c.dir
	// Never outlive the test process. Pdeathsig fires when the OS *thread*
	// that forked exits, so fork from one locked thread that never exits.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err = spawn(cmd); err != nil {
		_ = logf.Close()
		t.Fatalf("starting broker %s: %v", b, err)
	}
	var done = make(chan struct{})
	b.cmd, b.done, b.state, b.stopped = cmd, done, nil, false
	go func() {
		_ = cmd.Wait()
		_ = logf.Close()
		b.mu.Lock()
		b.state = cmd.ProcessState
		b.mu.Unlock()
		b.c.event("broker %s (pid %d) exited: %v", b, cmd.Process.Pid, cmd.ProcessState)
		close(done)
	}()
	b.c.event("broker %s (%s) started (pid %d, start #%d) on %s", b, b.impl, cmd.Process.Pid, b.starts, b.addr())
}

// running is true if the process is alive (it may be SIGSTOPped).
func (b *broker) running() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cmd != nil && !isClosed(b.done)
}

// serving is true if the process is alive and not SIGSTOPped.
func (b *broker) serving() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cmd != nil && !isClosed(b.done) && !b.stopped
}

func (b *broker) signal(sig syscall.Signal) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd == nil || isClosed(b.done) {
		return
	}
	_ = b.cmd.Process.Signal(sig)
	switch sig {
	case syscall.SIGSTOP:
		b.stopped = true
	case syscall.SIGCONT:
		b.stopped = false
	}
	b.c.event("broker %s (pid %d): sent %v", b, b.cmd.Process.Pid, sig)
}

// kill sends SIGKILL (and SIGCONT, in case it's stopped) and waits for exit.
func (b *broker) kill() {
	b.mu.Lock()
	var cmd, done = b.cmd, b.done
	b.mu.Unlock()
	if cmd == nil || isClosed(done) {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	b.c.event("broker %s (pid %d): kill -9", b, cmd.Process.Pid)
	<-done
}

// waitExit waits up to |timeout| for the current process to exit.
func (b *broker) waitExit(timeout time.Duration) (*os.ProcessState, bool) {
	b.mu.Lock()
	var done = b.done
	b.mu.Unlock()
	if done == nil {
		return nil, false
	}
	select {
	case <-done:
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.state, true
	case <-time.After(timeout):
		return nil, false
	}
}

var spawnCh = make(chan func())

func init() {
	go func() {
		runtime.LockOSThread() // Never unlocked: this thread lives as long as the process.
		for fn := range spawnCh {
			fn()
		}
	}()
}

// spawn starts |cmd| from the spawner thread.
func spawn(cmd *exec.Cmd) error {
	var errCh = make(chan error)
	spawnCh <- func() { errCh <- cmd.Start() }
	return <-errCh
}

func isClosed(ch chan struct{}) bool {
	if ch == nil {
		return true
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func freePort(t *testing.T) int {
	var l, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func tailFile(path string, n int) string {
	var f, err = os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	var sc = bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > 4*n {
			lines = lines[len(lines)-n:]
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (c *cluster) byID(id pb.ProcessSpec_ID) *broker {
	for _, b := range c.brokers {
		if b.zone == id.Zone && b.id == id.Suffix {
			return b
		}
	}
	return nil
}

func (c *cluster) byName(id string) *broker {
	for _, b := range c.brokers {
		if b.id == id {
			return b
		}
	}
	return nil
}

// ---------------------------------------------------------------------------
// Clients.

// routedClient dials |addr| exactly as a Gazette consumer dials its service
// address (dispatcher balancer), with a RouteCache: RPCs go straight to the
// brokers the routes name, and to |addr| when no route is cached.
func (c *cluster) routedClient(addr string) (pb.RoutedJournalClient, *client.RouteCache) {
	var conn = (&mbp.AddressConfig{Address: pb.Endpoint("http://" + addr)}).MustDial(c.ctx)
	var rc = client.NewRouteCache(1024, time.Minute)
	return pb.NewRoutedJournalClient(pb.NewJournalClient(conn), rc), rc
}

// anyClient returns the direct client of a serving broker (rotating).
var anyCounter atomic.Int64

func (c *cluster) anyClient() pb.RoutedJournalClient {
	var n = int(anyCounter.Add(1))
	for i := range c.brokers {
		var b = c.brokers[(n+i)%len(c.brokers)]
		if b.serving() {
			return b.direct
		}
	}
	return c.brokers[0].direct
}

// ---------------------------------------------------------------------------
// Journals and routes.

func (c *cluster) journalName(i int) pb.Journal {
	return pb.Journal(fmt.Sprintf("cluster/%s/j%02d", c.uid, i))
}

func (c *cluster) spec(name pb.Journal, replication int32) *pb.JournalSpec {
	return &pb.JournalSpec{
		Name:        name,
		Replication: replication,
		LabelSet:    pb.MustLabelSet("courant-cluster", c.uid),
		Fragment: pb.JournalSpec_Fragment{
			Length:           256 << 10,
			CompressionCodec: pb.CompressionCodec_NONE,
			Stores:           []pb.FragmentStore{"file:///"},
			RefreshInterval:  2 * time.Second,
		},
	}
}

// apply creates the specs (they must not exist) through any serving broker.
func (c *cluster) apply(specs ...*pb.JournalSpec) {
	c.t.Helper()
	var req = new(pb.ApplyRequest)
	for _, s := range specs {
		req.Changes = append(req.Changes, pb.ApplyRequest_Change{Upsert: s, ExpectModRevision: 0})
	}
	var deadline = time.Now().Add(30 * time.Second)
	for {
		var ctx, cancel = context.WithTimeout(c.ctx, 5*time.Second)
		var resp, err = client.ApplyJournals(ctx, c.anyClient(), req)
		cancel()
		if err == nil {
			c.event("applied %d journals at revision %d", len(specs), resp.Header.Etcd.Revision)
			return
		}
		var serving = 0
		for _, b := range c.brokers {
			if b.serving() {
				serving++
			}
		}
		if time.Now().After(deadline) || serving == 0 {
			c.t.Fatalf("ApplyJournals(%d specs): %v (%d brokers serving)", len(specs), err, serving)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// list returns the journals of this test as seen by any serving broker.
func (c *cluster) list() (*pb.ListResponse, error) {
	var ctx, cancel = context.WithTimeout(c.ctx, 3*time.Second)
	defer cancel()
	return client.ListAllJournals(ctx, c.anyClient(), pb.ListRequest{
		Selector: pb.LabelSelector{Include: pb.MustLabelSet("courant-cluster", c.uid)},
	})
}

func (c *cluster) routes() (map[pb.Journal]pb.Route, error) {
	var resp, err = c.list()
	if err != nil {
		return nil, err
	}
	var out = make(map[pb.Journal]pb.Route, len(resp.Journals))
	for _, j := range resp.Journals {
		out[j.Spec.Name] = j.Route
	}
	return out, nil
}

func (c *cluster) route(j pb.Journal) pb.Route {
	c.t.Helper()
	var rts, err = c.routes()
	if err != nil {
		c.t.Fatalf("List: %v", err)
	}
	return rts[j]
}

func fmtRoute(rt pb.Route) string {
	var parts []string
	for i, m := range rt.Members {
		var s = m.Suffix
		if int32(i) == rt.Primary {
			s += "*"
		}
		parts = append(parts, s)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// waitRoutes polls List until ok(journal, route) holds for every journal of
// |names| (and List lists all of them), for at most |timeout|.
func (c *cluster) waitRoutes(names []pb.Journal, timeout time.Duration, what string,
	ok func(pb.Journal, pb.Route) bool) (map[pb.Journal]pb.Route, error) {
	var deadline = time.Now().Add(timeout)
	var last string
	for {
		var rts, err = c.routes()
		if err != nil {
			last = "List: " + err.Error()
		} else {
			var bad []string
			for _, j := range names {
				if rt, found := rts[j]; !found {
					bad = append(bad, string(j)+" not listed")
				} else if !ok(j, rt) {
					bad = append(bad, fmt.Sprintf("%s %s", j[strings.LastIndexByte(string(j), '/')+1:], fmtRoute(rt)))
				}
			}
			if len(bad) == 0 {
				return rts, nil
			}
			sort.Strings(bad)
			if len(bad) > 5 {
				bad = append(bad[:5], fmt.Sprintf("... (%d journals)", len(bad)))
			}
			last = strings.Join(bad, "; ")
		}
		if time.Now().After(deadline) || c.ctx.Err() != nil {
			return rts, fmt.Errorf("%s: not reached after %v: %s", what, timeout, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// fullyReplicated: the route has |r| members, a primary, and every member is a
// serving broker.
func (c *cluster) fullyReplicated(r int) func(pb.Journal, pb.Route) bool {
	return func(_ pb.Journal, rt pb.Route) bool {
		if len(rt.Members) != r || rt.Primary < 0 {
			return false
		}
		for _, m := range rt.Members {
			if b := c.byID(m); b == nil || !b.serving() {
				return false
			}
		}
		return true
	}
}

// waitReady waits for every journal to be fully replicated (r members and a primary).
func (c *cluster) waitReady(names []pb.Journal, r int, timeout time.Duration) map[pb.Journal]pb.Route {
	c.t.Helper()
	var rts, err = c.waitRoutes(names, timeout, "readiness", c.fullyReplicated(r))
	if err != nil {
		c.t.Fatal(err)
	}
	c.event("ready: %d journals with %d members and a primary", len(names), r)
	return rts
}

// primaryCounts returns, per broker, the journals it is primary of.
func primaries(rts map[pb.Journal]pb.Route) map[pb.ProcessSpec_ID][]pb.Journal {
	var out = make(map[pb.ProcessSpec_ID][]pb.Journal)
	for j, rt := range rts {
		if rt.Primary >= 0 && int(rt.Primary) < len(rt.Members) {
			var p = rt.Members[rt.Primary]
			out[p] = append(out[p], j)
		}
	}
	return out
}

// ---------------------------------------------------------------------------
// A TCP load balancer standing for a consumer's "service address": each
// accepted connection is piped to the next serving broker. Consumers dial one
// service address; without it, a client whose one dialed broker is killed
// blocks every unrouted RPC until that broker comes back.

type tcpLB struct {
	ln       net.Listener
	backends func() []string
	next     atomic.Int64
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	closed   bool
}

func (c *cluster) startLB() string {
	var ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.t.Fatal(err)
	}
	c.lb = &tcpLB{ln: ln, conns: map[net.Conn]struct{}{}, backends: func() []string {
		var out []string
		for _, b := range c.brokers {
			if b.serving() {
				out = append(out, b.addr())
			}
		}
		return out
	}}
	go c.lb.serve()
	return ln.Addr().String()
}

func (lb *tcpLB) track(conn net.Conn, add bool) bool {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if add {
		if lb.closed {
			return false
		}
		lb.conns[conn] = struct{}{}
	} else {
		delete(lb.conns, conn)
	}
	return true
}

func (lb *tcpLB) serve() {
	for {
		var conn, err = lb.ln.Accept()
		if err != nil {
			return
		}
		go lb.handle(conn)
	}
}

func (lb *tcpLB) handle(in net.Conn) {
	var backends = lb.backends()
	var out net.Conn
	var n = int(lb.next.Add(1))
	for i := range backends {
		var err error
		if out, err = net.DialTimeout("tcp", backends[(n+i)%len(backends)], 500*time.Millisecond); err == nil {
			break
		}
	}
	if out == nil {
		_ = in.Close()
		return
	}
	if !lb.track(in, true) || !lb.track(out, true) {
		_ = in.Close()
		_ = out.Close()
		return
	}
	var once sync.Once
	var closeBoth = func() {
		once.Do(func() {
			_ = in.Close()
			_ = out.Close()
			lb.track(in, false)
			lb.track(out, false)
		})
	}
	go func() { _, _ = io.Copy(out, in); closeBoth() }()
	go func() { _, _ = io.Copy(in, out); closeBoth() }()
}

func (lb *tcpLB) close() {
	_ = lb.ln.Close()
	lb.mu.Lock()
	lb.closed = true
	for conn := range lb.conns {
		_ = conn.Close()
	}
	lb.mu.Unlock()
}

// ---------------------------------------------------------------------------
// Small helpers.

// readUntilErr reads |r| until it returns an error.
func readUntilErr(r io.Reader) ([]byte, error) {
	var out []byte
	var buf = make([]byte, 32*1024)
	for {
		var n, err = r.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			return out, err
		}
	}
}

// writeHead asks |rjc| for the journal's write head with a non-blocking,
// metadata-only read at offset -1.
func writeHead(ctx context.Context, rjc pb.RoutedJournalClient, j pb.Journal) (int64, error) {
	var r = client.NewReader(ctx, rjc, pb.ReadRequest{Journal: j, Offset: -1, Block: false, MetadataOnly: true})
	var _, err = r.Read(make([]byte, 1))
	if errors.Is(err, client.ErrOffsetNotYetAvailable) || errors.Is(err, client.ErrOffsetJump) || err == io.EOF {
		return r.Response.WriteHead, nil
	}
	return 0, fmt.Errorf("reading write head of %s: %v (response %v)", j, err, &r.Response)
}

func durationsSummary(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	var ms = make([]int64, len(ds))
	for i, d := range ds {
		ms[i] = d.Milliseconds()
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i] < ms[j] })
	return fmt.Sprintf("n=%d min=%d median=%d max=%d", len(ms), ms[0], ms[len(ms)/2], ms[len(ms)-1])
}
