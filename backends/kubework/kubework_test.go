package kubework

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

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

func TestContainerNamed(t *testing.T) {
	spec := func(names ...string) *corev1.PodSpec {
		s := &corev1.PodSpec{}
		for _, n := range names {
			s.Containers = append(s.Containers, corev1.Container{Name: n})
		}
		return s
	}
	for _, tc := range []struct {
		spec *corev1.PodSpec
		want string
	}{
		{spec("sidecar", "node"), "node"},
		{spec("trainer", "sidecar"), "trainer"},
		{spec(), "node"},
	} {
		if got := ContainerNamed(tc.spec, "node"); got != tc.want {
			t.Errorf("ContainerNamed(%v) = %q, want %q", tc.spec.Containers, got, tc.want)
		}
	}
}
