// Package defaults fills in the options a reconciler was built without:
// every reconciler's Options say "zero values take the defaults", and this
// is that rule, once.
package defaults

// Number is what an option that counts, paces or times something is.
type Number interface {
	~int | ~int32 | ~int64 | ~float64
}

// Positive sets *v to def unless *v is above zero: an option left unset
// (or set to a meaningless negative) takes its default.
func Positive[T Number](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}
