package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	pb "go.gazette.dev/core/broker/protocol"
)

// TestNetFault: three brokers, each in its own network namespace (set up by
// .ci/steps/70-netfault.sh), hold 12 journals at replication 3 under a steady
// append load, through four network faults in turn:
//
//   - a primary cut from its peers (blackhole routes both ways, 8 s);
//   - a broker cut from etcd (blackhole route to etcd, 10 s, longer than its
//     4 s lease: its member and assignment keys expire while it still runs);
//   - a slow replica (token-bucket rate limit of 256 kbit/s on its link both
//     ways, 15 s; the kernel here has no netem, so slowness is queueing delay);
//   - a flapping link (the broker's veth down 1.5 s / up 1.5 s, 5 times).
//
// Before each fault the cluster must be healthy again (every journal fully
// replicated and acknowledging appends); the time from the heal to that is
// reported as the recovery time. A broker that exits during a fault is
// restarted and reported. At the end, every acknowledged append must be in its
// journal at exactly its acknowledged offsets (so none is lost and no offset
// has two contents) and tailing readers never saw bytes that later changed.
//
// Environment (skipped without NETFAULT_NETNS):
//
//	NETFAULT_NETNS    ns=ip=veth,... one per broker: namespace, its address,
//	                  and the root side of its veth pair (the ns side is eth0)
//	NETFAULT_ETCD_IP  etcd's address (on the bridge, reachable from the namespaces)
func TestNetFault(t *testing.T) {
	var spec = os.Getenv("NETFAULT_NETNS")
	if spec == "" {
		t.Skip("NETFAULT_NETNS is not set (run .ci/steps/70-netfault.sh)")
	}
	var etcdIP = os.Getenv("NETFAULT_ETCD_IP")
	var nets = strings.Split(spec, ",")
	if len(nets) != 3 || etcdIP == "" {
		t.Fatalf("NETFAULT_NETNS needs three ns=ip=veth entries and NETFAULT_ETCD_IP: %q %q", spec, etcdIP)
	}
	var veth = map[string]string{} // broker id -> root-side veth
	var defs []brokerDef
	for i, n := range nets {
		var f = strings.Split(n, "=")
		if len(f) != 3 {
			t.Fatalf("bad NETFAULT_NETNS entry %q", n)
		}
		var zone = "zone-a"
		if i == 2 {
			zone = "zone-b"
		}
		var id = fmt.Sprintf("brk%d", i+1)
		defs = append(defs, brokerDef{zone: zone, id: id, netns: f[0], host: f[1]})
		veth[id] = f[2]
	}
	var c = newCluster(t, clusterOpts{defs: defs})
	const r = 3
	var w, names = setupWorkload(t, c, 12, r, workloadOpts{})
	w.fo.label = "NETFAULT-FAILOVER"
	w.start()
	time.Sleep(3 * time.Second)

	var sh = func(args ...string) {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Errorf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
		c.event("net: %s", strings.Join(args, " "))
	}
	var inNs = func(b *broker, args ...string) {
		sh(append([]string{"ip", "netns", "exec", b.netns}, args...)...)
	}
	// healthy waits (at most 90 s) until every journal is fully replicated and has
	// acknowledged an append since; a broker that exits meanwhile (Gazette's and
	// Courant's brokers exit when they find their lease expired) is restarted.
	var healthy = func(what string) {
		var start = time.Now()
		for {
			for _, b := range c.brokers {
				if !b.running() {
					t.Logf("NETFAULT %s: broker %s exited (%v); restarting it", what, b, b.state)
					b.start()
				}
			}
			var _, err = c.waitRoutes(names, time.Second, "full replication", c.fullyReplicated(r))
			if err == nil {
				break
			}
			if time.Since(start) > 90*time.Second {
				c.fatalf("%s: not healthy: %v", what, err)
			}
		}
		if err := w.waitAcked(time.Now(), 90*time.Second-time.Since(start)); err != nil {
			c.fatalf("%s: not healthy: %v", what, err)
		}
		c.event("healthy (%s) after %v", what, time.Since(start))
	}
	var results []string
	// fault runs one scenario: inject, hold, heal, then measure recovery.
	var fault = func(what string, victim *broker, js []pb.Journal, inject, heal func(), hold time.Duration) {
		healthy("before " + what)
		var acked0 = w.ackedRecords()
		var at = time.Now()
		if len(js) != 0 {
			w.fo.begin(what, at, js)
		}
		inject()
		time.Sleep(hold)
		var during = w.ackedRecords() - acked0
		heal()
		var healed = time.Now()
		healthy("after " + what)
		var rec = time.Since(healed)
		var line = fmt.Sprintf("%s (%s, %v): %d records acknowledged during the fault, recovered %v after the heal",
			what, victim, hold, during, rec.Round(time.Millisecond))
		t.Logf("NETFAULT %s", line)
		results = append(results, line)
	}
	var others = func(b *broker) (out []*broker) {
		for _, o := range c.brokers {
			if o != b {
				out = append(out, o)
			}
		}
		return out
	}

	// 1. The primary of the most journals, cut from its peers.
	var p, pjs = c.pickByPrimaries(false)
	fault("primary cut from its peers", p, pjs, func() {
		for _, o := range others(p) {
			inNs(p, "ip", "route", "add", "blackhole", o.host+"/32")
			inNs(o, "ip", "route", "add", "blackhole", p.host+"/32")
		}
	}, func() {
		for _, o := range others(p) {
			inNs(p, "ip", "route", "del", "blackhole", o.host+"/32")
			inNs(o, "ip", "route", "del", "blackhole", p.host+"/32")
		}
	}, 8*time.Second)

	// 2. The primary of the most journals, cut from etcd for longer than its lease.
	var e, ejs = c.pickByPrimaries(false)
	fault("broker cut from etcd", e, ejs, func() {
		inNs(e, "ip", "route", "add", "blackhole", etcdIP+"/32")
	}, func() {
		inNs(e, "ip", "route", "del", "blackhole", etcdIP+"/32")
	}, 10*time.Second)

	// 3. A slow replica (the broker with the fewest primaries).
	var s, _ = c.pickByPrimaries(true)
	var tbf = []string{"root", "tbf", "rate", "256kbit", "burst", "16kb", "latency", "500ms"}
	fault("slow replica", s, nil, func() {
		sh(append([]string{"tc", "qdisc", "add", "dev", veth[s.id]}, tbf...)...)
		inNs(s, append([]string{"tc", "qdisc", "add", "dev", "eth0"}, tbf...)...)
	}, func() {
		sh("tc", "qdisc", "del", "dev", veth[s.id], "root")
		inNs(s, "tc", "qdisc", "del", "dev", "eth0", "root")
	}, 15*time.Second)

	// 4. A flapping link (the primary of the most journals).
	var f, fjs = c.pickByPrimaries(false)
	fault("flapping link", f, fjs, func() {
		for i := 0; i < 5; i++ {
			sh("ip", "link", "set", veth[f.id], "down")
			time.Sleep(1500 * time.Millisecond)
			sh("ip", "link", "set", veth[f.id], "up")
			if i < 4 {
				time.Sleep(1500 * time.Millisecond)
			}
		}
	}, func() {}, 0)

	time.Sleep(2 * time.Second)
	w.finish(time.Minute, time.Minute)
	w.fo.summary()
	var res = w.check()
	for _, l := range results {
		t.Logf("RESULT netfault: %s", l)
	}
	if !t.Failed() {
		t.Logf("RESULT netfault: %d acknowledged records (%d bytes) all read back at their acknowledged offsets: lost 0, offsets with two contents 0",
			res.acked, res.bytes)
	}
}
