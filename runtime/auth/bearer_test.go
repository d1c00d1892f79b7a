package auth_test

import (
	"net/http"
	"testing"

	"github.com/switchboard-dev/switchboard/runtime/auth"
)

func TestBearerToken(t *testing.T) {
	tests := []struct {
		header []string
		want   string // "" means none
	}{
		{nil, ""},
		{[]string{""}, ""},
		{[]string{"Bearer"}, ""},
		{[]string{"Bearer "}, ""},
		{[]string{"Bearer abc"}, "abc"},
		{[]string{"bearer abc"}, "abc"},
		{[]string{"BeArEr    abc  "}, "abc"},
		{[]string{"Bearer\tabc"}, ""},
		{[]string{"Bearer abc def"}, ""},
		{[]string{"Bearer abc\x7f"}, ""},
		{[]string{"Bearer äbc"}, ""},
		{[]string{"Basic abc"}, ""},
		{[]string{"Bearerabc"}, ""},
		{[]string{"Bearer a.b-c_d~e+f/g=="}, "a.b-c_d~e+f/g=="},
		{[]string{"Bearer abc", "Bearer abc"}, ""},
	}
	for _, tt := range tests {
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		for _, h := range tt.header {
			r.Header.Add("Authorization", h)
		}
		got, ok := auth.BearerToken(r)
		if got != tt.want || ok != (tt.want != "") {
			t.Errorf("%q: got %q, %v; want %q", tt.header, got, ok, tt.want)
		}
	}
}
