package proc

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

func TestCPUTimeGrowsWhileThisProcessWorks(t *testing.T) {
	before, err := CPUTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for n := 0; ; n++ {
		now, err := CPUTime(os.Getpid())
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
	if v, err := RSS(os.Getpid()); err != nil || v <= 0 {
		t.Fatalf("rss = %d, %v; want a positive size", v, err)
	}
}

func TestTreeUsageHoldsThisProcessAndItsChildren(t *testing.T) {
	child := exec.Command("sleep", "30")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	u, err := TreeUsage(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := u[os.Getpid()]; !ok {
		t.Errorf("this process is not in its tree: %v", u)
	}
	if p, ok := u[child.Process.Pid]; !ok || p.Name != "sleep" {
		t.Errorf("its child is not in its tree as sleep: %v", u)
	}
	if _, ok := u[1]; ok && os.Getpid() != 1 {
		t.Errorf("init is in this process's tree")
	}
}
