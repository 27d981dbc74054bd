package proc

import (
	"bufio"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// RSS is the resident set size of process pid, in bytes, from /proc/<pid>/status.
func RSS(pid int) (int64, error) { return statusBytes(pid, "VmRSS:") }

// PeakRSS is the largest resident set size process pid has had, in bytes.
func PeakRSS(pid int) (int64, error) { return statusBytes(pid, "VmHWM:") }

// statusBytes reads field (a size in kB) of /proc/<pid>/status, in bytes.
func statusBytes(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), field); ok {
			kib, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kib * 1024, err
		}
	}
	if err := s.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// userHZ is the unit of the CPU times in /proc/<pid>/stat: Linux reports
// them in USER_HZ, 100 per second, whatever the kernel's own tick.
const userHZ = 100

// CPUTime is the CPU time process pid has used, user and system, all
// threads, from /proc/<pid>/stat.
func CPUTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: count fields after it.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// After the name: state (field 3 of proc(5)), …, utime (14), stime (15).
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(f))
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// Usage is the CPU time each process of a tree has used, by pid, with its
// command name.
type Usage map[int]ProcessCPU

// ProcessCPU is one process's command name and CPU time.
type ProcessCPU struct {
	Name string
	CPU  time.Duration
}

// TreeUsage reads the CPU time of process root and of every process
// descended from it, as /proc has them now.
func TreeUsage(root int) (Usage, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	parent := map[int]int{}
	names := map[int]string{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue // it ended meanwhile
		}
		open, end := strings.IndexByte(string(b), '('), strings.LastIndexByte(string(b), ')')
		if open < 0 || end < open {
			continue
		}
		f := strings.Fields(string(b[end+1:]))
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		parent[pid], names[pid] = ppid, string(b[open+1:end])
	}
	in := func(pid int) bool {
		for seen := 0; pid > 1 && seen < 64; seen++ {
			if pid == root {
				return true
			}
			pid = parent[pid]
		}
		return pid == root
	}
	u := Usage{}
	for pid := range parent {
		if !in(pid) {
			continue
		}
		cpu, err := CPUTime(pid)
		if err != nil {
			continue
		}
		u[pid] = ProcessCPU{Name: names[pid], CPU: cpu}
	}
	return u, nil
}

// Since is what each process used from before to u, by command name (with
// its pid when several share it), largest first, as "name 1.2s" strings.
func (u Usage) Since(before Usage) []string {
	count := map[string]int{}
	for _, p := range u {
		count[p.Name]++
	}
	byName := map[string]time.Duration{}
	for pid, p := range u {
		name := p.Name
		if count[name] > 1 {
			name = fmt.Sprintf("%s[%d]", name, pid)
		}
		byName[name] += p.CPU - before[pid].CPU
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return byName[names[i]] > byName[names[j]] })
	out := make([]string, 0, len(names))
	for _, n := range names {
		if d := byName[n]; d > 0 {
			out = append(out, fmt.Sprintf("%s %v", n, d))
		}
	}
	return out
}
