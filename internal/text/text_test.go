package text

import "testing"

func TestTruncate(t *testing.T) {
	cases := map[string]struct {
		s    string
		n    int
		want string
	}{
		"short":        {s: "abc", n: 5, want: "abc"},
		"exactly n":    {s: "abcde", n: 5, want: "abcde"},
		"cut with ...": {s: "abcdefgh", n: 6, want: "abc..."},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := Truncate(tc.s, tc.n); got != tc.want {
				t.Errorf("Truncate(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
			}
		})
	}
}
