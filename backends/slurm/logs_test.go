package slurm

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"k8s.io/utils/ptr"
)

func TestReadOwnedTail(t *testing.T) {
	dir := t.TempDir()
	me := uint32(os.Getuid())
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	out := write("job.1.out", "one\ntwo\nthree\n")
	secret := write("other-users-file", "secret\n")
	link := filepath.Join(dir, "job.2.out")
	if err := os.Symlink(secret, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "job.3.out")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		path    string
		uid     uint32
		limit   int64
		want    string
		cut     bool
		wantErr string
	}{
		"whole file":               {path: out, uid: me, limit: 1024, want: "one\ntwo\nthree\n"},
		"limit keeps the end":      {path: out, uid: me, limit: 8, want: "three\n", cut: true},
		"no limit":                 {path: out, uid: me, want: "one\ntwo\nthree\n"},
		"symlink is not followed":  {path: link, uid: me, limit: 1024, wantErr: "symlink"},
		"fifo does not hang":       {path: fifo, uid: me, limit: 1024, wantErr: "not a regular file"},
		"someone else's file":      {path: out, uid: me + 4242, limit: 1024, wantErr: "not owned by the job's user"},
		"missing file is reported": {path: filepath.Join(dir, "nope"), uid: me, limit: 1024, wantErr: "nope: no such file"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			data, cut, err := readOwnedTail(dir, filepath.Base(tc.path), tc.uid, tc.limit)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q (data %q)", err, tc.wantErr, data)
				}
				return
			}
			if err != nil || string(data) != tc.want || cut != tc.cut {
				t.Fatalf("= %q, cut %v, %v; want %q, cut %v", data, cut, err, tc.want, tc.cut)
			}
		})
	}
}

func TestOutputPath(t *testing.T) {
	cases := map[string]struct {
		job     JobInfo
		want    string
		wantErr bool
	}{
		"working directory":     {job: JobInfo{JobID: 7, Name: "a-1", WorkDir: "/scratch/jobs"}, want: "/scratch/jobs/a-1.7.out"},
		"default /tmp":          {job: JobInfo{JobID: 7, Name: "a-1"}, want: "/tmp/a-1.7.out"},
		"relative directory":    {job: JobInfo{JobID: 7, Name: "a", WorkDir: "scratch"}, wantErr: true},
		"unclean directory":     {job: JobInfo{JobID: 7, Name: "a", WorkDir: "/tmp/../etc"}, wantErr: true},
		"name with a slash":     {job: JobInfo{JobID: 7, Name: "../../etc/passwd", WorkDir: "/tmp"}, wantErr: true},
		"empty name":            {job: JobInfo{JobID: 7, WorkDir: "/tmp"}, wantErr: true},
		"user id is not needed": {job: JobInfo{JobID: 8, Name: "b", WorkDir: "/tmp", UserID: ptr.To[int32](1000)}, want: "/tmp/b.8.out"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := outputPath(&tc.job, "out")
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("= %q, %v; want %q (error %v)", got, err, tc.want, tc.wantErr)
			}
		})
	}
}
