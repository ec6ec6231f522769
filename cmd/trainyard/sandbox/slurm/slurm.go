// Package slurm runs a real single-host Slurm 24.11 cluster (4 emulated GPU nodes plus
// slurmrestd) for integration tests and local sandboxes, and further ones beside it
// (Options.Instance), each with ports of its own.
//
// The cluster lives in a clone of a Debian trixie chroot built by hack/slurm/build-root.sh,
// because the host's Debian 12 ships a Slurm too old for the REST API versions trainyard
// speaks. The built chroot is only ever copied: every instance runs in a clone of its own
// (hack/slurm/clone-root.sh), so no chroot is configured while another is copied from it.
// This package only drives the scripts in hack/slurm, so that a human can run the very
// same cluster by hand. Everything needs root (chroot, mount).
package slurm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	slurmrest "github.com/trainyard-dev/trainyard/backends/slurm"
	"github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
)

// DefaultURL is where start.sh binds the first cluster's slurmrestd; the chroot shares
// the host network.
const DefaultURL = "http://127.0.0.1:6820"

// MaxInstance is the highest Options.Instance.
const MaxInstance = 9

// Ports of instance 0; instance n adds portStride·n to each (configure.sh's PORT_OFFSET).
const (
	restPort   = 6820
	portStride = 10
)

// Options tune Start. The zero value is a 4-node cluster with tree topology.
type Options struct {
	// Root is the built chroot the instance's clone is made from. Empty:
	// $TRAINYARD_SLURM_ROOT, else <repo>/bin/slurm-root.
	Root string
	// Topology is "tree" (default), "block" or "none" (configure.sh's TOPO).
	Topology string
	// StartTimeout bounds the wait for nodes and slurmrestd (default 120s).
	StartTimeout time.Duration
	// MinJobAge is how long slurmctld keeps a finished job before only
	// slurmdbd (accounting, /slurmdb/ in slurmrestd) knows it: default
	// 300s (Slurm's); a few seconds makes it forget as a busy cluster
	// does. slurmctld purges such jobs about once a minute.
	MinJobAge time.Duration
	// Log receives the scripts' output (default os.Stderr).
	Log io.Writer
	// Instance picks which of the machine's harness clusters to run, each
	// in a clone of the chroot of its own (hack/slurm/clone-root.sh: /usr
	// hard-linked, its own keys, state, MariaDB and slurmdbd). 0 (default)
	// runs as ClusterName "trainyard", its slurmrestd at DefaultURL. n in
	// 1..MaxInstance runs as "trainyard<n>", every port moved up by 10·n
	// (slurmrestd 6820+10n). Each instance has a lock of its own, so
	// instances run side by side.
	Instance int
}

// Cluster is a running cluster. Stop it exactly once; it is also stopped when the
// process that started it dies (see startReaper).
type Cluster struct {
	// Root is the chroot clone holding the cluster (resolved, no symlinks).
	Root string
	// URL is the slurmrestd base URL.
	URL string
	// Name is the cluster's ClusterName.
	Name string

	repo   string
	log    io.Writer
	lock   *os.File
	reaper io.WriteCloser
	once   sync.Once
	err    error
}

// FindRoot returns the chroot to use: explicit, $TRAINYARD_SLURM_ROOT or <repo>/bin/slurm-root.
func FindRoot(explicit string) (string, error) {
	root := explicit
	if root == "" {
		root = os.Getenv("TRAINYARD_SLURM_ROOT")
	}
	if root == "" {
		repo, err := fleet.RepoRoot()
		if err != nil {
			return "", err
		}
		root = filepath.Join(repo, "bin", "slurm-root")
	}
	resolved, err := filepath.EvalSymlinks(root)
	if err == nil {
		_, err = os.Stat(filepath.Join(resolved, "usr", "sbin", "slurmrestd"))
	}
	if err != nil {
		return "", fmt.Errorf("slurm harness: no Slurm chroot at %s (%v): build it with `make slurm-root` (hack/slurm/build-root.sh, as root)", root, err)
	}
	return resolved, nil
}

