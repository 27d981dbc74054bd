// Package schedule reads a backup schedule: cron syntax and an IANA time
// zone, as TalosCluster spec.backup gives them. It is part of the API — what
// those two fields mean — so it lives beside the types: validation checks
// them with it at admission and the backup controller computes run times
// with it, so both read a schedule the same way. Like the rest of
// pkg/apis, it imports nothing else of Ichor's.
package schedule

import (
	"errors"
	"fmt"
	"strings"
	"time"
	// The time zone database is compiled in: the container images have none.
	_ "time/tzdata"

	"github.com/robfig/cron/v3"
)

// parser reads five-field cron expressions (minute, hour, day of month,
// month, day of week) and descriptors (@daily, @every 6h), as Kubernetes
// CronJobs do.
var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Schedule is a parsed backup schedule.
type Schedule struct {
	cron cron.Schedule
	loc  *time.Location
}

// ErrTimeZoneInExpression refuses the TZ= and CRON_TZ= prefixes: the time
// zone has its own field.
var ErrTimeZoneInExpression = errors.New("must not name a time zone (TZ= or CRON_TZ=); set timeZone instead")

// Parse reads expr in the time zone tz (empty: UTC).
func Parse(expr, tz string) (*Schedule, error) {
	loc, err := Location(tz)
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
		return nil, ErrTimeZoneInExpression
	}
	c, err := parser.Parse(expr)
	if err != nil {
		return nil, fmt.Errorf("not a cron schedule: %w", err)
	}
	if every, ok := c.(cron.ConstantDelaySchedule); ok && every.Delay < time.Minute {
		return nil, errors.New("runs less than a minute apart: a schedule's runs are named by the minute")
	}
	return &Schedule{cron: c, loc: loc}, nil
}

// Location reads an IANA time zone name; empty is UTC.
func Location(tz string) (*time.Location, error) {
	if tz == "" {
		return time.UTC, nil
	}
	// time.LoadLocation also accepts "Local" and paths: only names.
	if tz == "Local" || strings.HasPrefix(tz, "/") || strings.Contains(tz, "..") {
		return nil, fmt.Errorf("%q is not an IANA time zone name", tz)
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, fmt.Errorf("%q is not an IANA time zone name", tz)
	}
	return loc, nil
}

// Next is the first run time after t.
func (s *Schedule) Next(t time.Time) time.Time {
	return s.cron.Next(t.In(s.loc))
}

// lookBack bounds how far back Latest looks for a missed run.
const lookBack = 7 * 24 * time.Hour

// Latest is the latest run time in (after, now], or the zero time when
// none falls there: after a controller restart only the latest missed run
// is made up for, as a CronJob does. Runs missed more than a week ago
// are not looked for.
func (s *Schedule) Latest(after, now time.Time) time.Time {
	if floor := now.Add(-lookBack); after.Before(floor) {
		after = floor
	}
	var latest time.Time
	for t := s.Next(after); !t.IsZero() && !t.After(now); t = s.Next(t) {
		latest = t
	}
	return latest
}
