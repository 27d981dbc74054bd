package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"ichor.dev/ichor/test/harness"
)

// TestSmoke runs the whole benchmark at tiny sizes against a real control
// plane and checks that both paths produced sane numbers. The full-size run
// is `make bench`, never part of `make test`.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	ctrllog.SetLogger(logr.Discard())
	binary, err := harness.BuildIchorAPIServer(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp, err := harness.Start(ctx, harness.Options{IchorBinary: binary, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()

	cfg := SmokeConfig()
	report, err := Run(ctx, cp, cfg, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	if err := report.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", table.String())

	for _, row := range report.Rows {
		for name, v := range map[string]float64{"Ichor": row.Ichor, "CRD": row.CRD} {
			switch {
			case math.IsNaN(v) || math.IsInf(v, 0):
				t.Errorf("%s: %s is %v", row.Metric, name, v)
			case row.Unit == UnitMillis || row.Unit == UnitPerSec || row.Unit == UnitKiB || row.Unit == UnitSeconds:
				if v <= 0 {
					t.Errorf("%s: %s is %v %s, want > 0", row.Metric, name, v, row.Unit)
				}
			}
		}
	}
	// Each path measured what it was asked to: the sizes show in the metric names.
	for _, metric := range []string{
		"create, 4 client(s): throughput (POST + PUT /status)",
		"LIST 40: full p99",
		"LIST 40: paginated (limit=7), all pages p50",
		"watch, 3 watchers: write to event p99",
		"server-side apply of a status condition p50",
		"typed informer (controller-runtime cache), 40 objects: time to sync",
		"RSS growth holding 40 objects: ichor-apiserver",
		"encoding application/json",
		"watch, 3 watchers: write to event p50 (Ichor in protobuf)",
		"watch, 3 watchers: server CPU per write: both servers",
		"typed informer (controller-runtime cache), 40 objects: time to sync (Ichor in protobuf)",
	} {
		if _, ok := report.Row(metric); !ok {
			t.Errorf("no row %q", metric)
		}
	}
	if row, _ := report.Row("encoding application/json"); row.Ichor != 1 || row.CRD != 1 {
		t.Errorf("both paths must serve JSON: %+v", row)
	}
	// Ichor serves protobuf, custom resources cannot; its protobuf is smaller.
	if row, _ := report.Row("encoding application/vnd.kubernetes.protobuf"); row.Ichor != 1 || row.CRD != 0 {
		t.Errorf("protobuf must be served by Ichor alone: %+v", row)
	}
	inJSON, _ := report.Row("LIST 40: response size")
	if proto, ok := report.Row("LIST 40: response size (Ichor in protobuf)"); !ok || proto.Ichor >= inJSON.Ichor {
		t.Errorf("Ichor's LIST of 40 is %.1f KiB in protobuf and %.1f KiB in JSON, want protobuf smaller", proto.Ichor, inJSON.Ichor)
	}
	// The objects are the realistic ones: about 3 KiB each, plus the server's
	// metadata (managedFields of two managers) on the wire.
	if row, ok := report.Row("LIST 40: response size"); ok {
		for name, kib := range map[string]float64{"Ichor": row.Ichor, "CRD": row.CRD} {
			if per := kib / 40; per < 3 || per > 8 {
				t.Errorf("%s: %.2f KiB per object on the wire, want 3 to 8", name, per)
			}
		}
	}
	// ichor-apiserver was profiled while requests came in, and every sample
	// was put somewhere.
	if len(report.Profiles) != 2 {
		t.Errorf("%d profiles of ichor-apiserver, want one of POSTs and one of watched writes", len(report.Profiles))
	}
	for _, p := range report.Profiles {
		if p.Requests == 0 || p.CPUPerRequest <= 0 || len(p.Shares) == 0 {
			t.Errorf("%s: no profile of ichor-apiserver's requests: %+v", p.Workload, p)
			continue
		}
		var sum float64
		for _, s := range p.Shares {
			sum += s.Percent
		}
		if math.Abs(sum-100) > 0.01 {
			t.Errorf("%s: the profile's shares add up to %.2f%%, want 100%%: %+v", p.Workload, sum, p.Shares)
		}
	}
	if _, err := json.Marshal(report); err != nil {
		t.Errorf("report does not encode as JSON: %v", err)
	}
	if !strings.Contains(table.String(), "Ichor/CRD") {
		t.Errorf("table has no ratio column:\n%s", table.String())
	}
}
