package util

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	trainyard "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/controllers"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
)

// FleetSuite is what a suite's fleet holds and how trainyard runs on it.
// RunFleetSuite brings it up in this order: the logger, the fleet, each
// spoke's kwok nodes, the queues, SetUp, trainyard (Options), Started.
type FleetSuite struct {
	// Fleet sizes the fleet; its Dir defaults to $TRAINYARD_ARTIFACTS.
	Fleet kube.FleetOptions
	// Timeout bounds the suite's context, start-up and tests alike (none
	// if 0).
	Timeout time.Duration
	// LogFile is the file in $TRAINYARD_ARTIFACTS the in-process hub and
	// agents log to (LogSink; default trainyard-controllers.log), and
	// LogAlso a second writer of the same lines. KeepLogger leaves
	// controller-runtime's logger as the suite set it.
	LogFile    string
	LogAlso    io.Writer
	KeepLogger bool
	// Nodes are the kwok nodes added to each spoke (none if nil).
	Nodes func(spoke *kube.Cluster) []kube.NodeSpec
	// NodesReady waits until each spoke's nodes are Ready, and keeps a
	// client of the spoke reading through an informer cache, as the
	// agent's manager does, in FleetEnv.Cached (SetUpSpoke).
	NodesReady bool
	// Queues are set up on the hub after the nodes.
	Queues []trainyard.Queue
	// SetUp runs after the queues, before trainyard starts.
	SetUp func(ctx context.Context, e *FleetEnv) error
	// Options start trainyard's hub and agents in this process; they are
	// read after SetUp, which may fill them in. Nil starts none.
	Options *trainyard.Options
	// Started runs once trainyard runs, before the tests.
	Started func(ctx context.Context, e *FleetEnv) error
	// Teardown runs after the controllers stop, before a failed suite's
	// logs are dumped and the fleet stops.
	Teardown func(code int)
}

// FleetEnv is a running suite's fleet and trainyard, as its hooks see it.
type FleetEnv struct {
	*kube.Fleet
	// Controllers are trainyard's hub and agents, once started.
	Controllers *trainyard.Controllers
	// Cached are the spokes' informer-cached clients, by name (NodesReady).
	Cached map[string]client.Client
}

// RunFleetSuite is the TestMain of a suite on a fleet: it starts the
// fleet and trainyard as s says, runs the tests, and stops the
// controllers, then the fleet, dumping every cluster's logs if the suite
// failed. It returns the suite's exit code.
func RunFleetSuite(m *testing.M, s FleetSuite) (code int) {
	if !s.KeepLogger {
		var w io.Writer = LogSink(cmp.Or(s.LogFile, "trainyard-controllers.log"))
		if s.LogAlso != nil {
			w = io.MultiWriter(w, s.LogAlso)
		}
		ctrllog.SetLogger(zap.New(zap.WriteTo(w), zap.UseDevMode(true)))
	}
	parent := context.Background()
	if s.Timeout > 0 {
		var stop context.CancelFunc
		parent, stop = context.WithTimeout(parent, s.Timeout)
		defer stop()
	}
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	s.Fleet.Dir = cmp.Or(s.Fleet.Dir, os.Getenv("TRAINYARD_ARTIFACTS"))
	f, err := kube.StartFleet(ctx, s.Fleet)
	if err != nil {
		fmt.Fprintln(os.Stderr, "start fleet:", err)
		return 1
	}
	fmt.Printf("fleet of hub + %d spokes started in %v\n", len(f.Spokes), f.StartDuration.Round(100*time.Millisecond))
	e := &FleetEnv{Fleet: f, Cached: map[string]client.Client{}}
	defer func() {
		if e.Controllers != nil {
			e.Controllers.Stop()
		}
		if s.Teardown != nil {
			s.Teardown(code)
		}
		DumpLogsOnFailure(code, append([]*kube.Cluster{f.Hub}, f.Spokes...)...)
		cancel() // close the spokes' cache watches before the API servers stop
		_ = f.Stop()
	}()
	t0 := time.Now()
	if err := s.setUp(ctx, e); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("nodes, queues and trainyard ready in %v\n", time.Since(t0).Round(100*time.Millisecond))
	return m.Run()
}

// setUp brings up what runs on the started fleet of e, in the order
// FleetSuite states.
func (s FleetSuite) setUp(ctx context.Context, e *FleetEnv) error {
	if err := s.addNodes(ctx, e); err != nil {
		return err
	}
	for _, q := range s.Queues {
		if err := trainyard.SetUpQueue(ctx, e.Hub, q); err != nil {
			return fmt.Errorf("set up queues: %w", err)
		}
	}
	if s.SetUp != nil {
		if err := s.SetUp(ctx, e); err != nil {
			return err
		}
	}
	if s.Options != nil {
		var err error
		if e.Controllers, err = trainyard.Start(ctx, e.Fleet, *s.Options); err != nil {
			return fmt.Errorf("start trainyard: %w", err)
		}
	}
	if s.Started != nil {
		return s.Started(ctx, e)
	}
	return nil
}

// addNodes adds each spoke's kwok nodes, waiting until they are Ready
// with NodesReady.
func (s FleetSuite) addNodes(ctx context.Context, e *FleetEnv) error {
	if s.Nodes == nil {
		return nil
	}
	for _, spoke := range e.Spokes {
		nodes := s.Nodes(spoke)
		if !s.NodesReady {
			if err := spoke.AddKwokNodes(ctx, nodes...); err != nil {
				return fmt.Errorf("add nodes: %w", err)
			}
			continue
		}
		cached, err := SetUpSpoke(ctx, spoke, nodes)
		if err != nil {
			return fmt.Errorf("set up spoke %s: %w", spoke.Name, err)
		}
		e.Cached[spoke.Name] = cached
	}
	return nil
}

// KwokNodes are n kwok nodes of gpus GPUs each on spoke, named
// <spoke>-gpu-<i>.
func KwokNodes(spoke *kube.Cluster, n int, gpus int64) []kube.NodeSpec {
	var nodes []kube.NodeSpec
	for i := range n {
		nodes = append(nodes, kube.NodeSpec{Name: fmt.Sprintf("%s-gpu-%d", spoke.Name, i), GPUs: gpus})
	}
	return nodes
}
