package schedule

import (
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for _, c := range []struct{ expr, tz, err string }{
		{"0 3 * * *", "", ""},
		{"@daily", "Europe/Paris", ""},
		{"@every 6h", "", ""},
		{"@every 1m", "", ""},
		{"@every 30s", "", "less than a minute apart"},
		{"61 * * * *", "", "not a cron schedule"},
		{"* * * * * *", "", "not a cron schedule"}, // no seconds field
		{"TZ=UTC 0 3 * * *", "", "set timeZone instead"},
		{"CRON_TZ=UTC 0 3 * * *", "", "set timeZone instead"},
		{"0 3 * * *", "Mars/Olympus", "not an IANA time zone"},
		{"0 3 * * *", "Local", "not an IANA time zone"},
		{"0 3 * * *", "/etc/localtime", "not an IANA time zone"},
	} {
		_, err := Parse(c.expr, c.tz)
		if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("Parse(%q, %q) = %v, want %q", c.expr, c.tz, err, c.err)
		}
	}
}

func TestNextIsInTheTimeZone(t *testing.T) {
	s, err := Parse("0 3 * * *", "Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	// 3:00 in Paris in winter is 2:00 UTC.
	got := s.Next(time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC))
	if want := time.Date(2026, 12, 5, 2, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Fatalf("Next = %v, want %v", got.UTC(), want)
	}
}

func TestLatestMakesUpOnlyTheLatestMissedRun(t *testing.T) {
	s, err := Parse("*/10 * * * *", "")
	if err != nil {
		t.Fatal(err)
	}
	after := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	if got := s.Latest(after, after.Add(9*time.Minute)); !got.IsZero() {
		t.Fatalf("no run is due yet, got %v", got)
	}
	if got, want := s.Latest(after, after.Add(35*time.Minute)), after.Add(30*time.Minute); !got.Equal(want) {
		t.Fatalf("Latest = %v, want %v", got, want)
	}
	// A week-old last run does not make the controller walk years of minutes.
	now := after.Add(400 * 24 * time.Hour)
	if got := s.Latest(time.Time{}, now); !got.Equal(now.Truncate(10 * time.Minute)) {
		t.Fatalf("Latest from the zero time = %v", got)
	}
}
