package passwordhash

import (
	"strings"
	"testing"
)

func TestHashAndVerify(t *testing.T) {
	h, err := Hash("correct horse battery staple")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h, "$argon2id$v=19$m=19456,t=2,p=1$") || strings.Contains(h, "horse") {
		t.Fatalf("hash %q", h)
	}
	if ok, err := Verify(h, "correct horse battery staple"); !ok || err != nil {
		t.Errorf("the right password: %v, %v", ok, err)
	}
	if ok, err := Verify(h, "correct horse battery stapler"); ok || err != nil {
		t.Errorf("a wrong password: %v, %v", ok, err)
	}
	again, _ := Hash("correct horse battery staple")
	if again == h {
		t.Error("two hashes of one password are equal: the salt is not fresh")
	}
	for _, bad := range []string{"", "$bcrypt$x", "$argon2id$v=18$m=1,t=1,p=1$AA$AA", "$argon2id$v=19$m=x$AA$AA"} {
		if _, err := Verify(bad, "x"); err == nil {
			t.Errorf("Verify(%q) accepted a malformed hash", bad)
		}
	}
}

func TestCheck(t *testing.T) {
	for password, want := range map[string]string{
		"short":                      "at least 12 characters",
		"ééééééééééé":                "at least 12 characters", // 11 characters, 22 bytes
		strings.Repeat("a", 1025):    "at most 1024 bytes",
		"\xff\xfe not UTF-8 at all!": "valid UTF-8",
		"twelve chars":               "",
	} {
		err := Check(password)
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("Check(%.20q) = %v, want %q", password, err, want)
		}
	}
}
