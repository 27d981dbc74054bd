package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"
)

// Units of Row values; the unit decides how a value is printed.
const (
	UnitMillis  = "ms"
	UnitCPU     = "ms CPU" // CPU time, coarse (10 ms ticks summed over a run)
	UnitSeconds = "s"
	UnitPerSec  = "objects/s"
	UnitMiB     = "MiB"
	UnitKiB     = "KiB"
	UnitServed  = "served" // 1 when the server answers in that encoding, else 0
)

// Row is one metric measured on both paths.
type Row struct {
	Metric string  `json:"metric"`
	Unit   string  `json:"unit"`
	Ichor  float64 `json:"ichor"`
	CRD    float64 `json:"crd"`
	// Ratio is Ichor/CRD, absent unless both values are positive amounts.
	Ratio *float64 `json:"ratio,omitempty"`
}

// Report is the result of one run.
type Report struct {
	Started  time.Time     `json:"started"`
	Duration time.Duration `json:"duration"`
	Config   Config        `json:"config"`
	// IchorArgs are the extra ichor-apiserver flags of the run, if any.
	IchorArgs []string `json:"ichorArgs,omitempty"`
	Rows      []Row    `json:"rows"`
	// Profiles are where ichor-apiserver's CPU goes per request.
	Profiles []*Profile `json:"profiles,omitempty"`
}

func (r *Report) add(metric, unit string, ichor, crd float64) {
	row := Row{Metric: metric, Unit: unit, Ichor: ichor, CRD: crd}
	// A ratio of a shrink, or of an encoding flag, says nothing.
	if unit != UnitServed && ichor > 0 && crd > 0 {
		ratio := math.Round(ichor/crd*1000) / 1000
		row.Ratio = &ratio
	}
	r.Rows = append(r.Rows, row)
}

// addContext adds a row whose two values do not compare, without a ratio.
func (r *Report) addContext(metric, unit string, ichor, crd float64) {
	r.Rows = append(r.Rows, Row{Metric: metric, Unit: unit, Ichor: ichor, CRD: crd})
}

func (r *Report) addDurations(metric string, ichor, crd time.Duration) {
	r.add(metric, UnitMillis, millis(ichor), millis(crd))
}

func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Row returns the row named metric, for tests and tools reading a report.
func (r *Report) Row(metric string) (Row, bool) {
	for _, row := range r.Rows {
		if row.Metric == metric {
			return row, true
		}
	}
	return Row{}, false
}

var identityText = map[string]string{
	IdentityRBAC:    "a user RBAC grants the machines to (-identity=rbac)",
	IdentityMasters: "a member of system:masters, which skips authorization (-identity=masters)",
}

// WriteTable prints the report as one aligned table.
func (r *Report) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "clients: %s\n", identityText[r.Config.Identity])
	if len(r.IchorArgs) > 0 {
		fmt.Fprintf(w, "ichor-apiserver flags: %s\n", strings.Join(r.IchorArgs, " "))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "metric\tunit\tIchor\tCRD\tIchor/CRD\t")
	for _, row := range r.Rows {
		ratio := "-"
		if row.Ratio != nil {
			ratio = fmt.Sprintf("%.2f", *row.Ratio)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", row.Metric, row.Unit, format(row.Unit, row.Ichor), format(row.Unit, row.CRD), ratio)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range r.Profiles {
		writeProfile(w, p)
	}
	return nil
}

func format(unit string, v float64) string {
	switch unit {
	case UnitServed:
		if v == 1 {
			return "yes"
		}
		return "no"
	case UnitMillis:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.1f", v)
	}
}

// WriteJSON stores the report as dir/<start time>.json and dir/latest.json.
func (r *Report) WriteJSON(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	stamp := filepath.Join(dir, r.Started.UTC().Format("20060102T150405Z"))
	for i, p := range r.Profiles {
		if len(p.raw) == 0 {
			continue
		}
		p.File = fmt.Sprintf("%s-ichor-apiserver-%d.pprof", stamp, i+1)
		if err := os.WriteFile(p.File, p.raw, 0o644); err != nil {
			return "", err
		}
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", err
	}
	name := stamp + ".json"
	if err := os.WriteFile(name, data, 0o644); err != nil {
		return "", err
	}
	return name, os.WriteFile(filepath.Join(dir, "latest.json"), data, 0o644)
}
