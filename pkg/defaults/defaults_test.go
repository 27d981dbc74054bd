package defaults

import (
	"testing"
	"time"
)

func TestPositive(t *testing.T) {
	for _, c := range []struct {
		in, want time.Duration
	}{
		{0, time.Minute},
		{-time.Second, time.Minute},
		{time.Second, time.Second},
	} {
		got := c.in
		Positive(&got, time.Minute)
		if got != c.want {
			t.Errorf("Positive(%v, 1m) = %v, want %v", c.in, got, c.want)
		}
	}
	n, rate := 0, 2.5
	Positive(&n, 4)
	Positive(&rate, 50)
	if n != 4 || rate != 2.5 {
		t.Errorf("int 0 -> %d, want 4; float 2.5 -> %v, want 2.5", n, rate)
	}
}
