// Package cluster is a fault-injection test suite for a cluster of journal
// brokers: replication, allocation, proxying, graceful exit, crashes, stalls,
// etcd restarts and lease expiry. It starts and kills the broker processes
// itself, and runs unchanged against Courant (CLUSTER_IMPL=courant) or
// Gazette's own broker (CLUSTER_IMPL=gazette), which validates the tests.
//
// The client side is Gazette's Go client exactly as consumers use it
// (dispatcher balancer, RouteCache, AppendService, RetryReader).
//
// Environment:
//
//	ETCD_ADDRESS      etcd endpoint, e.g. http://127.0.0.1:23791 (tests skip if unset)
//	CLUSTER_IMPL      courant (default) or gazette
//	CLUSTER_BIN       broker binary (default ../../target/debug/courant)
//	CLUSTER_DIR       scratch root, kept after the run (default: a per-test t.TempDir())
//	ETCD_RESTART_CMD  shell command restarting etcd (TestFaultEtcdRestart skips if unset)
//	CLUSTER_CHAOS     chaos duration of TestNoAckedAppendLost (default 60s)
//	CLUSTER_BROKER_ARGS extra flags for every broker (split on whitespace)
//	CLUSTER_VERBOSE   1: also print the event log through t.Log
//
// See tests/go/README.md.
package cluster
