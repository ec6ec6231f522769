package statusapi

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/kubeflow/trainer/v2/pkg/statusserver"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestReportRateCap: a job may post DefaultReportBurst reports at once and
// DefaultReportRate a second after; the next is answered 429 with
// Retry-After and a TooManyRequests Status, and not stored. Another job's
// budget is its own, refused requests spend none, and a forgotten
// Dispatch's budget goes with it.
func TestReportRateCap(t *testing.T) {
	signer, err := NewSigner(agentKey, "slurm-1")
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakePassiveClock(now)
	reports := NewReports(0)
	s := &Server{Target: "slurm-1", Auth: SignerAuth{Signer: signer, Clock: clk}, Clock: clk,
		Dispatches: dispatchMap{"uid-train": running("train"), "uid-other": running("other")}, Reports: reports, Log: logr.Discard()}
	srv := httptest.NewTLSServer(s.Handler())
	defer srv.Close()
	post := func(job, token string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.URL+statusserver.StatusUrl("team-a", job), strings.NewReader(validBody))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp, raw
	}
	train := mint(t, agentKey, "slurm-1", "uid-train", 2, now.Add(time.Hour))
	other := mint(t, agentKey, "slurm-1", "uid-other", 2, now.Add(time.Hour))

	// Refused requests spend nothing of the job's budget.
	for i := 0; i < 2*DefaultReportBurst; i++ {
		if resp, _ := post("train", other); resp.StatusCode != http.StatusForbidden {
			t.Fatalf("another job's credential: %d", resp.StatusCode)
		}
	}
	for i := 0; i < DefaultReportBurst; i++ {
		if resp, raw := post("train", train); resp.StatusCode != http.StatusOK {
			t.Fatalf("report %d of the burst: %d %s", i+1, resp.StatusCode, raw)
		}
	}
	reports.Written("uid-train", reports.Due("uid-train", now, true), now)
	resp, raw := post("train", train)
	var st metav1.Status
	_ = json.Unmarshal(raw, &st)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" ||
		st.Reason != metav1.StatusReasonTooManyRequests || st.Code != 429 || st.Details == nil || st.Details.RetryAfterSeconds != 1 {
		t.Errorf("over the burst: %d Retry-After %q %s; want 429, 1 s, TooManyRequests", resp.StatusCode, resp.Header.Get("Retry-After"), raw)
	}
	if reports.Due("uid-train", now, true) != nil {
		t.Error("a report over the cap was stored")
	}
	if resp, _ := post("other", other); resp.StatusCode != http.StatusOK {
		t.Errorf("another job within its budget: %d", resp.StatusCode)
	}
	clk.SetTime(now.Add(time.Second))
	if resp, _ := post("train", train); resp.StatusCode != http.StatusOK {
		t.Errorf("a second later: %d, want one more report", resp.StatusCode)
	}
	if resp, _ := post("train", train); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("two in that second: %d, want 429", resp.StatusCode)
	}
	reports.Forget("uid-train")
	reports.Forget("uid-other")
	if n := reports.Len(); n != 0 {
		t.Errorf("after Forget %d Dispatches kept, want 0", n)
	}
}
