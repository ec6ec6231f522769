package bench

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestMeanRunning(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 4, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	cases := []struct {
		name     string
		spans    []span
		from, to time.Time
		want     float64
	}{
		{name: "empty window", spans: []span{{at(0), at(10)}}, from: at(5), to: at(5), want: 0},
		{name: "no spans", from: at(0), to: at(10), want: 0},
		{name: "one span the whole window", spans: []span{{at(0), at(10)}}, from: at(0), to: at(10), want: 1},
		{name: "half of the window", spans: []span{{at(5), at(10)}}, from: at(0), to: at(10), want: 0.5},
		{name: "clipped on both sides", spans: []span{{at(-5), at(20)}}, from: at(0), to: at(10), want: 1},
		{name: "still running", spans: []span{{at(2), time.Time{}}}, from: at(0), to: at(10), want: 0.8},
		{name: "never started", spans: []span{{}, {at(0), at(10)}}, from: at(0), to: at(10), want: 1},
		{name: "outside the window", spans: []span{{at(-10), at(-1)}, {at(11), at(12)}}, from: at(0), to: at(10), want: 0},
		{name: "overlapping spans add up", spans: []span{{at(0), at(10)}, {at(0), at(10)}, {at(0), at(5)}}, from: at(0), to: at(10), want: 2.5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := meanRunning(tc.spans, tc.from, tc.to); math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("meanRunning = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestQuantile(t *testing.T) {
	cases := []struct {
		name   string
		v      []float64
		q      float64
		want   float64
		wantOK bool
	}{
		{name: "empty", q: 0.5},
		{name: "one value", v: []float64{3}, q: 0.95, want: 3, wantOK: true},
		{name: "median of unsorted", v: []float64{5, 1, 4, 2, 3}, q: 0.5, want: 3, wantOK: true},
		{name: "p95 of 20", v: []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}, q: 0.95, want: 20, wantOK: true},
		{name: "q 1 is the largest", v: []float64{2, 1}, q: 1, want: 2, wantOK: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := quantile(tc.v, tc.q)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("quantile = %v, %v; want %v, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

const apiMetricsText = `# HELP apiserver_request_total [STABLE] Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code.
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="All",group="kueue.x-k8s.io",resource="workloads",scope="resource",subresource="",verb="POST",version="v1beta2"} 3
apiserver_request_total{code="201",component="apiserver",dry_run="",group="kueue.x-k8s.io",resource="workloads",scope="resource",subresource="",verb="POST",version="v1beta2"} 10
apiserver_request_total{code="409",component="apiserver",dry_run="",group="kueue.x-k8s.io",resource="workloads",scope="resource",subresource="",verb="POST",version="v1beta2"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="kueue.x-k8s.io",resource="workloads",scope="resource",subresource="status",verb="PATCH",version="v1beta2"} 30
apiserver_request_total{code="200",component="apiserver",dry_run="",group="kueue.x-k8s.io",resource="workloads",scope="cluster",subresource="",verb="LIST",version="v1beta2"} 4
apiserver_request_total{code="200",component="apiserver",dry_run="",group="kueue.x-k8s.io",resource="workloads",scope="cluster",subresource="",verb="WATCH",version="v1beta2"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="",scope="",subresource="/healthz",verb="GET",version=""} 99
# HELP apiserver_request_duration_seconds x
# TYPE apiserver_request_duration_seconds histogram
apiserver_request_duration_seconds_bucket{verb="GET",le="+Inf"} 1
apiserver_request_duration_seconds_sum{verb="GET"} 0.1
apiserver_request_duration_seconds_count{verb="GET"} 1
`

func TestParseAPIRequests(t *testing.T) {
	cases := []struct {
		name string
		text string
		want apiRequests
	}{
		{name: "no family", text: "# TYPE other counter\nother 1\n", want: apiRequests{}},
		{name: "by verb and resource, codes summed, watches and non-resource paths left out", text: apiMetricsText,
			want: apiRequests{"POST workloads (dry run)": 3, "POST workloads": 12, "PATCH workloads/status": 30, "LIST workloads": 4}},
		{name: "other families, even malformed ones, are not parsed", text: "unparsable_family{x=\"1\" garbage\n" + apiMetricsText,
			want: apiRequests{"POST workloads (dry run)": 3, "POST workloads": 12, "PATCH workloads/status": 30, "LIST workloads": 4}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseAPIRequests(strings.NewReader(tc.text))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("parseAPIRequests (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAPIRequestsPerJob(t *testing.T) {
	cases := []struct {
		name          string
		before, after apiRequests
		jobs          int
		want          string
		wantWrites    float64
	}{
		{name: "no jobs", after: apiRequests{"CREATE trainjobs": 1}, want: "-"},
		{name: "nothing happened", before: apiRequests{"GET pods": 5}, after: apiRequests{"GET pods": 5}, jobs: 2,
			want: "writes 0.00 (); reads and dry runs 0.00 ()"},
		{name: "difference over jobs, largest first, tiny parts left out, dry runs apart from writes",
			before: apiRequests{"POST workloads": 10, "PATCH workloads/status": 5, "GET targets": 1},
			after: apiRequests{"POST workloads": 110, "PATCH workloads/status": 305, "POST trainjobs": 100,
				"POST workloads (dry run)": 100, "GET targets": 101, "LIST dispatches": 50, "DELETE events": 0.4},
			jobs: 100,
			want: "writes 5.00 (PATCH workloads/status 3.00, POST trainjobs 1.00, POST workloads 1.00); " +
				"reads and dry runs 2.50 (GET targets 1.00, POST workloads (dry run) 1.00, LIST dispatches 0.50)",
			wantWrites: 5.004,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.after.since(tc.before)
			if got := d.perJob(tc.jobs); got != tc.want {
				t.Errorf("perJob = %q, want %q", got, tc.want)
			}
			if tc.jobs > 0 {
				if got := d.writes(tc.jobs); math.Abs(got-tc.wantWrites) > 1e-9 {
					t.Errorf("writes = %v, want %v", got, tc.wantWrites)
				}
			}
		})
	}
}
