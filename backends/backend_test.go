package backends

import "testing"

func TestTailOf(t *testing.T) {
	cases := map[string]struct {
		in           string
		lines, limit int64
		want         string
		truncated    bool
	}{
		"everything":                      {in: "a\nb\nc\n", want: "a\nb\nc\n"},
		"last two lines":                  {in: "a\nb\nc\n", lines: 2, want: "b\nc\n", truncated: true},
		"no final newline":                {in: "a\nb\nc", lines: 2, want: "b\nc", truncated: true},
		"more lines asked than there are": {in: "a\nb\n", lines: 5, want: "a\nb\n"},
		"exactly as many lines":           {in: "a\nb\n", lines: 2, want: "a\nb\n"},
		"byte limit starts at a line":     {in: "aaaa\nbb\ncc\n", limit: 7, want: "bb\ncc\n", truncated: true},
		"byte limit inside one long line": {in: "aaaaaaaa", limit: 3, want: "aaa", truncated: true},
		"lines then bytes":                {in: "a\nbbbbbb\nc\n", lines: 2, limit: 4, want: "c\n", truncated: true},
		"empty":                           {in: "", lines: 3, limit: 3, want: ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, truncated := TailOf([]byte(tc.in), tc.lines, tc.limit)
			if string(got) != tc.want || truncated != tc.truncated {
				t.Errorf("TailOf(%q, %d, %d) = %q, %v; want %q, %v", tc.in, tc.lines, tc.limit, got, truncated, tc.want, tc.truncated)
			}
		})
	}
}
