package bench

import (
	"os"
	"testing"
	"time"
)

func TestCPUTimeGrowsWhileThisProcessWorks(t *testing.T) {
	before, err := cpuTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for n := 0; ; n++ {
		now, err := cpuTime(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if now > before {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("CPU time stayed at %v through %d reads", before, n)
		}
	}
}

func TestRSSOfThisProcess(t *testing.T) {
	if v, err := rss(os.Getpid()); err != nil || v <= 0 {
		t.Fatalf("rss = %d, %v; want a positive size", v, err)
	}
}
