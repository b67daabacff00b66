package main

import (
	"testing"
	"time"
)

func TestHistogramBuckets(t *testing.T) {
	for _, ns := range []int64{0, 1, 127, 128, 129, 255, 256, 1000, 123456, 1 << 40} {
		var lo, width = bucketRange(bucket(ns))
		if ns < lo || ns >= lo+width {
			t.Fatalf("%d in bucket [%d, %d)", ns, lo, lo+width)
		}
		if width > 1 && float64(width)/float64(lo) > 1.0/64 {
			t.Fatalf("bucket of %d too wide: %d", ns, width)
		}
	}
}

func TestHistogramQuantiles(t *testing.T) {
	var h histogram
	for i := 1; i <= 1000; i++ {
		h.record(time.Duration(i) * time.Microsecond)
	}
	for _, c := range []struct{ q, want float64 }{{0.5, 0.5}, {0.99, 0.99}, {0.999, 0.999}, {1, 1}} {
		var got = h.quantile(c.q)
		if got < c.want*0.99 || got > c.want*1.01 {
			t.Fatalf("q%v = %v ms, want about %v", c.q, got, c.want)
		}
	}
	var o histogram
	o.record(5 * time.Millisecond)
	h.merge(&o)
	if h.count != 1001 || h.quantile(1) != 5 {
		t.Fatalf("merge: count %d, max %v", h.count, h.quantile(1))
	}
}