// Start configures and starts the cluster and returns once all nodes are idle and
// slurmrestd answers. One cluster of an instance can run per machine (fixed ports), so
// Start waits for the instance's machine-wide lock that the previous owner's Stop, or
// its death, releases.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("slurm harness: must run as root (chroot and mount)")
	}
	if opts.Instance < 0 || opts.Instance > MaxInstance {
		return nil, fmt.Errorf("slurm harness: Instance must be 0..%d, got %d", MaxInstance, opts.Instance)
	}
	root, err := FindRoot(opts.Root)
	if err != nil {
		return nil, err
	}
	repo, err := fleet.RepoRoot()
	if err != nil {
		return nil, err
	}
	offset := portStride * opts.Instance
	c := &Cluster{Root: root, URL: fmt.Sprintf("http://127.0.0.1:%d", restPort+offset), Name: "trainyard", repo: repo, log: opts.Log}
	if c.log == nil {
		c.log = os.Stderr
	}
	lockName := "cluster.lock"
	if opts.Instance > 0 {
		c.Name += strconv.Itoa(opts.Instance)
		lockName = fmt.Sprintf("cluster-%d.lock", opts.Instance)
	}
	if c.lock, err = acquireLock(ctx, filepath.Join(filepath.Dir(root), lockName), c.log); err != nil {
		return nil, err
	}
	// Under the instance's lock: no other process configures this clone
	// meanwhile, and nothing ever configures the chroot it is copied from.
	if c.Root, err = c.clone(ctx, "c"+strconv.Itoa(opts.Instance)); err != nil {
		c.lock.Close()
		return nil, err
	}
	if c.reaper, err = c.startReaper(); err != nil {
		c.lock.Close()
		return nil, err
	}
	env := []string{"TOPO=" + opts.Topology, "CLUSTER_NAME=" + c.Name, "PORT_OFFSET=" + strconv.Itoa(offset)}
	if opts.Topology == "" {
		env[0] = "TOPO=tree"
	}
	if opts.MinJobAge > 0 {
		env = append(env, "MIN_JOB_AGE="+strconv.Itoa(max(int(opts.MinJobAge.Seconds()), 1)))
	}
	if opts.StartTimeout > 0 {
		env = append(env, "SLURM_START_TIMEOUT="+strconv.Itoa(int(opts.StartTimeout.Seconds())))
	}
	for _, script := range []string{"configure.sh", "start.sh"} {
		if err := c.script(ctx, script, env...); err != nil {
			_ = c.Stop()
			return nil, err
		}
	}
	return c, nil
}

// script runs hack/slurm/NAME ROOT, teeing its output to the log and keeping a tail for
// the error. WaitDelay guards against daemons that keep the output pipe open.
func (c *Cluster) script(ctx context.Context, name string, env ...string) error {
	return c.scriptArgs(ctx, name, nil, env...)
}

func (c *Cluster) scriptArgs(ctx context.Context, name string, args []string, env ...string) error {
	_, err := c.run(ctx, name, args, env...)
	return err
}

// run runs a script as scriptArgs does and returns the tail of its output.
func (c *Cluster) run(ctx context.Context, name string, args []string, env ...string) (string, error) {
	var tail tailBuffer
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(c.repo, "hack", "slurm", name), c.Root}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = io.MultiWriter(c.log, &tail)
	cmd.Stderr = cmd.Stdout
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("slurm harness: %s: %w\n%s", name, err, tail.String())
	}
	return tail.String(), nil
}

