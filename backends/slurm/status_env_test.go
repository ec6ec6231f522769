package slurm

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestStatusPreludeGivesTrainersVariables: with the agent's status
// environment, the script header writes the credential and CA into a 0700
// directory of the work directory as 0600 files, exports Trainer's three
// variables in place of a tenant's own, and leaves the raw credential out
// of what the job's programs inherit; the directory goes when the script
// ends.
func TestStatusPreludeGivesTrainersVariables(t *testing.T) {
	bash := requireBash(t)
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "env")
	script := scriptHeader + `env > "$OUT"
stat -c %a "$(dirname "$KUBEFLOW_TRAINER_SERVER_TOKEN")" "$KUBEFLOW_TRAINER_SERVER_TOKEN" "$KUBEFLOW_TRAINER_SERVER_CA_CERT" > "$OUT.modes"
cp "$KUBEFLOW_TRAINER_SERVER_TOKEN" "$OUT.KUBEFLOW_TRAINER_SERVER_TOKEN"
cp "$KUBEFLOW_TRAINER_SERVER_CA_CERT" "$OUT.KUBEFLOW_TRAINER_SERVER_CA_CERT"
`
	cmd := exec.Command(bash, "-c", script)
	cmd.Env = []string{"OUT=" + out, "SLURM_JOB_ID=7", EnvWorkDir + "=" + work,
		"TRAINYARD_STATUS_URL=https://127.0.0.1:9443/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs/train/status",
		"TRAINYARD_STATUS_TOKEN=tyst1.secret.sig", "TRAINYARD_STATUS_CA=-----BEGIN CERTIFICATE-----",
		"KUBEFLOW_TRAINER_SERVER_URL=https://tenant.example/steal"}
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("script: %v\n%s", err, b)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, l := range strings.Split(string(raw), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			env[k] = v
		}
	}
	if got := env["KUBEFLOW_TRAINER_SERVER_URL"]; !strings.HasPrefix(got, "https://127.0.0.1:9443/") {
		t.Errorf("KUBEFLOW_TRAINER_SERVER_URL = %q, want the agent's", got)
	}
	for _, name := range []string{"TRAINYARD_STATUS_TOKEN", "TRAINYARD_STATUS_CA", "TRAINYARD_STATUS_URL"} {
		if _, ok := env[name]; ok {
			t.Errorf("%s passed on to the job's programs", name)
		}
	}
	for name, want := range map[string]string{"KUBEFLOW_TRAINER_SERVER_TOKEN": "tyst1.secret.sig", "KUBEFLOW_TRAINER_SERVER_CA_CERT": "-----BEGIN CERTIFICATE-----"} {
		path := env[name]
		if !strings.HasPrefix(path, work+"/.trainyard-job.7.") {
			t.Errorf("%s = %q, want a file in the job's directory under %s", name, path, work)
			continue
		}
		if b, _ := os.ReadFile(out + "." + name); string(b) != want {
			t.Errorf("%s held %q, want %q", name, b, want)
		}
		if _, err := os.Stat(filepath.Dir(path)); !os.IsNotExist(err) {
			t.Errorf("the job's status directory outlived the script: %v", err)
		}
	}
	modes, _ := os.ReadFile(out + ".modes")
	if got := strings.Fields(string(modes)); strings.Join(got, " ") != "700 600 600" {
		t.Errorf("modes of dir, token, CA = %v, want 700 600 600", got)
	}
}
