package kubework

import (
	"strings"
	"testing"

	"github.com/trainyard-dev/trainyard/backends"
)

func TestReadTail(t *testing.T) {
	in := strings.Repeat("0123456789\n", 10000)
	for _, tc := range []struct {
		limit       int64
		wantDropped bool
	}{{0, false}, {25, true}, {200000, false}, {50000, true}} {
		data, dropped, err := readTail(strings.NewReader(in), tc.limit)
		if err != nil {
			t.Fatal(err)
		}
		if dropped != tc.wantDropped || (tc.limit > 0 && int64(len(data)) < tc.limit && int64(len(in)) >= tc.limit) ||
			!strings.HasSuffix(in, string(data)) {
			t.Errorf("limit %d: dropped %v, %d bytes", tc.limit, dropped, len(data))
		}
		out, cut := backends.TailOf(data, 0, tc.limit)
		if tc.limit > 0 && tc.limit < int64(len(in)) && (!cut || int64(len(out)) > tc.limit || out[0] != '0') {
			t.Errorf("limit %d: TailOf kept %d bytes from %q, cut %v", tc.limit, len(out), out[:1], cut)
		}
	}
}
