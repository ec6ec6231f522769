package v1alpha1

import "testing"

func TestRemoteRefString(t *testing.T) {
	cases := map[string]struct {
		ref  *RemoteRef
		want string
	}{
		"nil":          {ref: nil, want: ""},
		"JobSet":       {ref: &RemoteRef{Kind: "JobSet", Namespace: "jobs-team-a", Name: "x"}, want: "JobSet jobs-team-a/x"},
		"Slurm job":    {ref: &RemoteRef{Kind: "SlurmJob", Name: "x", ID: "42"}, want: "SlurmJob x (id 42)"},
		"no namespace": {ref: &RemoteRef{Kind: "LeaderWorkerSet", Name: "x"}, want: "LeaderWorkerSet x"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tc.ref.String(); got != tc.want {
				t.Errorf("String() = %q, want %q", got, tc.want)
			}
		})
	}
}
