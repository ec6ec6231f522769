package statusapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"github.com/kubeflow/trainer/v2/pkg/statusserver"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tyt "github.com/trainyard-dev/trainyard/internal/testing"
)

var (
	now      = time.Date(2026, 12, 5, 4, 0, 0, 0, time.UTC)
	agentKey = bytes.Repeat([]byte("k"), MinKeyBytes)
)

type dispatchMap map[types.UID]*v1alpha1.Dispatch

func (m dispatchMap) ByUID(_ context.Context, uid types.UID) (*v1alpha1.Dispatch, error) {
	return m[uid], nil
}

// running is the agent's Dispatch of hub TrainJob team-a/name, attempt 2.
func running(name string) *v1alpha1.Dispatch {
	d := tyt.MakeDispatch(name, "agents", "slurm-1").Attempt(2).Phase(v1alpha1.DispatchRunning).Obj()
	d.UID = types.UID("uid-" + name)
	d.Spec.TrainJob.Name = name
	return d
}

// statusServer serves the endpoint for target slurm-1 over TLS with jobs
// "train" and "other" running.
func statusServer(t *testing.T) (*httptest.Server, *Reports) {
	t.Helper()
	signer, err := NewSigner(agentKey, "slurm-1")
	if err != nil {
		t.Fatal(err)
	}
	reports := NewReports(0)
	s := &Server{Target: "slurm-1", Auth: SignerAuth{Signer: signer, Clock: clocktesting.NewFakePassiveClock(now)},
		Dispatches: dispatchMap{"uid-train": running("train"), "uid-other": running("other")}, Reports: reports, Log: logr.Discard()}
	srv := httptest.NewTLSServer(s.Handler())
	t.Cleanup(srv.Close)
	return srv, reports
}

func mint(t *testing.T, key []byte, target string, uid types.UID, attempt int32, expires time.Time) string {
	t.Helper()
	s, err := NewSigner(key, target)
	if err != nil {
		t.Fatal(err)
	}
	return s.Mint(uid, attempt, expires)
}

const validBody = `{"trainerStatus":{"progressPercentage":40,"estimatedRemainingSeconds":600,` +
	`"metrics":[{"name":"loss","value":"0.31"}],"lastUpdatedTime":"2026-12-05T03:59:00Z"}}`

func metricsBody(n int, name string) string {
	var ms []string
	for i := 0; i < n; i++ {
		ms = append(ms, fmt.Sprintf(`{"name":%q,"value":"1"}`, fmt.Sprintf("%s%d", name, i)))
	}
	return `{"trainerStatus":{"metrics":[` + strings.Join(ms, ",") + `],"lastUpdatedTime":"2026-12-05T03:59:00Z"}}`
}

