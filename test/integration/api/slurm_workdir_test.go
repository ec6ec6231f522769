package api

import (
	"context"
	"fmt"
	"testing"

	"k8s.io/utils/ptr"

	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// TestSlurmWorkDirValidation: spec.slurm.workDir is an absolute path of
// plain segments and %u, never climbing; the retention is bounded.
func TestSlurmWorkDirValidation(t *testing.T) {
	cases := map[string]struct {
		workDir   string
		retention *int32
		wantErr   string
	}{
		"per-user template":     {workDir: "/scratch/%u/trainyard"},
		"no placeholder":        {workDir: "/shared/trainyard/"},
		"relative":              {workDir: "scratch/%u", wantErr: "workDir must be an absolute path"},
		"climbing":              {workDir: "/scratch/%u/../../etc", wantErr: "workDir must not contain . or .. segments"},
		"a dot segment":         {workDir: "/scratch/./%u", wantErr: "workDir must not contain . or .. segments"},
		"double slash":          {workDir: "/scratch//%u", wantErr: "in non-empty segments"},
		"another placeholder":   {workDir: "/scratch/%j", wantErr: "the %u placeholder"},
		"shell text":            {workDir: "/scratch/$(id)", wantErr: "the %u placeholder"},
		"a space":               {workDir: "/scratch/my dir", wantErr: "the %u placeholder"},
		"retention of a year":   {workDir: "/scratch/%u", retention: ptr.To[int32](365)},
		"retention kept":        {workDir: "/scratch/%u", retention: ptr.To[int32](0)},
		"retention negative":    {workDir: "/scratch/%u", retention: ptr.To[int32](-1), wantErr: "outputRetentionDays"},
		"retention past 10 yrs": {workDir: "/scratch/%u", retention: ptr.To[int32](4000), wantErr: "outputRetentionDays"},
	}
	i := 0
	for name, tc := range cases {
		i++
		t.Run(name, func(t *testing.T) {
			tg := tytesting.MakeSlurmTarget(fmt.Sprintf("s-workdir-%d", i), "hpc", "gpu").Obj()
			tg.Spec.Slurm.WorkDir, tg.Spec.Slurm.OutputRetentionDays = tc.workDir, tc.retention
			err := k8sClient.Create(context.Background(), tg)
			checkAdmission(t, err, tc.wantErr)
			if err == nil && tc.retention == nil && ptr.Deref(tg.Spec.Slurm.OutputRetentionDays, -1) != 7 {
				t.Errorf("outputRetentionDays = %v, want the default 7", tg.Spec.Slurm.OutputRetentionDays)
			}
		})
	}
}
