package bytesize

import "testing"

func TestFormat(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 3000: "2.9 KiB", 96 << 20: "96.0 MiB", 3 << 30: "3.0 GiB"} {
		if got := Format(n); got != want {
			t.Errorf("Format(%d) = %q, want %q", n, got, want)
		}
	}
}