func TestStatusEndpointAnswers(t *testing.T) {
	valid := mint(t, agentKey, "slurm-1", "uid-train", 2, now.Add(time.Hour))
	cases := map[string]struct {
		job, token, body string
		chunked          bool
		wantCode         int
		wantReason       metav1.StatusReason
		wantStored       bool
	}{
		"the job's own credential": {job: "train", token: valid, body: validBody, wantCode: http.StatusOK, wantStored: true},
		"no report is no write":    {job: "train", token: valid, body: `{}`, wantCode: http.StatusOK},
		"no credential":            {job: "train", body: validBody, wantCode: http.StatusForbidden, wantReason: metav1.StatusReasonForbidden},
		"not a credential":         {job: "train", token: "abc.def.ghi", body: validBody, wantCode: http.StatusForbidden, wantReason: metav1.StatusReasonForbidden},
		"signed by another agent's key": {job: "train", token: mint(t, bytes.Repeat([]byte("x"), MinKeyBytes), "slurm-1", "uid-train", 2, now.Add(time.Hour)),
			body: validBody, wantCode: http.StatusForbidden, wantReason: metav1.StatusReasonForbidden},
		"minted for another target": {job: "train", token: mint(t, agentKey, "slurm-2", "uid-train", 2, now.Add(time.Hour)),
			body: validBody, wantCode: http.StatusForbidden, wantReason: metav1.StatusReasonForbidden},
		"expired": {job: "train", token: mint(t, agentKey, "slurm-1", "uid-train", 2, now),
			body: validBody, wantCode: http.StatusForbidden, wantReason: metav1.StatusReasonForbidden},
		"another job's name": {job: "other", token: valid, body: validBody, wantCode: http.StatusForbidden, wantReason: metav1.StatusReasonForbidden},
		"an older attempt": {job: "train", token: mint(t, agentKey, "slurm-1", "uid-train", 1, now.Add(time.Hour)),
			body: validBody, wantCode: http.StatusForbidden, wantReason: metav1.StatusReasonForbidden},
		"a Dispatch that is gone": {job: "train", token: mint(t, agentKey, "slurm-1", "uid-gone", 2, now.Add(time.Hour)),
			body: validBody, wantCode: http.StatusNotFound, wantReason: metav1.StatusReasonNotFound},
		"oversized body": {job: "train", token: valid, body: validBody + strings.Repeat(" ", MaxBodyBytes),
			wantCode: http.StatusRequestEntityTooLarge, wantReason: metav1.StatusReasonRequestEntityTooLarge},
		"oversized chunked body": {job: "train", token: valid, chunked: true, body: `{"trainerStatus":{"metrics":[` + strings.Repeat(`{"name":"a","value":"b"},`, 4000),
			wantCode: http.StatusRequestEntityTooLarge, wantReason: metav1.StatusReasonRequestEntityTooLarge},
		"malformed body":         {job: "train", token: valid, body: `{"trainerStatus":`, wantCode: http.StatusUnprocessableEntity, wantReason: metav1.StatusReasonInvalid},
		"wrong type":             {job: "train", token: valid, body: `{"trainerStatus":{"progressPercentage":"half"}}`, wantCode: http.StatusUnprocessableEntity, wantReason: metav1.StatusReasonInvalid},
		"progress over 100":      {job: "train", token: valid, body: `{"trainerStatus":{"progressPercentage":101,"lastUpdatedTime":"2026-12-05T03:59:00Z"}}`, wantCode: http.StatusUnprocessableEntity, wantReason: metav1.StatusReasonInvalid},
		"negative remaining":     {job: "train", token: valid, body: `{"trainerStatus":{"estimatedRemainingSeconds":-1,"lastUpdatedTime":"2026-12-05T03:59:00Z"}}`, wantCode: http.StatusUnprocessableEntity, wantReason: metav1.StatusReasonInvalid},
		"no lastUpdatedTime":     {job: "train", token: valid, body: `{"trainerStatus":{"progressPercentage":5}}`, wantCode: http.StatusUnprocessableEntity, wantReason: metav1.StatusReasonInvalid},
		"too many metrics":       {job: "train", token: valid, body: metricsBody(MaxMetrics+1, "m"), wantCode: http.StatusUnprocessableEntity, wantReason: metav1.StatusReasonInvalid},
		"as many metrics as may": {job: "train", token: valid, body: metricsBody(MaxMetrics, "m"), wantCode: http.StatusOK, wantStored: true},
		"metric name too long":   {job: "train", token: valid, body: metricsBody(1, strings.Repeat("n", MaxMetricFieldLen)), wantCode: http.StatusUnprocessableEntity, wantReason: metav1.StatusReasonInvalid},
		"empty metric value": {job: "train", token: valid, body: `{"trainerStatus":{"metrics":[{"name":"loss","value":""}],"lastUpdatedTime":"2026-12-05T03:59:00Z"}}`,
			wantCode: http.StatusUnprocessableEntity, wantReason: metav1.StatusReasonInvalid},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			srv, reports := statusServer(t)
			var body io.Reader = strings.NewReader(tc.body)
			if tc.chunked {
				body = io.MultiReader(body) // unknown length: sent chunked
			}
			req, err := http.NewRequest(http.MethodPost, srv.URL+statusserver.StatusUrl("team-a", tc.job), body)
			if err != nil {
				t.Fatal(err)
			}
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.wantCode {
				t.Fatalf("code = %d, want %d: %s", resp.StatusCode, tc.wantCode, raw)
			}
			if tc.wantCode == http.StatusOK {
				var echo, sent trainer.UpdateTrainJobStatusRequest
				_ = json.Unmarshal(raw, &echo)
				_ = json.Unmarshal([]byte(tc.body), &sent)
				if diff := cmp.Diff(sent, echo); diff != "" {
					t.Errorf("echo (-sent +answered):\n%s", diff)
				}
			} else {
				var st metav1.Status
				if err := json.Unmarshal(raw, &st); err != nil || st.Reason != tc.wantReason || st.Code != int32(tc.wantCode) {
					t.Errorf("answer = %s, want a Status with reason %s", raw, tc.wantReason)
				}
			}
			stored := reports.Due("uid-train", now, true) != nil || reports.Due("uid-other", now, true) != nil
			if stored != tc.wantStored {
				t.Errorf("stored = %v, want %v", stored, tc.wantStored)
			}
		})
	}
}

func TestUnknownPathIsNotFound(t *testing.T) {
	srv, _ := statusServer(t)
	resp, err := srv.Client().Post(srv.URL+"/apis/other", "application/json", strings.NewReader(validBody))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("code = %d, want 404", resp.StatusCode)
	}
}
