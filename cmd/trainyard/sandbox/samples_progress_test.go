package sandbox

import (
	"context"
	"encoding/pem"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/kubeflow/trainer/v2/pkg/statusserver"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tyt "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/spoke/statusapi"
)

// fakeTorch stands for PyTorch in one process: world of 1, all-reduce of
// one rank. The program's own code (reporting) is what runs for real.
var fakeTorch = map[string]string{
	"torch/__init__.py": `class _T:
    def __init__(self, v): self.v = list(v)
    def item(self): return self.v[0]
def tensor(v): return _T(v)
`,
	"torch/distributed.py": `def init_process_group(backend): pass
def get_rank(): return 0
def get_world_size(): return 1
def all_reduce(t): pass
def barrier(): pass
def destroy_process_group(): pass
`,
}

// acceptAll speaks for the Dispatch "uid-sample" attempt 1 whatever the token.
type acceptAll struct{}

func (acceptAll) Authenticate(_ context.Context, token, _, _ string) (statusapi.Caller, error) {
	if token != "sample-token" {
		return statusapi.Caller{}, statusapi.ErrBadToken
	}
	return statusapi.Caller{Dispatch: "uid-sample", Attempt: 1}, nil
}

type oneDispatch struct{ d *v1alpha1.Dispatch }

func (o oneDispatch) ByUID(_ context.Context, uid types.UID) (*v1alpha1.Dispatch, error) {
	if uid == o.d.UID {
		return o.d, nil
	}
	return nil, nil
}

// TestTorchSampleReportsProgress runs TorchSampleProgram with Python's
// standard library and a stand-in torch: with Trainer's three variables it
// posts reports the agent's status endpoint accepts (Trainer's bounds), the
// last one at 100%; without them, or with an endpoint that refuses, it
// trains to the end all the same.
func TestTorchSampleReportsProgress(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	dir := t.TempDir()
	for name, body := range fakeTorch {
		p := filepath.Join(dir, "py", name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d := tyt.MakeDispatch("sample", "agents", "hpc").Phase(v1alpha1.DispatchRunning).Obj()
	d.UID, d.Spec.TrainJob.Name = "uid-sample", TorchSample
	reports := statusapi.NewReports(0)
	srv := httptest.NewTLSServer((&statusapi.Server{Target: "hpc", Auth: acceptAll{}, Dispatches: oneDispatch{d}, Reports: reports,
		Log: logr.Discard()}).Handler())
	defer srv.Close()
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("sample-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(env ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, python, "-c", TorchSampleProgram)
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "PYTHONPATH=" + filepath.Join(dir, "py"), "SAMPLE_STEP_SECONDS=0"}, env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the sample failed: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), "allreduce rank=0 world=1 sum=1") {
			t.Errorf("the sample did not train to the end:\n%s", out)
		}
		return string(out)
	}
	// 127.0.0.1 is in httptest's certificate.
	url := srv.URL + statusserver.StatusUrl(SampleNamespace, TorchSample)
	out := run("KUBEFLOW_TRAINER_SERVER_URL="+url, "KUBEFLOW_TRAINER_SERVER_TOKEN="+token, "KUBEFLOW_TRAINER_SERVER_CA_CERT="+ca)
	if n := strings.Count(out, "reported: 200"); n != 6 {
		t.Errorf("%d reports accepted, want 6:\n%s", n, out)
	}
	last := reports.Due(d.UID, time.Now(), true)
	if last == nil || ptr.Deref(last.ProgressPercentage, 0) != 100 || last.EstimatedRemainingSeconds == nil || len(last.Metrics) != 2 {
		t.Errorf("last report kept = %+v, want 100%% with an ETA, loss and step", last)
	}

	if out := run(); strings.Contains(out, "report") || strings.Contains(out, "Kubeflow") {
		t.Errorf("without Trainer's variables the sample reported:\n%s", out)
	}
	if out := run("KUBEFLOW_TRAINER_SERVER_URL="+url, "KUBEFLOW_TRAINER_SERVER_TOKEN="+filepath.Join(dir, "missing"),
		"KUBEFLOW_TRAINER_SERVER_CA_CERT="+ca); strings.Count(out, "Unable to send trainer status") != 6 {
		t.Errorf("a failing report should be printed and training go on:\n%s", out)
	}
}
