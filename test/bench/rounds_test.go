package bench

import (
	"slices"
	"testing"
)

func TestShareSplitsEveryItemOnce(t *testing.T) {
	for _, tc := range []struct{ n, rounds int }{{1000, 5}, {10, 3}, {7, 7}, {20, 2}} {
		next := 0
		for r := range tc.rounds {
			first, count := share(tc.n, tc.rounds, r)
			if first != next || count < tc.n/tc.rounds || count > tc.n/tc.rounds+1 {
				t.Fatalf("share(%d, %d, %d) = %d, %d after %d items", tc.n, tc.rounds, r, first, count, next)
			}
			next += count
		}
		if next != tc.n {
			t.Errorf("share(%d, %d, …) covers %d items", tc.n, tc.rounds, next)
		}
	}
}

func TestInterleaveRotatesWhoGoesFirst(t *testing.T) {
	a, b, c := &path{name: "a"}, &path{name: "b"}, &path{name: "c"}
	var order []string
	if err := interleave(3, []*path{a, b, c}, func(_ int, p *path) error {
		order = append(order, p.name)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"a", "b", "c", "b", "c", "a", "c", "a", "b"}; !slices.Equal(order, want) {
		t.Errorf("order %v, want %v", order, want)
	}
}
