package statusapi

import (
	"strings"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func at(pct int32) *trainer.TrainerStatus {
	return &trainer.TrainerStatus{ProgressPercentage: ptr.To(pct), LastUpdatedTime: metav1.NewTime(now)}
}

// TestReportsPaceEachDispatch: the first report is due at once, the next
// one only Interval after the last write, or at once when forced (the work
// ended); a written report is no longer due.
func TestReportsPaceEachDispatch(t *testing.T) {
	r := NewReports(30 * time.Second)
	if r.Due("d", now, false) != nil {
		t.Fatal("due with no report")
	}
	r.Put("d", at(10))
	ts := r.Due("d", now, false)
	if ts == nil || *ts.ProgressPercentage != 10 {
		t.Fatalf("first report: %v, want due", ts)
	}
	r.Written("d", ts, now)
	if r.Due("d", now.Add(time.Hour), false) != nil {
		t.Fatal("written report due again")
	}
	r.Put("d", at(20))
	if r.Due("d", now.Add(29*time.Second), false) != nil {
		t.Error("second report due within the interval")
	}
	if r.Due("d", now.Add(29*time.Second), true) == nil {
		t.Error("forced report not due")
	}
	if r.Due("d", now.Add(30*time.Second), false) == nil {
		t.Error("second report not due after the interval")
	}
	// A report newer than the one written stays due.
	taken := r.Due("d", now.Add(30*time.Second), false)
	r.Put("d", at(30))
	r.Written("d", taken, now.Add(30*time.Second))
	if got := r.Due("d", now.Add(time.Hour), false); got == nil || *got.ProgressPercentage != 30 {
		t.Errorf("newer report = %v, want 30%% due", got)
	}
	r.Forget("d")
	if r.Len() != 0 {
		t.Errorf("forgotten Dispatch kept: %d entries", r.Len())
	}
}

func TestSignerRefusesTamperedCredentials(t *testing.T) {
	s, err := NewSigner(agentKey, "slurm-1")
	if err != nil {
		t.Fatal(err)
	}
	tok := s.Mint("uid-a", 3, now.Add(time.Hour))
	c, err := s.Verify(tok, now)
	if err != nil || c.Dispatch != "uid-a" || c.Attempt != 3 {
		t.Fatalf("Verify = %+v, %v", c, err)
	}
	other := s.Mint("uid-b", 3, now.Add(time.Hour))
	// The claims of one credential under the signature of another.
	spliced := tok[:len(tokenPrefix)+1] + splitPart(other, 1) + "." + splitPart(tok, 2)
	for name, bad := range map[string]string{"spliced": spliced, "truncated": tok[:len(tok)-2], "empty": ""} {
		if _, err := s.Verify(bad, now); err == nil {
			t.Errorf("%s credential accepted", name)
		}
	}
	if _, err := NewSigner(agentKey[:MinKeyBytes-1], "slurm-1"); err == nil {
		t.Error("short key accepted")
	}
}

func splitPart(tok string, i int) string { return strings.Split(tok, ".")[i] }