// clone makes (or reuses) the chroot clone NAME of c.Root with clone-root.sh, which
// prints its path last.
func (c *Cluster) clone(ctx context.Context, name string, env ...string) (string, error) {
	out, err := c.run(ctx, "clone-root.sh", []string{name}, env...)
	if err != nil {
		return "", err
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	dir := strings.TrimSpace(lines[len(lines)-1])
	if _, err := os.Stat(filepath.Join(dir, "usr", "sbin", "slurmrestd")); err != nil {
		return "", fmt.Errorf("slurm harness: clone-root.sh made no chroot at %q: %w", dir, err)
	}
	return dir, nil
}

// startReaper starts a detached shell that runs stop.sh once our end of its stdin closes
// without saying "done": when this process panics, is killed or times out, the daemons
// do not outlive it. A normal Stop writes "done" first.
func (c *Cluster) startReaper() (io.WriteCloser, error) {
	logf, err := os.OpenFile(filepath.Join(os.TempDir(), "trainyard-slurm-reaper.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	stop := filepath.Join(c.repo, "hack", "slurm", "stop.sh")
	cmd := exec.Command("bash", "-c", `read -r line; [ "$line" = done ] || exec bash "$0" "$1"`, stop, c.Root)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // survive a Ctrl-C to our group
	w, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = cmd.Wait() }()
	return w, nil
}

// Stop stops every daemon, unmounts the chroot's mounts and releases the lock.
func (c *Cluster) Stop() error {
	c.once.Do(func() {
		c.err = c.script(context.Background(), "stop.sh")
		if c.reaper != nil {
			_, _ = io.WriteString(c.reaper, "done\n")
			_ = c.reaper.Close()
		}
		if c.lock != nil {
			_ = c.lock.Close()
		}
	})
	return c.err
}

// EnableOCI lets the running cluster run OCI containers (srun --container
// with crun, rootless) and pull images from each registry, host:port on
// loopback over plain HTTP (hack/slurm/oci.sh). Jobs that ask for no
// container run on the bare nodes as before.
func (c *Cluster) EnableOCI(ctx context.Context, registries ...string) error {
	return c.scriptArgs(ctx, "oci.sh", registries)
}

// MakeWorkDirs makes each user's job directory for a Target's
// spec.slurm.workDir of the form /base/%u/leaf: /base owned by root, the
// user's two levels owned by the user, all readable by all (each job makes
// its own directory private). The cluster's nodes share one filesystem,
// the shared filesystem a site would give them.
func (c *Cluster) MakeWorkDirs(ctx context.Context, pattern string, users ...string) error {
	for _, u := range users {
		dir := strings.ReplaceAll(pattern, "%u", u)
		if _, err := c.Exec(ctx, "install", "-d", "-m", "0755", path.Dir(path.Dir(dir))); err != nil {
			return err
		}
		if _, err := c.Exec(ctx, "install", "-d", "-m", "0755", "-o", u, "-g", u, path.Dir(dir), dir); err != nil {
			return err
		}
	}
	return nil
}

// StopDaemon stops "slurmctld", "slurmrestd" or "slurmdbd" of the running
// cluster, as an outage would; StartDaemon brings it back (slurmctld with
// its saved state, so it still knows its jobs).
func (c *Cluster) StopDaemon(ctx context.Context, name string) error {
	return c.scriptArgs(ctx, "daemon.sh", []string{"stop", name})
}

// StartDaemon starts a daemon StopDaemon stopped.
func (c *Cluster) StartDaemon(ctx context.Context, name string) error {
	return c.scriptArgs(ctx, "daemon.sh", []string{"start", name})
}

// JWTKeyPath is the host path of the cluster's HS256 JWT key, which an
// agent with a SigningKey credential reads.
func (c *Cluster) JWTKeyPath() string { return c.Path("/etc/slurm/jwt_hs256.key") }

// RESTClient returns a slurmrestd client that acts as SlurmUser, minting
// its tokens from the cluster's key, for tests that inspect the cluster.
func (c *Cluster) RESTClient(version v1alpha1.SlurmAPIVersion) (*slurmrest.Client, error) {
	key := c.JWTKeyPath()
	src := &slurmrest.SigningKeySource{Key: func(context.Context) ([]byte, error) { return os.ReadFile(key) }}
	return slurmrest.NewClient(c.URL, version, src, "slurm", nil)
}

// Token returns a JWT for user, valid for lifespan, minted by slurmctld (`scontrol token`).
// Tokens are credentials: never log them; errors here never include them.
func (c *Cluster) Token(user string, lifespan time.Duration) (string, error) {
	secs := int(lifespan.Seconds())
	if secs < 1 {
		secs = 1
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command("chroot", c.Root, "scontrol", "token", "username="+user, "lifespan="+strconv.Itoa(secs))
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("slurm harness: scontrol token for %s: %w: %s", user, err, strings.TrimSpace(stderr.String()))
	}
	for _, line := range strings.Split(stdout.String(), "\n") {
		if tok, ok := strings.CutPrefix(strings.TrimSpace(line), "SLURM_JWT="); ok && tok != "" {
			return tok, nil
		}
	}
	return "", fmt.Errorf("slurm harness: scontrol token for %s printed no SLURM_JWT line", user)
}

// Exec runs a command inside the chroot as root (e.g. "sinfo", "-N") and returns its
// combined output.
func (c *Cluster) Exec(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "chroot", append([]string{c.Root}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("slurm harness: %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return out, nil
}

// ExecAs runs a command inside the chroot as user, from the user's home, as a tenant
// using sbatch/srun would.
func (c *Cluster) ExecAs(ctx context.Context, user string, args ...string) ([]byte, error) {
	return c.Exec(ctx, append([]string{"runuser", "-u", user, "--", "env", "-C", "/home/" + user}, args...)...)
}

// Path maps an absolute path inside the chroot to the host, e.g. to read job output.
func (c *Cluster) Path(p string) string { return filepath.Join(c.Root, p) }

// acquireLock takes an exclusive flock, polling so that ctx can cancel the wait. The
// kernel drops it when the process dies, so a crashed run never blocks the next one.
// It says once on log that it waits.
func acquireLock(ctx context.Context, path string, log io.Writer) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	waited, said := time.Now(), false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			if d := time.Since(waited); d > time.Second {
				fmt.Fprintf(log, "[slurm] got %s after %v\n", path, d.Round(time.Second))
			}
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("slurm harness: lock %s: %w", path, err)
		}
		if !said {
			fmt.Fprintf(log, "[slurm] waiting for %s: another process runs this cluster instance\n", path)
			said = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("slurm harness: another cluster holds %s: %w", path, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// tailBuffer keeps the last 4 KiB written to it, for error messages.
type tailBuffer struct{ b []byte }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > 4096 {
		t.b = t.b[len(t.b)-4096:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(t.b) }
