package validation

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"ichor.dev/ichor/pkg/apis/ichor/install"
)

// fe is one expected error: its type and its field path.
type fe struct {
	Type  field.ErrorType
	Field string
}

func (e fe) String() string { return fmt.Sprintf("%s %s", e.Field, e.Type) }

func required(f string) fe     { return fe{field.ErrorTypeRequired, f} }
func invalid(f string) fe      { return fe{field.ErrorTypeInvalid, f} }
func notSupported(f string) fe { return fe{field.ErrorTypeNotSupported, f} }
func duplicate(f string) fe    { return fe{field.ErrorTypeDuplicate, f} }
func forbidden(f string) fe    { return fe{field.ErrorTypeForbidden, f} }
func tooMany(f string) fe      { return fe{field.ErrorTypeTooMany, f} }
func tooLong(f string) fe      { return fe{field.ErrorTypeTooLong, f} }

// expectErrors requires the set of (type, field) pairs of errs to be exactly
// want: a missing error and an unexpected extra one both fail the test.
func expectErrors(t *testing.T, errs field.ErrorList, want ...fe) {
	t.Helper()
	got := map[fe]bool{}
	for _, e := range errs {
		got[fe{e.Type, e.Field}] = true
	}
	wanted := map[fe]bool{}
	for _, w := range want {
		wanted[w] = true
	}
	var missing, extra []string
	for w := range wanted {
		if !got[w] {
			missing = append(missing, w.String())
		}
	}
	for g := range got {
		if !wanted[g] {
			extra = append(extra, g.String())
		}
	}
	if len(missing) > 0 || len(extra) > 0 {
		sort.Strings(missing)
		sort.Strings(extra)
		var all []string
		for _, e := range errs {
			all = append(all, "\t"+e.Error())
		}
		t.Errorf("missing errors: %v\nunexpected errors: %v\nall errors:\n%s", missing, extra, strings.Join(all, "\n"))
	}
}

// testScheme holds the internal and v1alpha1 types with their defaults and conversions.
var testScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	install.Install(s)
	return s
}()

// defaultedInternal applies the v1alpha1 defaults to versioned (as decoding a
// request does) and converts the result into internal.
func defaultedInternal(t *testing.T, versioned, internal runtime.Object) {
	t.Helper()
	testScheme.Default(versioned)
	if err := testScheme.Convert(versioned, internal, nil); err != nil {
		t.Fatalf("converting %T to %T: %v", versioned, internal, err)
	}
}

// fixedTime is a timestamp for fixtures; conditions need a non-zero one.
var fixedTime = metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))

func goodCondition(conditionType string) metav1.Condition {
	return metav1.Condition{
		Type:               conditionType,
		Status:             metav1.ConditionTrue,
		Reason:             "AsExpected",
		Message:            "all good",
		LastTransitionTime: fixedTime,
	}
}

// badConditionCase is one broken conditions list and the errors it must give,
// relative to the conditions field path.
type badConditionCase struct {
	name       string
	conditions []metav1.Condition
	want       func(conditions string) []fe
}

// badConditionCases exercise the shared condition checks the same way for every kind.
var badConditionCases = []badConditionCase{
	{
		name:       "condition without reason",
		conditions: []metav1.Condition{func() metav1.Condition { c := goodCondition("Ready"); c.Reason = ""; return c }()},
		want:       func(p string) []fe { return []fe{required(p + "[0].reason")} },
	},
	{
		name:       "condition with unknown status",
		conditions: []metav1.Condition{func() metav1.Condition { c := goodCondition("Ready"); c.Status = "Maybe"; return c }()},
		want:       func(p string) []fe { return []fe{notSupported(p + "[0].status")} },
	},
	{
		name:       "condition without type or transition time",
		conditions: []metav1.Condition{func() metav1.Condition { c := goodCondition(""); c.LastTransitionTime = metav1.Time{}; return c }()},
		want:       func(p string) []fe { return []fe{required(p + "[0].type"), required(p + "[0].lastTransitionTime")} },
	},
	{
		name:       "repeated condition type",
		conditions: []metav1.Condition{goodCondition("Ready"), goodCondition("Ready")},
		want:       func(p string) []fe { return []fe{duplicate(p + "[1]")} },
	},
}

func ptr[T any](v T) *T { return &v }

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }
